//! Which endpoint a request came in on, and which handler answers its methods there: the
//! aggregate's and a single server's in [`crate::dispatch`], a virtual server's in
//! `crate::virtual_server`.

use std::sync::Arc;

use crate::context::McpContext;
use crate::dispatch::{Answer, Failure, Request};
use switchboard_core::scope::Caller;
use switchboard_core::table::Server;

/// Which endpoint a request came in on.
pub enum Target {
    /// `POST /mcp`: every server in the caller's scope, prefixed names.
    Aggregate,
    /// `POST /mcp/{prefix}`: one server, its own names, routed by the path alone.
    Single(Arc<Server>),
    /// `POST /mcp/{path}` of a virtual server: its servers' selected tools, as it presents them.
    Virtual(Arc<switchboard_core::virtual_server::VirtualServer>),
}

pub async fn dispatch(
    cx: &McpContext,
    caller: &Caller,
    target: &Target,
    request: Request,
) -> Result<Answer, Failure> {
    match target {
        Target::Aggregate => crate::dispatch::aggregate_method(cx, caller, request).await,
        Target::Single(server) => crate::dispatch::single_method(cx, caller, server, request).await,
        Target::Virtual(vs) => crate::virtual_server::method(cx, caller, vs, request).await,
    }
}

#[cfg(test)]
mod tests {
    //! Which server and name a call reaches from each endpoint, seen from the in-process
    //! upstream's side: `/mcp` parses the prefix (or asks the ownership map for an unprefixed
    //! name), `/mcp/{prefix}` routes by the path alone, a virtual server by its presentation.
    use serde_json::{Value, json};

    use super::*;
    use crate::test_support::{KEY, caller, served};
    use switchboard_core::errors::GatewayError;
    use switchboard_protocol::Era;
    use switchboard_upstream::SessionScope;
    use switchboard_upstream::test_upstream::TestUpstream;

    fn call(name: &str) -> Request {
        Request {
            method: "tools/call".into(),
            params: Some(json!({"name": name, "arguments": {}}).into()),
            era: Era::Rev2026,
            accepts_stream: false,
            session: SessionScope::default(),
            log_level: None,
        }
    }

    /// The name the upstream was last called with, and what the gateway answered.
    fn called(upstream: &TestUpstream, answer: Result<Answer, Failure>) -> (String, Value) {
        let result = match answer {
            Ok(Answer::Json(v)) => v,
            Ok(Answer::Relayed { result, .. }) => serde_json::from_str(result.get()).expect("JSON"),
            Ok(Answer::Written(text)) => serde_json::from_str(&text).expect("JSON"),
            Ok(Answer::Stream(_)) => panic!("a result, not a stream"),
            Err(e) => panic!("answered, not {e:?}"),
        };
        let sent = upstream.last_call().expect("a call went upstream").body;
        (
            sent["params"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            result,
        )
    }

    /// The refusal a call got: nothing went upstream for it.
    fn refused(upstream: &TestUpstream, answer: Result<Answer, Failure>) -> GatewayError {
        assert!(upstream.last_call().is_none(), "nothing called upstream");
        match answer {
            Err(Failure::Gateway(e)) => e,
            Err(Failure::Upstream(e, _)) => panic!("the gateway's refusal, not the upstream's {e}"),
            Ok(_) => panic!("refused"),
        }
    }

    #[tokio::test]
    async fn the_aggregate_routes_a_prefixed_name_by_parse() {
        let (upstream, cx) = served().await;
        let me = caller(&cx, KEY).await;
        let answer = dispatch(&cx, &me, &Target::Aggregate, call("up__anything")).await;
        let (name, result) = called(&upstream, answer);
        assert_eq!(name, "anything", "the prefix stays at the gateway");
        assert_eq!(result["called"], "anything");
        assert_eq!(upstream.rpc_methods(), ["tools/call"], "no listing first");
    }

    /// An unknown prefix, and the prefix of a server the key does not reach: the same "unknown
    /// tool", and no call upstream; only the record tells the refusal.
    #[tokio::test]
    async fn the_aggregate_hides_unknown_and_unreached_prefixes_alike() {
        let (upstream, cx) = served().await;
        let me = caller(&cx, KEY).await;
        let unknown = refused(
            &upstream,
            dispatch(&cx, &me, &Target::Aggregate, call("nowhere__echo")).await,
        );
        assert_eq!(unknown.outcome(), "tool_not_found");
        let far = caller(&cx, "s-far").await;
        let hidden = refused(
            &upstream,
            dispatch(&cx, &far, &Target::Aggregate, call("up__echo")).await,
        );
        assert_eq!(hidden.outcome(), "access_denied");
        assert_eq!(
            hidden.jsonrpc_error()["code"],
            unknown.jsonrpc_error()["code"]
        );
        assert_eq!(hidden.to_string(), "unknown tool: up__echo");
        // (A prefix that names no server in scope may still be a tool's own name: the servers
        // in scope are listed to judge it, and `up`'s never reached a call.)
        assert_eq!(upstream.rpc_methods(), ["tools/list"]);
    }

    /// An unprefixed name on `/mcp` is judged by the ownership map in the caller's scope: a
    /// cold replica lists the server first, then calls the tool its listing has.
    #[tokio::test]
    async fn the_aggregate_finds_an_unprefixed_names_owner() {
        let (upstream, cx) = served().await;
        let me = caller(&cx, KEY).await;
        let answer = dispatch(&cx, &me, &Target::Aggregate, call("echo")).await;
        let (name, _) = called(&upstream, answer);
        assert_eq!(name, "echo");
        assert_eq!(upstream.rpc_methods(), ["tools/list", "tools/call"]);
        let ghost = dispatch(&cx, &me, &Target::Aggregate, call("ghost")).await;
        match ghost {
            Err(Failure::Gateway(GatewayError::ToolNotFound { name })) => assert_eq!(name, "ghost"),
            other => panic!("not found, not {:?}", other.err()),
        }
    }

    /// `/mcp/{prefix}`: the server is the path's, and the name goes as it is, a `__` in it
    /// included (no prefix is parsed there).
    #[tokio::test]
    async fn a_single_server_takes_names_as_they_are() {
        let (upstream, cx) = served().await;
        let me = caller(&cx, KEY).await;
        let up = Target::Single(me.server_for_path("up").expect("reached"));
        for name in ["anything", "up__anything"] {
            let (sent, result) = called(&upstream, dispatch(&cx, &me, &up, call(name)).await);
            assert_eq!(sent, name);
            assert_eq!(result["called"], name);
        }
    }

    /// A virtual server's names are its presentation: a renamed tool reaches its own name, a
    /// tool it does not select is not there.
    #[tokio::test]
    async fn a_virtual_server_routes_its_presented_names() {
        let (upstream, cx) = served().await;
        let me = caller(&cx, KEY).await;
        let desk = Target::Virtual(me.virtual_for_path("desk").expect("reached"));
        let (sent, _) = called(&upstream, dispatch(&cx, &me, &desk, call("plain")).await);
        assert_eq!(sent, "typed");
        let (sent, _) = called(&upstream, dispatch(&cx, &me, &desk, call("echo")).await);
        assert_eq!(sent, "echo");
        let before = upstream.seen().len();
        match dispatch(&cx, &me, &desk, call("anything")).await {
            Err(Failure::Gateway(GatewayError::ToolNotFound { name })) => {
                assert_eq!(name, "anything")
            }
            other => panic!("not found, not {:?}", other.err()),
        }
        assert_eq!(upstream.seen().len(), before, "nothing went upstream");
    }
}
