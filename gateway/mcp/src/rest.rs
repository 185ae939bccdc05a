//! The REST face: `GET /mcp-rest/tools/list[?server_id=]` and `POST /mcp-rest/tools/call`
//! (`{name, server_id, arguments}`), with the statuses of docs/architecture.md, "Errors".

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
    let unknown = GatewayError::ToolNotFound {
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
