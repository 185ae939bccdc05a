//! The legacy era (2024-11-05 … 2025-11-25): `initialize`, sessions sealed in their ids, and
//! the session-wide settings that 2026-07-28 removed.

use std::sync::Arc;
use std::time::SystemTime;

use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::context::McpContext;
use crate::dispatch::{Answer, Failure, Request};
use crate::target::{Target, dispatch};
use switchboard_core::audit;
use switchboard_core::errors::{GatewayError, codes};
use switchboard_core::scope::Caller;
use switchboard_core::session::{Session, UnsealError};
use switchboard_core::table::Server;
use switchboard_protocol::capabilities;
use switchboard_protocol::{self as protocol, Era, META_SERVER_INFO};
use switchboard_upstream::UpstreamCall;
use switchboard_upstream::{RpcOutcome, SessionScope};

use super::message::{EraChecked, Message};
use super::modern::aggregate_capabilities;
use super::replies::{header_str, rpc_response};

/// A legacy session setting (`logging/setLevel`, `resources/subscribe`/`unsubscribe`): a legacy
/// upstream gets it on the client's own upstream session; an upstream that speaks 2026-07-28
/// removed these methods, and the aggregate has no session of its own to keep them on, so the
/// gateway acknowledges them there.
pub(super) async fn session_setting(
    cx: &McpContext,
    caller: &Caller,
    target: &Target,
    request: Request,
) -> Result<Answer, Failure> {
    let Target::Single(server) = target else {
        return Ok(Answer::Json(json!({})));
    };
    if cx.upstream.era_of(server) == Some(Era::Rev2026) {
        return Ok(Answer::Json(json!({})));
    }
    match dispatch(cx, caller, target, request).await {
        Err(Failure::Upstream(e, _))
            if cx.upstream.era_of(server) == Some(Era::Rev2026)
                && e.get("code").and_then(Value::as_i64) == Some(codes::METHOD_NOT_FOUND) =>
        {
            Ok(Answer::Json(json!({})))
        }
        other => other,
    }
}

/// Legacy: `initialize` opens a sealed session; everything else must present one that this
/// key opened, that has not expired and that the client has not ended.
pub(super) async fn check_legacy(
    cx: &McpContext,
    caller: &Caller,
    target: &Target,
    message: &Message,
) -> Result<EraChecked, GatewayError> {
    if message.method == "initialize" {
        return Ok(EraChecked::Answer(
            initialize(cx, caller, target, message).await,
        ));
    }
    let session_id =
        header_str(&caller.headers, protocol::headers::SESSION_ID).ok_or_else(|| {
            GatewayError::InvalidRequest(
                "missing Mcp-Session-Id; initialize a session first".into(),
            )
        })?;
    let session = open_session(cx, caller, session_id)?;
    note_session(session.tag, session.version_index);
    if let Some(v) = header_str(&caller.headers, protocol::headers::PROTOCOL_VERSION)
        && protocol::legacy_version_index(v).is_none()
    {
        return Err(GatewayError::Protocol {
            code: codes::INVALID_REQUEST,
            message: format!("unsupported MCP-Protocol-Version {v:?}"),
            status: StatusCode::BAD_REQUEST,
            data: None,
        });
    }
    Ok(EraChecked::Dispatch {
        session: SessionScope {
            client: session.tag,
            capabilities: session.capabilities,
        },
    })
}

/// The legacy session a request is part of, and the revision it negotiated, for the request's
/// span (`mcp.session.id`, `mcp.protocol.version`).
fn note_session(tag: u64, version_index: u8) {
    audit::note(|n| {
        n.session_tag = Some(tag);
        n.protocol_version = protocol::LEGACY_VERSIONS
            .get(usize::from(version_index))
            .copied();
    });
}

/// A session id this key opened, unexpired and not ended by the client.
pub(super) fn open_session(
    cx: &McpContext,
    caller: &Caller,
    session_id: &str,
) -> Result<Session, GatewayError> {
    let session = caller
        .table
        .sealer
        .unseal(session_id, caller.tag(), SystemTime::now())
        .map_err(|e| match e {
            UnsealError::Invalid => GatewayError::SessionNotFound,
            UnsealError::WrongKey => GatewayError::SessionForbidden,
        })?;
    if cx.session_ended(session.tag) {
        return Err(GatewayError::SessionNotFound);
    }
    Ok(session)
}

/// A legacy `initialize`: seals the session (version, the client's capabilities) into its id.
/// On `/mcp/{prefix}` the answer is the upstream's own identity (serverInfo, instructions,
/// capabilities), from the upstream session opened for this client session; on `/mcp`, or if
/// the upstream cannot be reached now, the gateway's.
pub(super) async fn initialize(
    cx: &McpContext,
    caller: &Caller,
    target: &Target,
    message: &Message,
) -> Response {
    let params = message.params.as_ref();
    let requested = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let version = protocol::negotiate_legacy(requested);
    let index = protocol::legacy_version_index(version).unwrap_or(0);
    let capabilities = capabilities::to_bits(params.and_then(|p| p.get("capabilities")));
    let (sealed, tag) =
        caller
            .table
            .sealer
            .seal(caller.tag(), index, capabilities, SystemTime::now());
    note_session(tag, index);
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": aggregate_capabilities(cx, caller),
        "serverInfo": {"name": "switchboard", "version": env!("CARGO_PKG_VERSION")},
    });
    if let Target::Single(server) = target {
        let scope = SessionScope {
            client: tag,
            capabilities,
        };
        match upstream_identity(cx, caller, server, scope).await {
            Ok(identity) => {
                for field in ["capabilities", "serverInfo", "instructions"] {
                    if let Some(v) = identity.get(field) {
                        result[field] = v.clone();
                    }
                }
            }
            Err(e) => {
                tracing::warn!(server = server.id(), error = %e, "upstream identity unavailable; answering initialize with the gateway's")
            }
        }
    }
    let mut response = rpc_response(
        message.id.as_ref().unwrap_or(&Value::Null),
        "result",
        result,
        StatusCode::OK,
    );
    if let Ok(value) = HeaderValue::from_str(&sealed) {
        response.headers_mut().insert("mcp-session-id", value);
    }
    response
}

/// What a legacy client's `initialize` on `/mcp/{prefix}` reports: the legacy upstream's own
/// `initialize` result, or a 2026-07-28 upstream's `server/discover` (serverInfo read from its
/// `_meta`, or the top level where a server puts it there).
pub(super) async fn upstream_identity(
    cx: &McpContext,
    caller: &Caller,
    server: &Arc<Server>,
    scope: SessionScope,
) -> Result<Value, GatewayError> {
    if let Some(init) = cx.upstream.legacy_identity(caller, server, scope).await? {
        return Ok(init);
    }
    let mut upstream_call = UpstreamCall::whole("server/discover", None);
    upstream_call.session = scope;
    match cx.upstream.call(caller, server, &upstream_call).await? {
        RpcOutcome::Result(discover) => {
            let discover = discover.into_value();
            let mut identity = Map::new();
            for field in ["capabilities", "instructions", "serverInfo"] {
                if let Some(v) = discover.get(field) {
                    identity.insert(field.into(), v.clone());
                }
            }
            if let Some(info) =
                discover.pointer(&format!("/_meta/{}", META_SERVER_INFO.replace('/', "~1")))
            {
                identity.insert("serverInfo".into(), info.clone());
            }
            Ok(Value::Object(identity))
        }
        _ => Err(GatewayError::UpstreamUnavailable {
            server: server.id().to_string(),
            detail: "server/discover failed".into(),
        }),
    }
}
