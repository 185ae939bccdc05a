//! JSON-RPC method dispatch (after transport and era checks have passed), and the
//! era-specific result shapes: `initialize` for legacy, `server/discover`, `resultType`,
//! cache hints and `_meta` server info for 2026-07-28.

use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::catalog::{self, CallCtx};
use crate::pagination;
use crate::protocol::{
    INVALID_PARAMS, LATEST_LEGACY, LEGACY_VERSIONS, META_SERVER_INFO, METHOD_NOT_FOUND,
    MODERN_VERSION, RpcError,
};
use crate::variants::{Era, Variant};

const VERSION: &str = env!("CARGO_PKG_VERSION");
const INSTRUCTIONS: &str =
    "Example upstream for Switchboard: add, echo, request_headers, slow, fail, confirm.";

/// One request to answer, owned so it can be answered from a streaming response body.
pub struct Request {
    pub variant: std::sync::Arc<Variant>,
    pub modern: bool,
    pub headers: HeaderMap,
    pub method: String,
    pub params: Value,
}

fn capabilities() -> Value {
    json!({
        "tools": { "listChanged": false },
        "prompts": { "listChanged": false },
        "resources": { "subscribe": false, "listChanged": false },
    })
}

fn server_info(v: &Variant) -> Value {
    json!({ "name": v.name, "version": VERSION })
}

/// The legacy `initialize` result: echo the client's version if supported, else the latest.
pub fn initialize(v: &Variant, params: &Value) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    let version = asked
        .filter(|a| LEGACY_VERSIONS.contains(a))
        .unwrap_or(LATEST_LEGACY);
    json!({
        "protocolVersion": version,
        "capabilities": capabilities(),
        "serverInfo": server_info(v),
        "instructions": INSTRUCTIONS,
    })
}

/// Answers one request.
pub async fn dispatch(req: &Request) -> Result<Value, RpcError> {
    let v = &*req.variant;
    let p = &req.params;
    let (mut result, cacheable) = match req.method.as_str() {
        "ping" if !req.modern => (json!({}), false),
        "server/discover" if req.modern => {
            let mut supported = vec![MODERN_VERSION];
            if v.era == Era::Dual {
                supported.extend(LEGACY_VERSIONS);
            }
            let discover = json!({ "supportedVersions": supported, "capabilities": capabilities(),
                                   "instructions": INSTRUCTIONS });
            (discover, true)
        }
        "tools/list" => (list_tools(v, p)?, true),
        "tools/call" => {
            let ctx = CallCtx {
                variant: v,
                modern: req.modern,
                headers: &req.headers,
                params: p,
            };
            (catalog::call_tool(&ctx).await?, false)
        }
        "prompts/list" => (catalog::list_prompts(v), true),
        "prompts/get" => (catalog::get_prompt(v, p)?, false),
        "resources/list" => (catalog::list_resources(v), true),
        "resources/templates/list" => (catalog::list_resource_templates(), true),
        "resources/read" => (catalog::read_resource(p, req.modern)?, true),
        other => {
            return Err(
                RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {other}"))
                    .with_data(json!(other)),
            );
        }
    };
    if req.modern {
        if result.get("resultType").is_none() {
            result["resultType"] = json!("complete");
        }
        if cacheable {
            result["ttlMs"] = json!(v.ttl_ms);
            result["cacheScope"] = json!(if v.public { "public" } else { "private" });
        }
        result["_meta"] = json!({ META_SERVER_INFO: server_info(v) });
    }
    Ok(result)
}

fn list_tools(v: &Variant, params: &Value) -> Result<Value, RpcError> {
    let cursor = match params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c.as_str()),
        Some(_) => return Err(RpcError::new(INVALID_PARAMS, "cursor must be a string")),
    };
    let page = pagination::paginate(v.cursor, v.page_size(), catalog::tool_count(v), cursor)
        .map_err(|_| RpcError::new(INVALID_PARAMS, "Invalid cursor"))?;
    let tools: Vec<Value> = (page.start..page.end)
        .map(|i| catalog::tool_at(v, i))
        .collect();
    let mut result = json!({ "tools": tools });
    if let Some(next) = page.next {
        result["nextCursor"] = json!(next);
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::variants::parse;
    use futures_util::FutureExt;

    fn run(opts: &str, modern: bool, method: &str, params: Value) -> Result<Value, RpcError> {
        let req = Request {
            variant: std::sync::Arc::new(parse(opts).unwrap()),
            modern,
            headers: HeaderMap::new(),
            method: method.to_owned(),
            params,
        };
        dispatch(&req).now_or_never().expect("ready")
    }

    #[test]
    fn initialize_negotiates() {
        let v = Variant::default();
        assert_eq!(
            initialize(&v, &json!({ "protocolVersion": "2025-06-18" }))["protocolVersion"],
            "2025-06-18"
        );
        assert_eq!(
            initialize(&v, &json!({ "protocolVersion": "2026-07-28" }))["protocolVersion"],
            LATEST_LEGACY
        );
        assert_eq!(initialize(&v, &json!({}))["protocolVersion"], LATEST_LEGACY);
    }

    #[test]
    fn modern_results_are_decorated() {
        let r = run("ttl=5,cache=public", true, "tools/list", json!({})).unwrap();
        assert_eq!(
            (
                r["resultType"].clone(),
                r["ttlMs"].clone(),
                r["cacheScope"].clone()
            ),
            (json!("complete"), json!(5), json!("public"))
        );
        assert_eq!(r["_meta"][META_SERVER_INFO]["name"], "example-upstream");
        let legacy = run("", false, "tools/list", json!({})).unwrap();
        assert!(legacy.get("resultType").is_none() && legacy.get("ttlMs").is_none());
        let d = run("era=2026", true, "server/discover", json!({})).unwrap();
        assert_eq!(d["supportedVersions"], json!([MODERN_VERSION]));
        assert_eq!(
            run("", true, "ping", json!({})).unwrap_err().code,
            METHOD_NOT_FOUND
        );
        assert_eq!(
            run("", false, "server/discover", json!({}))
                .unwrap_err()
                .code,
            METHOD_NOT_FOUND
        );
    }

    #[test]
    fn paged_listing_walks() {
        let r = run("tools=5,page=2", false, "tools/list", json!({})).unwrap();
        assert_eq!(r["tools"].as_array().map(Vec::len), Some(2));
        let next = r["nextCursor"].clone();
        let r2 = run(
            "tools=5,page=2",
            false,
            "tools/list",
            json!({ "cursor": next }),
        )
        .unwrap();
        assert_eq!(r2["tools"][0]["name"], "tool_2");
        assert_eq!(
            run("", false, "tools/list", json!({ "cursor": "zz" }))
                .unwrap_err()
                .code,
            INVALID_PARAMS
        );
    }
}
