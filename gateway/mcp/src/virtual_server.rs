//! The endpoint of a virtual server (`/mcp/<path>`): its sources' listings merged as it
//! presents them, and each call routed by parse to the one server and own name it stands for.
//! A tool is there only where the caller could reach it on its server directly (invariant 12):
//! the virtual server's own scope and the server's scope and filters both hold.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::aggregate::{META_LISTING_ERRORS, META_LISTING_WARNINGS};
use crate::context::McpContext;
use crate::dispatch::{Answer, Failure, Request, answer_from_upstream};
use switchboard_core::errors::{GatewayError, OutOfScope};
use switchboard_core::scope::Caller;
use switchboard_core::table::Server;
use switchboard_core::virtual_server::{
    CallRefused, SearchCall, Selected, Shadowed, VirtualServer,
};
use switchboard_protocol::{Era, Params};
use switchboard_upstream::Searched;
use switchboard_upstream::listing::{Item, ListKind};

/// The servers behind a virtual server that the caller reaches, each once, in source order.
pub fn servers(caller: &Caller, vs: &VirtualServer) -> Vec<Arc<Server>> {
    let mut out: Vec<Arc<Server>> = Vec::new();
    for source in &vs.sources {
        if caller.reaches(&source.server) && !out.iter().any(|s| s.id() == source.server.id()) {
            out.push(source.server.clone());
        }
    }
    out
}

/// A listen request as the servers behind a virtual server get it: list-changed flags only
/// (resource subscriptions name URIs of one server; a virtual server does not offer them).
pub fn listen_params(params: Option<Value>) -> Option<Value> {
    let mut params = params.unwrap_or_else(|| json!({}));
    if let Some(Value::Object(n)) = params.get_mut("notifications") {
        n.remove("resourceSubscriptions");
    }
    Some(params)
}

fn selected(kind: ListKind) -> Selected {
    match kind {
        ListKind::Tools => Selected::Tools,
        ListKind::Prompts => Selected::Prompts,
        _ => Selected::Resources,
    }
}

pub async fn method(
    cx: &McpContext,
    caller: &Caller,
    vs: &Arc<VirtualServer>,
    request: Request,
) -> Result<Answer, Failure> {
    let method = request.method.as_str();
    if let Some(kind) = ListKind::from_method(method) {
        let mut listed = list(cx, caller, vs, kind, request.era).await;
        if kind == ListKind::Tools && vs.searches() {
            search_listing(vs, &mut listed);
        }
        return Ok(Answer::Json(listed));
    }
    let (kind, field) = match method {
        "tools/call" => (Selected::Tools, "name"),
        "prompts/get" => (Selected::Prompts, "name"),
        "resources/read" => (Selected::Resources, "uri"),
        _ => return Err(GatewayError::MethodNotFound(method.to_string()).into()),
    };
    // (A virtual server renames and rebinds: its calls are read whole.)
    let mut params = request
        .params
        .as_deref()
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut name = params
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| GatewayError::InvalidParams(format!("params.{field} must be a string")))?
        .to_string();
    if kind == Selected::Tools {
        match vs.search_call(&name, params.get("arguments")) {
            None => {}
            Some(Err(refused)) => {
                return Err(GatewayError::InvalidParams(refused.to_string()).into());
            }
            Some(Ok(SearchCall::Find { query, limit })) => {
                let found = cx
                    .upstream
                    .find_tools(caller, Searched::Virtual(vs), &query, limit)
                    .await;
                return Ok(Answer::Json(found.result()));
            }
            // A found tool, called as if by its presented name (the record names it).
            Some(Ok(SearchCall::Call {
                name: found,
                arguments,
            })) => {
                switchboard_core::audit::note(|n| {
                    n.tool = Some(switchboard_core::audit::name(&found))
                });
                match (arguments, &mut params) {
                    (Some(arguments), _) => params["arguments"] = arguments,
                    (None, Value::Object(p)) => {
                        p.remove("arguments");
                    }
                    (None, _) => {}
                }
                name = found;
            }
        }
    }
    let not_found = || match kind {
        Selected::Tools => GatewayError::ToolNotFound { name: name.clone() },
        Selected::Prompts => GatewayError::NotFound {
            kind: "prompt",
            name: name.clone(),
        },
        Selected::Resources => GatewayError::NotFound {
            kind: "resource",
            name: name.clone(),
        },
    };
    let (source, own) = vs.route(kind, &name).ok_or_else(not_found)?;
    let server = &source.server;
    // What the caller could not reach on the server directly is not there (recorded as the
    // refusal for scope it is).
    if kind == Selected::Tools {
        caller.check_tool(server, own, not_found)?;
    } else if !caller.reaches(server) {
        let refused = OutOfScope::Server(server.id().to_string());
        return Err(GatewayError::invisible(refused, not_found()).into());
    }
    params[field] = Value::from(own);
    if kind == Selected::Tools {
        let arguments = params.get_mut("arguments").map(Value::take);
        match caller.virtual_arguments(vs, &name, source.override_of(own), arguments) {
            Ok(Some(arguments)) => params["arguments"] = arguments,
            Ok(None) => {
                if let Value::Object(p) = &mut params {
                    p.remove("arguments");
                }
            }
            Err(CallRefused::Presentation(refused)) => {
                return Err(GatewayError::InvalidParams(refused.to_string()).into());
            }
            Err(CallRefused::Rule(refused)) => {
                return Err(GatewayError::ArgumentRefused(refused).into());
            }
        }
    }
    let upstream_call = request.upstream_call(method, Some(Params::from(params)));
    answer_from_upstream(cx, caller, server, upstream_call, false).await
}

/// A search-mode virtual server's tool listing: its two search tools, then the pinned tools
/// (in listing order, the only ones `list` presents); every other tool is found by a search.
fn search_listing(vs: &VirtualServer, listed: &mut Value) {
    let Some(Value::Array(tools)) = listed.get_mut("tools") else {
        return;
    };
    for (i, tool) in vs.search_tools().into_iter().enumerate() {
        tools.insert(i, Value::Object(tool));
    }
}

/// Every source's items of one kind, presented, in source order; a server whose listing failed
/// is reported beside the others' items, and a name an earlier source already presents is
/// left out with a warning.
async fn list(
    cx: &McpContext,
    caller: &Caller,
    vs: &VirtualServer,
    kind: ListKind,
    era: Era,
) -> Value {
    let sk = selected(kind);
    let reached: Vec<usize> = (0..vs.sources.len())
        .filter(|&i| caller.reaches(&vs.sources[i].server))
        .collect();
    let listings = futures_util::future::join_all(
        reached
            .iter()
            .map(|&i| cx.upstream.listing(caller, &vs.sources[i].server, kind)),
    )
    .await;
    let mut items = Vec::new();
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let mut ttl_ms = u64::MAX;
    let mut private = false;
    for (&i, listing) in reached.iter().zip(listings) {
        let source = &vs.sources[i];
        let server = &source.server;
        let listing = match listing {
            Ok(l) => l,
            Err(e) => {
                let e = GatewayError::from(e);
                errors.push(crate::aggregate::listing_error(server.id(), &e));
                continue;
            }
        };
        ttl_ms = ttl_ms.min(listing.ttl_ms.unwrap_or(0));
        private |= listing.private;
        for item in &listing.items {
            let Some(own) = item.id() else { continue };
            if kind == ListKind::Tools && !caller.sees_tool(server, own) {
                continue;
            }
            let name = match vs.presented_name(sk, i, own) {
                Ok(name) => name,
                Err(Shadowed::NotSelected) => continue,
                Err(Shadowed::By(name)) => {
                    tracing::warn!(virtual_server = vs.id(), server = server.id(), %name, "a selected name is already presented by an earlier source; left out");
                    warnings.push(json!({"server": server.id(), "message": format!("{name:?} is already presented by an earlier source of {}; left out", vs.id())}));
                    continue;
                }
            };
            // (a search-mode virtual server lists its pinned tools only: the others are not
            // presented, a large source's thousand tools never parsed for a listing)
            if kind == ListKind::Tools && vs.searches() && !vs.pins(name) {
                continue;
            }
            let fields = listed_as(kind, item, name);
            let shown = match kind {
                ListKind::Tools => {
                    let mut shown = vs.present(fields, name, source.override_of(own));
                    // (the caller's own grant's bindings too: they hold through a virtual
                    // server as on the server's own endpoint)
                    private |= caller.hide_bound_parameters(server, own, &mut shown);
                    shown
                }
                _ => fields,
            };
            items.push(Value::Object(shown));
        }
    }
    let mut result = Map::new();
    result.insert(kind.field().into(), Value::Array(items));
    if era == Era::Rev2026 {
        result.insert(
            "ttlMs".into(),
            json!(if ttl_ms == u64::MAX { 0 } else { ttl_ms }),
        );
        result.insert(
            "cacheScope".into(),
            json!(if private { "private" } else { "public" }),
        );
        result.insert("resultType".into(), json!("complete"));
    }
    let mut meta = Map::new();
    if !errors.is_empty() {
        meta.insert(META_LISTING_ERRORS.into(), Value::Array(errors));
    }
    if !warnings.is_empty() {
        meta.insert(META_LISTING_WARNINGS.into(), Value::Array(warnings));
    }
    if !meta.is_empty() {
        result.insert("_meta".into(), Value::Object(meta));
    }
    Value::Object(result)
}

/// One listed item with `name` as its identifying field (`name`, `uri`, `uriTemplate`): a
/// listing keeps that field apart from the rest, and every kind gets it back here, since it is
/// what a client calls, gets or reads the item by. Prompts and resources are presented as
/// their server lists them; a tool is then renamed and narrowed by its override.
fn listed_as(kind: ListKind, item: &Item, name: &str) -> Map<String, Value> {
    let mut fields = item.fields().unwrap_or_default();
    fields.insert(kind.id_field().into(), Value::from(name));
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_presented_with_its_identifying_field() {
        for (kind, item, field) in [
            (
                ListKind::Prompts,
                json!({"name": "summarize", "description": "Sum up", "arguments": [{"name": "text"}]}),
                "name",
            ),
            (
                ListKind::Resources,
                json!({"uri": "kb://articles/1", "name": "article one", "mimeType": "text/plain"}),
                "uri",
            ),
            (
                ListKind::ResourceTemplates,
                json!({"uriTemplate": "kb://articles/{id}", "name": "article"}),
                "uriTemplate",
            ),
        ] {
            let own = item[field].as_str().unwrap().to_string();
            let shown = listed_as(kind, &Item::new(kind, &item), &own);
            assert_eq!(
                Value::Object(shown),
                item,
                "{kind:?}: as the server lists it"
            );
        }
        let tool = json!({"name": "add", "description": "Add", "inputSchema": {"type": "object"}});
        let shown = listed_as(ListKind::Tools, &Item::new(ListKind::Tools, &tool), "plus");
        assert_eq!(shown["name"], "plus");
        assert_eq!(shown["description"], "Add");
    }
}
