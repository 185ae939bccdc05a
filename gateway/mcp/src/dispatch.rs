//! What each MCP method does, whatever era and endpoint it arrived on. The endpoint module
//! handles HTTP, eras and sessions; this module turns one method call into upstream requests.

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::aggregate;
use crate::context::McpContext;
use crate::relay::{Relay, UpstreamRequest};
use switchboard_core::errors::GatewayError;
use switchboard_core::route::{
    is_ui_uri, prefix_task_id, prefix_ui_contents, split_prefixed, split_prefixed_uri,
};
use switchboard_core::scope::{Caller, decide_owner};
use switchboard_core::table::Server;
use switchboard_protocol::{Era, Params, RawResult, may_require_input, named_field};
use switchboard_upstream::UpstreamCall;
use switchboard_upstream::error::UpstreamError;
use switchboard_upstream::listing::ListKind;
use switchboard_upstream::{RpcOutcome, RpcResult, SessionScope};

/// One client request, as far as the methods care: what it asks and how it may be answered.
pub struct Request {
    pub method: String,
    pub params: Option<Params>,
    /// The client's era.
    pub era: Era,
    /// The client accepts an SSE answer.
    pub accepts_stream: bool,
    /// The legacy upstream session its requests use.
    pub session: SessionScope,
    /// A legacy client's log level, for 2026-07-28 upstreams.
    pub log_level: Option<&'static str>,
}

impl Request {
    pub(crate) fn upstream_call<'a>(
        &self,
        method: &'a str,
        params: Option<Params>,
    ) -> UpstreamCall<'a> {
        UpstreamCall {
            method,
            params,
            // Listings are read whole: the gateway filters them.
            stream: self.accepts_stream && ListKind::from_method(method).is_none(),
            session: self.session,
            modern_client: self.era == Era::Rev2026,
            log_level: self.log_level,
        }
    }
}

/// Why a method produced no result.
#[derive(Debug)]
pub enum Failure {
    Gateway(GatewayError),
    /// The upstream's own JSON-RPC error object, passed on unchanged, with its HTTP status.
    Upstream(Value, StatusCode),
}

impl From<GatewayError> for Failure {
    fn from(e: GatewayError) -> Self {
        Failure::Gateway(e)
    }
}

impl From<UpstreamError> for Failure {
    fn from(e: UpstreamError) -> Self {
        Failure::Gateway(e.into())
    }
}

/// A method's result: a JSON value, JSON text written already, an upstream's result passed on
/// as it came, or an upstream's stream to relay event by event.
pub enum Answer {
    Json(Value),
    /// A result written as JSON text already, passed on as it is: a merged listing, or an
    /// upstream's result written for a legacy client (without the 2026-07-28 members) by the
    /// one read that decided it could be passed on.
    Written(String),
    /// An upstream's result, unchanged; whether it names its `resultType` (a 2026-07-28 client
    /// needs one).
    Relayed {
        result: RawResult,
        has_result_type: bool,
    },
    Stream(Box<Relay>),
}

impl Answer {
    /// Whether a `tools/call` answer is a result that says `isError` (a stream tells its own,
    /// in the relay).
    pub fn is_tool_error(&self) -> bool {
        match self {
            Answer::Json(result) => result.get("isError") == Some(&Value::Bool(true)),
            Answer::Relayed { result, .. } => {
                switchboard_protocol::jsonrpc::is_tool_error(result.get())
            }
            Answer::Written(text) => switchboard_protocol::jsonrpc::is_tool_error(text),
            Answer::Stream(_) => false,
        }
    }
}

pub(crate) async fn aggregate_method(
    cx: &McpContext,
    caller: &Caller,
    mut request: Request,
) -> Result<Answer, Failure> {
    let params = request.params.take();
    let method = request.method.as_str();
    if let Some(kind) = ListKind::from_method(method) {
        let cursor = params.as_ref().and_then(|p| p.str_member("cursor"));
        return Ok(Answer::Written(
            aggregate::list(cx, caller, kind, cursor.as_deref(), request.era).await?,
        ));
    }
    let Some(field) = named_field(method) else {
        return Err(GatewayError::MethodNotFound(method.to_string()).into());
    };
    let mut params = params.unwrap_or_else(|| Params::from(json!({})));
    // (The name is read where it is, not copied: its last use is before the member is set.)
    let (server, upstream_name, read_whole) = {
        let name = params.str_member(field).ok_or_else(|| {
            GatewayError::InvalidParams(format!("params.{field} must be a string"))
        })?;
        let (server, upstream_name) = match field {
            "taskId" => route_prefixed(caller, "task", &name)?,
            "uri" => route_prefixed(caller, "resource", &name)?,
            _ => route_name(cx, caller, method, &name).await?,
        };
        // A UI resource's contents name it as this endpoint does: read whole to be renamed.
        let read_whole = method == "resources/read" && is_ui_uri(&name);
        (server, upstream_name, read_whole)
    };
    params.set_member(field, Value::from(upstream_name));
    let mut upstream_call = request.upstream_call(method, Some(params));
    if read_whole {
        upstream_call.stream = false;
    }
    answer_from_upstream(cx, caller, &server, upstream_call, true).await
}

/// On the aggregate endpoint a task id is `<prefix>__<upstream task id>` (the gateway prefixed
/// it when the task was created) and a resource URI `<prefix>__<upstream URI>`, or for an MCP
/// Apps UI resource `ui://<prefix>__<rest>` (see `switchboard_core::route`): any replica routes
/// them by parse, like a tool name. `kind` names what was not found.
fn route_prefixed(
    caller: &Caller,
    kind: &'static str,
    name: &str,
) -> Result<(Arc<Server>, String), GatewayError> {
    let unknown = || GatewayError::NotFound {
        kind,
        name: name.to_string(),
    };
    let (prefix, upstream_name) = split_prefixed_uri(name).ok_or_else(unknown)?;
    let server = caller
        .server_in_scope(prefix)
        .ok_or_else(|| caller.unreached_prefix(name, unknown()))?;
    Ok((server.clone(), upstream_name.into_owned()))
}

/// Finds the server for a name on the aggregate endpoint: a prefix is parsed against the
/// snapshot; an unprefixed tool name is judged by the ownership map within the caller's scope.
/// A name found nowhere whose prefix names a server the caller does not reach is answered the
/// same, and recorded as the refusal for scope it is.
pub async fn route_name(
    cx: &McpContext,
    caller: &Caller,
    method: &str,
    name: &str,
) -> Result<(Arc<Server>, String), GatewayError> {
    match route_in_scope(cx, caller, method, name).await {
        Err(e @ (GatewayError::ToolNotFound { .. } | GatewayError::NotFound { .. })) => {
            Err(caller.unreached_prefix(name, e))
        }
        routed => routed,
    }
}

async fn route_in_scope(
    cx: &McpContext,
    caller: &Caller,
    method: &str,
    name: &str,
) -> Result<(Arc<Server>, String), GatewayError> {
    let not_found = || match method {
        "tools/call" => GatewayError::ToolNotFound {
            name: name.to_string(),
        },
        "prompts/get" => GatewayError::NotFound {
            kind: "prompt",
            name: name.to_string(),
        },
        _ => GatewayError::NotFound {
            kind: "resource",
            name: name.to_string(),
        },
    };
    // A prefix naming a server in scope routes by parse alone.
    if let Some((prefix, rest)) = split_prefixed(name)
        && let Some(server) = caller.server_in_scope(prefix)
    {
        if method == "tools/call" {
            caller.check_tool(server, rest, not_found)?;
        }
        return Ok((server.clone(), rest.to_string()));
    }
    match method {
        "tools/call" => {
            let scope = caller.servers_in_scope();
            let owners = unprefixed_owners(cx, caller, &scope, name).await?;
            decide_owner(name, owners)
        }
        _ => Err(not_found()),
    }
}

/// Servers in scope whose tool listing has `name`, so a cold replica answers like a warm one:
/// servers with a shared credential are judged by the ownership map, after listing those this
/// replica never listed; servers whose catalog depends on the caller's credential are judged
/// by the caller's own listing (listed once with that credential, then cached per credential,
/// empty listings included). Servers outside the scope are never listed.
///
/// When no server owns the name but a caller-credential server refused the caller's
/// credential, the answer is that 401 (the caller must re-authenticate to see its tools), not
/// "unknown tool".
async fn unprefixed_owners(
    cx: &McpContext,
    caller: &Caller,
    scope: &[Arc<Server>],
    name: &str,
) -> Result<Vec<Arc<Server>>, GatewayError> {
    let personal = |s: &Server| cx.upstream.lists_tools_per_caller(s);
    let to_list: Vec<&Arc<Server>> = scope
        .iter()
        .filter(|s| personal(s) || !cx.upstream.knows_shared_tools_of(s))
        .collect();
    let listings = futures_util::future::join_all(
        to_list
            .iter()
            .map(|s| cx.upstream.listing(caller, s, ListKind::Tools)),
    )
    .await;
    let owns_personally = |server: &Server| {
        to_list.iter().zip(&listings).any(|(s, listing)| {
            s.id() == server.id()
                && listing
                    .as_ref()
                    .is_ok_and(|l| l.items.iter().any(|t| t.id() == Some(name)))
        })
    };
    let owners = cx.upstream.tool_owners(name);
    let found: Vec<Arc<Server>> = scope
        .iter()
        .filter(|s| {
            let owns = if personal(s) {
                owns_personally(s)
            } else {
                owners.contains(s.id())
            };
            owns && caller.sees_tool(s, name)
        })
        .cloned()
        .collect();
    if found.is_empty() {
        let mut listings = listings;
        if let Some(auth) = listings
            .iter_mut()
            .position(|l| matches!(l, Err(UpstreamError::AuthRequired { .. })))
            .and_then(|i| listings.swap_remove(i).err())
        {
            return Err(auth.into());
        }
    }
    Ok(found)
}

pub(crate) async fn single_method(
    cx: &McpContext,
    caller: &Caller,
    server: &Arc<Server>,
    mut request: Request,
) -> Result<Answer, Failure> {
    let method = request.method.as_str();
    if method == "tools/call" {
        let name = request
            .params
            .as_ref()
            .and_then(|p| p.str_member("name"))
            .ok_or_else(|| GatewayError::InvalidParams("params.name must be a string".into()))?;
        let unknown = || GatewayError::ToolNotFound {
            name: name.to_string(),
        };
        caller.check_tool(server, &name, unknown)?;
    }
    let params = request.params.take();
    let upstream_call = request.upstream_call(method, params);
    let mut answer = answer_from_upstream(cx, caller, server, upstream_call, false).await?;
    if method == "tools/list"
        && let Answer::Json(result) = &mut answer
        && let Some(Value::Array(tools)) = result.get_mut("tools")
    {
        tools.retain(|t| {
            t.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| caller.sees_tool(server, n))
        });
        // In name order, as every listing the gateway answers (a page at a time here: the
        // upstream's pages are relayed as they come).
        fn name(tool: &Value) -> Option<&str> {
            tool.get("name").and_then(Value::as_str)
        }
        tools.sort_by(|a, b| name(a).cmp(&name(b)));
        cx.upstream.review_relayed(server, tools);
        let mut hid = false;
        if caller.has_argument_rules() {
            for tool in tools.iter_mut() {
                let name = tool.get("name").and_then(Value::as_str).map(str::to_owned);
                if let (Some(name), Value::Object(listed)) = (name, tool) {
                    hid |= caller.hide_bound_parameters(server, &name, listed);
                }
            }
        }
        // Another caller sees these tools otherwise: a 2026-07-28 listing says it is this
        // caller's own.
        if hid && let Some(scope) = result.get_mut("cacheScope") {
            *scope = Value::from("private");
        }
    }
    Ok(answer)
}

/// Sends the method upstream and turns its answer into the client's: a stream to relay, or a
/// result (on the aggregate endpoint with task ids prefixed). An input-required result for a
/// legacy client becomes a stream too: the gateway asks the client on it (see
/// [`crate::exchange`]).
pub(crate) async fn answer_from_upstream(
    cx: &McpContext,
    caller: &Caller,
    server: &Arc<Server>,
    request: UpstreamCall<'_>,
    aggregate: bool,
) -> Result<Answer, Failure> {
    // The request's server, in its record (an LLM request's own record names its model, not
    // the servers of the gateway tools it ran).
    switchboard_core::audit::note(|n| {
        if n.model.is_none() {
            n.server = Some(server.id().to_string());
        }
    });
    let listen = request.method == "subscriptions/listen";
    let bridge_input =
        request.stream && !request.modern_client && may_require_input(request.method);
    let started = Instant::now();
    let answer = call_upstream(cx, caller, server, &request).await?;
    // What a relay needs to ask the upstream again (a legacy client's input rounds) or to
    // name the method; built only when the answer is relayed, so a plain answer copies nothing.
    let relay = |stream, answered| {
        let UpstreamCall {
            method,
            params,
            session,
            log_level,
            ..
        } = request;
        Answer::Stream(Box::new(Relay {
            stream,
            answered,
            server: server.clone(),
            prefix_task_ids: aggregate,
            // A subscription lives as long as it carries events; a request's answer is due
            // within the server's timeout.
            deadline: (!listen).then(|| started + server.spec.timeout),
            upstream_request: Some(UpstreamRequest {
                method: method.to_string(),
                params: bridge_input.then_some(params).flatten(),
                session,
                log_level,
            }),
        }))
    };
    // A result the gateway passes on unchanged stays the text it came in (the common case: a
    // tool's answer); only one that needs a change or a look inside becomes a tree.
    let answer = match answer {
        Answered::Result(RpcResult::Raw(raw)) if RELAYED_AS_IS.contains(&request.method) => {
            match unchanged_result(&raw, aggregate, bridge_input, request.modern_client) {
                Some(Unchanged::AsItCame { has_result_type }) => {
                    return Ok(Answer::Relayed {
                        result: raw,
                        has_result_type,
                    });
                }
                Some(Unchanged::ForLegacy(text)) => return Ok(Answer::Written(text)),
                None => Answered::Result(RpcResult::Raw(raw)),
            }
        }
        other => other,
    };
    match answer {
        Answered::Result(result) => {
            let mut result = result.into_value();
            if bridge_input
                && result.get("resultType").and_then(Value::as_str) == Some("input_required")
            {
                return Ok(relay(None, Some(result)));
            }
            if aggregate {
                prefix_task_id(&mut result, server.prefix());
                if request.method == "resources/read" {
                    prefix_ui_contents(&mut result, server.prefix());
                }
            }
            Ok(Answer::Json(result))
        }
        Answered::Stream(stream) => Ok(relay(Some(stream), None)),
    }
}

/// Methods whose results the gateway never edits (beyond a task id and `resultType`, which
/// [`unchanged_result`] checks). Listings are not among them: the gateway filters them.
const RELAYED_AS_IS: &[&str] = &["tools/call", "prompts/get", "completion/complete"];

/// A result the gateway passes on without making it a tree.
#[derive(Debug, PartialEq)]
enum Unchanged {
    /// As it came; whether it names its `resultType` (a 2026-07-28 client needs one).
    AsItCame { has_result_type: bool },
    /// For a legacy client, written again without the 2026-07-28 members.
    ForLegacy(String),
}

/// Whether a result goes to the client without becoming a tree: not when the aggregate
/// endpoint prefixes its task id, nor when it asks a legacy client for input (a relay does
/// that; only a legacy client's request has `bridge_input`). Its top-level members are read
/// once; for a legacy client the same read writes it without what only a 2026-07-28 result has.
fn unchanged_result(
    raw: &RawResult,
    aggregate: bool,
    bridge_input: bool,
    modern_client: bool,
) -> Option<Unchanged> {
    let members = raw.members()?;
    if members.has("resultType") && members.result_type_is("complete").is_none() {
        return None; // not a string: the tree path decides
    }
    let changes = (aggregate && members.has("taskId"))
        || (bridge_input && members.result_type_is("input_required") == Some(true));
    if changes {
        return None;
    }
    let for_legacy = (!modern_client).then(|| members.without_modern()).flatten();
    Some(match for_legacy {
        Some(text) => Unchanged::ForLegacy(text),
        None => Unchanged::AsItCame {
            has_result_type: members.has("resultType"),
        },
    })
}

enum Answered {
    Result(RpcResult),
    Stream(Box<switchboard_upstream::UpstreamStream>),
}

/// Sends the method upstream and unwraps its answer (an upstream 403 on a tool call comes back
/// as the tool's error result: the plane's rule, [`switchboard_upstream::UpstreamPlane::call`]).
async fn call_upstream(
    cx: &McpContext,
    caller: &Caller,
    server: &Server,
    request: &UpstreamCall<'_>,
) -> Result<Answered, Failure> {
    match cx.upstream.call(caller, server, request).await {
        Ok(RpcOutcome::Result(result)) => Ok(Answered::Result(result)),
        Ok(RpcOutcome::Stream(stream)) => Ok(Answered::Stream(stream)),
        Ok(RpcOutcome::Error(error, status)) => Err(Failure::Upstream(error, status)),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result as an upstream's answer brings it: indexed in the answer's one reading (which
    /// takes only an object; anything else, made from its text, is scanned when asked).
    fn raw(text: &str) -> RawResult {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1, "result" : {text} }}"#);
        match switchboard_protocol::jsonrpc::raw_response("application/json", body.as_bytes()) {
            Some(response) => response.result.expect("a result"),
            None => {
                assert!(!text.starts_with('{'), "an object is read: {text}");
                serde_json::value::RawValue::from_string(text.to_string())
                    .expect("valid JSON")
                    .into()
            }
        }
    }

    #[test]
    fn results_pass_as_they_came_unless_the_gateway_changes_them() {
        let as_it_came = |has_result_type| Some(Unchanged::AsItCame { has_result_type });
        // (A 2026-07-28 client, then a legacy one.)
        let plain = raw(r#"{"content":[{"type":"text","text":"3"}],"resultType":"complete"}"#);
        assert_eq!(
            unchanged_result(&plain, true, false, true),
            as_it_came(true)
        );
        assert_eq!(
            unchanged_result(&plain, true, true, false),
            Some(Unchanged::ForLegacy(
                r#"{"content":[{"type":"text","text":"3"}]}"#.into()
            )),
            "a legacy client gets it without resultType, from the same read"
        );
        let legacy = raw(r#"{"content":[],"structuredContent":{"resultType":"x"}}"#);
        // A nested resultType is not the result's own.
        assert_eq!(
            unchanged_result(&legacy, false, false, true),
            as_it_came(false)
        );
        assert_eq!(
            unchanged_result(&legacy, false, false, false),
            as_it_came(false)
        );
        let task = raw(r#"{"resultType":"task","taskId":"t1"}"#);
        assert_eq!(
            unchanged_result(&task, true, false, true),
            None,
            "aggregate prefixes it"
        );
        assert_eq!(unchanged_result(&task, true, false, false), None);
        assert_eq!(
            unchanged_result(&task, false, false, true),
            as_it_came(true)
        );
        assert_eq!(
            unchanged_result(&task, false, false, false),
            as_it_came(true)
        );
        let input = raw(r#"{"resultType":"input_required","inputRequests":{}}"#);
        assert_eq!(
            unchanged_result(&input, false, true, false),
            None,
            "a relay asks"
        );
        assert_eq!(
            unchanged_result(&input, false, false, false),
            as_it_came(true)
        );
        let escaped = raw(r#"{"resultType":"input\u005frequired","inputRequests":{}}"#);
        assert_eq!(
            unchanged_result(&escaped, false, true, false),
            None,
            "escaped, the same"
        );
        // Not an object, or a resultType that is not a string: the tree path decides.
        for modern in [true, false] {
            assert_eq!(unchanged_result(&raw("[1]"), false, false, modern), None);
            assert_eq!(
                unchanged_result(&raw(r#"{"resultType":1}"#), false, false, modern),
                None
            );
        }
    }
}
