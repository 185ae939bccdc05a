//! The REST face: `GET /mcp-rest/tools/list[?server_id=]`, `GET /mcp-rest/tools/search?q=`
//! and `POST /mcp-rest/tools/call` (`{name, server_id, arguments}`), with the statuses of docs/architecture.md, "Errors".

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::aggregate::{self, PublicItems};
use crate::context::McpContext;
use crate::dispatch::route_name;
use switchboard_core::errors::{GatewayError, RestError};
use switchboard_core::route::split_prefixed;
use switchboard_core::scope::{Caller, Resource, authenticate};
use switchboard_core::table::Server;
use switchboard_upstream::Searched;
use switchboard_upstream::listing::ListKind;

#[derive(Deserialize)]
pub struct ListQuery {
    server_id: Option<String>,
}

pub async fn list_tools(
    State(cx): State<Arc<McpContext>>,
    Query(query): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    match list_tools_inner(&cx, query, headers).await {
        Ok(raw) => {
            cx.metrics.request("rest", "tools/list", "ok");
            let body: Box<str> = raw.into();
            (
                [(header::CONTENT_TYPE, "application/json")],
                body.into_string(),
            )
                .into_response()
        }
        Err(e) => finish(&cx, "tools/list", Err(e)),
    }
}

#[derive(Serialize)]
struct RestToolList<'a> {
    tools: PublicItems<'a>,
    errors: Vec<Value>,
    warnings: &'a [Value],
}

async fn list_tools_inner(
    cx: &McpContext,
    query: ListQuery,
    headers: HeaderMap,
) -> Result<Box<RawValue>, GatewayError> {
    let caller = authenticate(cx.table(), headers, &cx.metrics, Resource::Rest).await?;
    let servers: Vec<Arc<Server>> = match &query.server_id {
        Some(id) => vec![caller.server_for_rest(id)?],
        None => caller.servers_in_scope(),
    };
    let mut merged = aggregate::merge(cx, &caller, &servers, ListKind::Tools).await;
    if query.server_id.is_some()
        && let Some((_, error)) = merged.failures.pop()
    {
        // The one server asked for failed: so did the request.
        return Err(error);
    }
    // Serialized straight from the cached listings (no copy of a large catalog).
    let body = RestToolList {
        tools: merged.items(0..merged.len()),
        errors: merged.errors_json(),
        warnings: &merged.warnings,
    };
    serde_json::value::to_raw_value(&body)
        .map_err(|e| GatewayError::InvalidRequest(format!("cannot encode the list: {e}")))
}

#[derive(Deserialize)]
pub struct SearchQuery {
    /// What the tool should do, in words.
    q: Option<String>,
    limit: Option<usize>,
    server_id: Option<String>,
}

/// `GET /mcp-rest/tools/search?q=...[&limit=][&server_id=]`: the caller's tools that best
/// match `q`, best first, each listed as `tools/list` lists it (call one with `tools/call`).
pub async fn search_tools(
    State(cx): State<Arc<McpContext>>,
    Query(query): Query<SearchQuery>,
    headers: HeaderMap,
) -> Response {
    let result = search_tools_inner(&cx, query, headers).await;
    finish(&cx, "tools/search", result)
}

async fn search_tools_inner(
    cx: &McpContext,
    query: SearchQuery,
    headers: HeaderMap,
) -> Result<Value, GatewayError> {
    let caller = authenticate(cx.table(), headers, &cx.metrics, Resource::Rest).await?;
    let q = query
        .q
        .filter(|q| !q.trim().is_empty())
        .ok_or_else(|| GatewayError::InvalidRequest("q: words to search by are required".into()))?;
    let limit = query.limit.unwrap_or(5);
    if !(1..=50).contains(&limit) {
        return Err(GatewayError::InvalidRequest(
            "limit: must be between 1 and 50".into(),
        ));
    }
    let servers: Vec<Arc<Server>> = match &query.server_id {
        Some(id) => vec![caller.server_for_rest(id)?],
        None => caller.servers_in_scope(),
    };
    let found = cx
        .upstream
        .find_tools(&caller, Searched::Servers(&servers), &q, limit)
        .await;
    let errors: Vec<Value> = found
        .failures
        .into_iter()
        .map(|(server, e)| aggregate::listing_error(&server, &GatewayError::from(e)))
        .collect();
    Ok(serde_json::json!({
        "tools": found.tools,
        "searched": found.searched,
        "errors": errors,
    }))
}

#[derive(Deserialize)]
struct CallBody {
    name: String,
    server_id: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

pub async fn call_tool(
    State(cx): State<Arc<McpContext>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let result = call_tool_inner(&cx, headers, body).await;
    finish(&cx, "tools/call", result)
}

async fn call_tool_inner(
    cx: &McpContext,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Value, GatewayError> {
    let table = cx.table();
    let limit = table.settings.max_body_bytes;
    if body.len() > limit {
        return Err(GatewayError::PayloadTooLarge { limit });
    }
    let caller = authenticate(table, headers, &cx.metrics, Resource::Rest).await?;
    let call: CallBody = serde_json::from_slice(&body)
        .map_err(|e| GatewayError::InvalidRequest(format!("body: {e}")))?;
    switchboard_core::audit::note(|n| {
        n.rpc_method = Some("tools/call".into());
        n.tool = Some(switchboard_core::audit::name(&call.name));
    });
    let (server, tool) = match &call.server_id {
        Some(id) => routed_by_id(&caller, id, &call.name)?,
        None => {
            denied_by_prefix(&caller, &call.name)?;
            route_name(cx, &caller, "tools/call", &call.name).await?
        }
    };
    switchboard_core::audit::note(|n| n.server = Some(server.id().to_string()));
    cx.upstream
        .call_tool(&caller, &server, &tool, call.arguments, &call.name)
        .await
        .map_err(Into::into)
}

/// With `server_id`, the name may carry that server's prefix or none; scope is checked before
/// anything goes upstream.
fn routed_by_id(
    caller: &Caller,
    id: &str,
    name: &str,
) -> Result<(Arc<Server>, String), GatewayError> {
    let server = caller.server_for_rest(id)?;
    let tool = match split_prefixed(name) {
        Some((prefix, rest)) if prefix == server.prefix() => rest,
        _ => name,
    };
    // (REST says 404 for a tool the key's filter hides, as for one that does not exist; the
    // record says access_denied.)
    let unknown = || GatewayError::ToolNotFound {
        name: name.to_string(),
    };
    caller.check_tool(&server, tool, unknown)?;
    Ok((server, tool.to_string()))
}

/// REST says 403 for a prefixed name whose server exists but is out of scope (MCP hides it).
fn denied_by_prefix(caller: &Caller, name: &str) -> Result<(), GatewayError> {
    if let Some((prefix, _)) = split_prefixed(name)
        && let Some(server) = caller.table.server_by_prefix(prefix)
        && !caller.reaches(server)
    {
        return Err(GatewayError::AccessDenied {
            server: server.id().to_string(),
        });
    }
    Ok(())
}

fn finish(cx: &McpContext, method: &'static str, result: Result<Value, GatewayError>) -> Response {
    match result {
        Ok(v) => {
            cx.metrics.request("rest", method, "ok");
            switchboard_core::audit::note(|n| n.outcome = Some("ok"));
            Json(v).into_response()
        }
        Err(e) => {
            cx.metrics.request("rest", method, e.outcome());
            RestError(e).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    //! The REST face's handlers against the in-process upstream: what each request reaches
    //! upstream, and each refusal's status and code (docs/architecture.md, "Errors").
    use axum::http::StatusCode;
    use serde_json::json;

    use super::*;
    use crate::test_support::{KEY, bearer, read_json, served};

    async fn call(cx: &Arc<McpContext>, key: &str, body: Value) -> (StatusCode, Value) {
        let body = Bytes::from(body.to_string());
        read_json(call_tool(State(cx.clone()), bearer(key), body).await).await
    }

    async fn list(cx: &Arc<McpContext>, key: &str, server_id: Option<&str>) -> (StatusCode, Value) {
        let query = ListQuery {
            server_id: server_id.map(str::to_string),
        };
        read_json(list_tools(State(cx.clone()), Query(query), bearer(key)).await).await
    }

    /// A call by prefixed name, by `server_id` with the server's prefix or none: the upstream
    /// gets the tool's own name and the arguments, the client its result as JSON.
    #[tokio::test]
    async fn a_call_reaches_the_tool_by_prefix_or_by_server_id() {
        let (upstream, cx) = served().await;
        for body in [
            json!({"name": "up__anything", "arguments": {"x": 1}}),
            json!({"name": "anything", "server_id": "up", "arguments": {"x": 1}}),
            json!({"name": "up__anything", "server_id": "up", "arguments": {"x": 1}}),
        ] {
            let (status, result) = call(&cx, KEY, body.clone()).await;
            assert_eq!(status, StatusCode::OK, "{body}: {result}");
            assert_eq!(result["called"], "anything", "{body}");
            let sent = upstream.last_call().expect("called upstream").body;
            assert_eq!(sent["params"]["name"], "anything", "{body}");
            assert_eq!(sent["params"]["arguments"], json!({"x": 1}), "{body}");
        }
    }

    /// Each refusal before any request upstream, with its status and code: too large (before
    /// the key), no key, a body that is no call (naming the field), an unknown server, a
    /// server out of scope (403 on REST, where MCP hides it), and an unknown tool.
    #[tokio::test]
    async fn each_refusal_has_its_status_and_code() {
        let (upstream, cx) = served().await;
        let big = Bytes::from(vec![b' '; 4097]);
        let (status, body) =
            read_json(call_tool(State(cx.clone()), HeaderMap::new(), big).await).await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (StatusCode::PAYLOAD_TOO_LARGE, &json!("payload_too_large"))
        );
        let cases = [
            (
                "no-such-key",
                json!({"name": "up__echo"}),
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "",
            ),
            (
                KEY,
                json!({"tool": "up__echo"}),
                StatusCode::BAD_REQUEST,
                "bad_request",
                "missing field `name`",
            ),
            (
                KEY,
                json!({"name": 7}),
                StatusCode::BAD_REQUEST,
                "bad_request",
                "body:",
            ),
            (
                KEY,
                json!({"name": "echo", "server_id": "nowhere"}),
                StatusCode::NOT_FOUND,
                "server_not_found",
                "nowhere",
            ),
            (
                "s-far",
                json!({"name": "echo", "server_id": "up"}),
                StatusCode::FORBIDDEN,
                "access_denied",
                "up",
            ),
            (
                "s-far",
                json!({"name": "up__echo"}),
                StatusCode::FORBIDDEN,
                "access_denied",
                "up",
            ),
            (
                KEY,
                json!({"name": "nowhere__echo"}),
                StatusCode::NOT_FOUND,
                "tool_not_found",
                "nowhere__echo",
            ),
        ];
        for (key, sent, status, code, says) in cases {
            let (got, body) = call(&cx, key, sent.clone()).await;
            assert_eq!(
                (got, &body["error"]["code"]),
                (status, &json!(code)),
                "{sent}: {body}"
            );
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(says), "{sent}: {message}");
        }
        assert!(upstream.last_call().is_none(), "nothing called upstream");
    }

    /// The listing: every server in scope, prefixed names; one server by id, whose failure is
    /// the request's; an unknown or unreached id refused like a call.
    #[tokio::test]
    async fn the_listing_names_tools_by_prefix_and_refuses_like_a_call() {
        let (_upstream, cx) = served().await;
        for server_id in [None, Some("up")] {
            let (status, body) = list(&cx, KEY, server_id).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(
                body["tools"][0]["name"], "up__echo",
                "{server_id:?}: {body}"
            );
            assert_eq!(body["errors"], json!([]));
        }
        let (status, body) = list(&cx, KEY, Some("nowhere")).await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (StatusCode::NOT_FOUND, &json!("server_not_found"))
        );
        let (status, _) = list(&cx, "s-far", Some("up")).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (status, _) = list(&cx, "no-such-key", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        // `side` answers no MCP: asked for alone, its failure is the request's.
        let (status, body) = list(&cx, "s-far", Some("side")).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
        assert_eq!(body["error"]["code"], "upstream_unavailable", "{body}");
    }
}
