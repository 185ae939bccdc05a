//! The gateway tools one request gives the model: those attached to the model, and those the
//! request itself names with an MCP reference, each expanded with the caller's own scope (never
//! wider than the key) and converted by the one schema sanitizer.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Map, Value};
use switchboard_core::virtual_server::{Selected, VirtualServer};
use switchboard_snapshot::{RequireApproval, ToolFilter, ToolOverride, ToolVisibility};

use crate::context::LlmContext;
use crate::errors::LlmError;
use switchboard_core::route::prefixed_name;
use switchboard_core::scope::Caller;
use switchboard_core::table::{Model, Server};
use switchboard_protocol::schema;
use switchboard_upstream::listing::ListKind;

/// One tool of an MCP server, as the model sees it.
#[derive(Debug, Clone)]
pub(crate) struct GatewayTool {
    /// The name the model calls it by: `<prefix>__<tool>`.
    pub name: String,
    pub server: Arc<Server>,
    /// The upstream's own name of the tool.
    pub tool: String,
    pub description: Option<String>,
    /// The sanitized input schema.
    pub schema: Value,
    pub approval: RequireApproval,
    pub visibility: ToolVisibility,
    /// The virtual server it comes through, and how it presents the tool: its fixed values go
    /// upstream with every call, its argument rules judge every call.
    pub via: Option<(Arc<VirtualServer>, Option<ToolOverride>)>,
    /// One of a search-mode virtual server's own tools (`find_tools`, `call_tool`; `tool` names
    /// which): the gateway answers it from the virtual server's tools (`server` is then the
    /// virtual server's first source, for the client's display only).
    pub search: Option<Arc<VirtualServer>>,
}

impl GatewayTool {
    /// The server name a client's display shows: the virtual server's path for its search
    /// tools, else the tool's server's prefix.
    pub(crate) fn server_name(&self) -> &str {
        match &self.search {
            Some(vs) => vs.spec.path(),
            None => self.server.prefix(),
        }
    }

    /// Whether the gateway runs the model's calls of this tool itself.
    fn run_by_gateway(&self) -> bool {
        self.approval == RequireApproval::Never
    }
}

#[derive(Debug, Default)]
pub(crate) struct ToolSet {
    pub tools: Vec<GatewayTool>,
}

impl ToolSet {
    /// The gateway-run tool the model called by `name`, if it is one.
    pub(crate) fn gateway_run(&self, name: &str) -> Option<&GatewayTool> {
        self.tools
            .iter()
            .find(|t| t.name == name && t.run_by_gateway())
    }

    pub(crate) fn has_gateway_run(&self) -> bool {
        self.tools.iter().any(GatewayTool::run_by_gateway)
    }
}

/// One server's tools to attach, from the model's config or from the request.
struct Attachment<'a> {
    /// Attached through a virtual server: it and the source.
    via: Option<(Arc<VirtualServer>, usize)>,
    server: Arc<Server>,
    filter: Option<&'a ToolFilter>,
    allowed: Option<Vec<String>>,
    approval: RequireApproval,
    visibility: ToolVisibility,
}

/// An MCP reference a request makes (`tools[i]` of type `mcp`, or Anthropic `mcp_servers[i]`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct McpReference {
    /// Where in the request it was, for errors (`tools[2]`, `mcp_servers[0]`).
    pub field: String,
    pub url: String,
    pub allowed_tools: Option<Vec<String>>,
    pub approval: RequireApproval,
}

/// Takes the MCP references out of a request body: every `tools[]` entry of type `mcp`, and the
/// `mcp_servers[]` entries whose URL is a server of this gateway (others stay for the provider,
/// which may serve them itself). The provider never sees a reference to one of ours.
pub(crate) fn take_references(
    body: &mut Map<String, Value>,
    is_ours: impl Fn(&str) -> bool,
) -> Result<Vec<McpReference>, LlmError> {
    let mut found = Vec::new();
    if let Some(Value::Array(tools)) = body.get_mut("tools") {
        let mut index = 0;
        let mut error = None;
        tools.retain(|tool| {
            let i = index;
            index += 1;
            if tool.get("type").and_then(Value::as_str) != Some("mcp") {
                return true;
            }
            match reference(tool, format!("tools[{i}]"), "server_url") {
                Ok(r) => found.push(r),
                Err(e) => error = error.take().or(Some(e)),
            }
            false
        });
        if let Some(e) = error {
            return Err(e);
        }
    }
    if let Some(Value::Array(servers)) = body.get_mut("mcp_servers") {
        let mut index = 0;
        let mut error = None;
        servers.retain(|server| {
            let i = index;
            index += 1;
            let url = server
                .get("url")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !is_ours(url) {
                return true;
            }
            let enabled = server
                .pointer("/tool_configuration/enabled")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            if enabled {
                match reference(server, format!("mcp_servers[{i}]"), "url") {
                    Ok(mut r) => {
                        r.allowed_tools = server
                            .pointer("/tool_configuration/allowed_tools")
                            .and_then(string_list);
                        found.push(r);
                    }
                    Err(e) => error = error.take().or(Some(e)),
                }
            }
            false
        });
        if let Some(e) = error {
            return Err(e);
        }
        if servers.is_empty() {
            body.remove("mcp_servers");
        }
    }
    Ok(found)
}

fn reference(entry: &Value, field: String, url_key: &str) -> Result<McpReference, LlmError> {
    let url = entry
        .get(url_key)
        .and_then(Value::as_str)
        .ok_or_else(|| LlmError::invalid(format!("{field}.{url_key}"), "is required"))?;
    // `require_approval` is "never", "always", or an object naming tools: anything but a plain
    // "never" hands the calls to the client.
    let approval = match entry.get("require_approval") {
        None => RequireApproval::Never,
        Some(Value::String(s)) if s == "never" => RequireApproval::Never,
        Some(_) => RequireApproval::Always,
    };
    Ok(McpReference {
        field,
        url: url.to_string(),
        allowed_tools: entry.get("allowed_tools").and_then(string_list),
        approval,
    })
}

fn string_list(value: &Value) -> Option<Vec<String>> {
    value.as_array().map(|items| {
        items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect()
    })
}

/// The server prefix a gateway URL names: `.../mcp/<prefix>` (any host: clients reach the
/// gateway by many names).
pub(crate) fn prefix_of_gateway_url(url: &str) -> Option<&str> {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = path.split_once('/').map(|(_, p)| p)?;
    let path = path.split(['?', '#']).next()?.trim_end_matches('/');
    let prefix = path.strip_prefix("mcp/")?;
    (!prefix.is_empty() && !prefix.contains('/')).then_some(prefix)
}

/// Resolves the model's attached tools and the request's references into one tool set.
/// Attached servers the key does not reach are left out (logged); a reference to one is an
/// error naming it, answered before anything reaches the provider.
pub async fn resolve(
    cx: &LlmContext,
    caller: &Caller,
    model: &Model,
    references: &[McpReference],
    client_tools: &HashSet<String>,
) -> Result<ToolSet, LlmError> {
    let mut attachments = Vec::new();
    let mut searches = Vec::new();
    for attached in &model.spec.tools {
        if let Some(vs) = caller
            .table
            .virtual_servers
            .iter()
            .find(|vs| model.spec.names_virtual_server(&attached.server, &vs.spec))
        {
            // Each of its sources' servers, as the virtual server presents their tools, under
            // the key's reach of both.
            if !caller.reaches_virtual(vs) {
                tracing::debug!(model = model.id(), virtual_server = vs.id(), caller = %caller.who(), "the key does not reach a virtual server attached to the model; its tools are left out");
                continue;
            }
            if vs.searches()
                && let Some(first) = vs.sources.iter().find(|s| caller.reaches(&s.server))
            {
                for search_tool in vs.search_tools() {
                    let name = search_tool
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    if !attached.tools.admits(&name) || client_tools.contains(&name) {
                        continue;
                    }
                    searches.push(GatewayTool {
                        tool: name.clone(),
                        name,
                        server: first.server.clone(),
                        description: search_tool
                            .get("description")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        schema: schema::sanitize(
                            search_tool.get("inputSchema").unwrap_or(&Value::Null),
                        ),
                        approval: attached.require_approval,
                        visibility: attached.visibility,
                        via: Some((vs.clone(), None)),
                        search: Some(vs.clone()),
                    });
                }
            }
            for (i, source) in vs.sources.iter().enumerate() {
                if caller.reaches(&source.server) {
                    attachments.push(Attachment {
                        via: Some((vs.clone(), i)),
                        server: source.server.clone(),
                        filter: Some(&attached.tools),
                        allowed: None,
                        approval: attached.require_approval,
                        visibility: attached.visibility,
                    });
                }
            }
            continue;
        }
        let Some(server) = caller
            .table
            .servers
            .iter()
            .find(|s| model.spec.names_server(&attached.server, &s.spec))
        else {
            tracing::warn!(model = model.id(), server = %attached.server, "a model's tools name a server that is not in the snapshot");
            continue;
        };
        if !caller.reaches(server) {
            tracing::debug!(model = model.id(), server = server.id(), caller = %caller.who(), "the key does not reach a server attached to the model; its tools are left out");
            continue;
        }
        attachments.push(Attachment {
            via: None,
            server: server.clone(),
            filter: Some(&attached.tools),
            allowed: None,
            approval: attached.require_approval,
            visibility: attached.visibility,
        });
    }
    for reference in references {
        let server = prefix_of_gateway_url(&reference.url)
            .and_then(|p| caller.table.server_by_prefix(p))
            .ok_or_else(|| {
                LlmError::invalid(
                    &reference.field,
                    "is not a server of this gateway (expected <gateway>/mcp/<server prefix>)",
                )
            })?;
        if !caller.reaches(server) {
            return Err(LlmError::McpServerForbidden {
                field: reference.field.clone(),
                server: server.id().to_string(),
            });
        }
        attachments.push(Attachment {
            via: None,
            server: server.clone(),
            filter: None,
            allowed: reference.allowed_tools.clone(),
            approval: reference.approval,
            // The client named the server itself: its calls are shown, as the providers'
            // own MCP connectors show them.
            visibility: ToolVisibility::Visible,
        });
    }
    let mut set = ToolSet::default();
    let mut taken: HashSet<String> = HashSet::new();
    for search_tool in searches {
        if taken.insert(search_tool.name.clone()) {
            set.tools.push(search_tool);
        }
    }
    for attachment in attachments {
        let listing = match cx
            .upstream
            .listing(caller, &attachment.server, ListKind::Tools)
            .await
        {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(model = model.id(), server = attachment.server.id(), error = %e, "cannot list a gateway tool server; the model goes without its tools");
                continue;
            }
        };
        for item in &listing.items {
            let Some(tool) = item.id() else { continue };
            // Through a virtual server: its name, and its filter instead of the attachment's
            // (which names presented names).
            let presented = match &attachment.via {
                Some((vs, i)) => match vs.presented_name(Selected::Tools, *i, tool) {
                    // (a search-mode virtual server offers its pinned tools only; the model
                    // finds the others)
                    Ok(name) if vs.searches() && !vs.pins(name) => continue,
                    Ok(name) => Some((
                        name.to_string(),
                        (vs.clone(), vs.sources[*i].override_of(tool).cloned()),
                    )),
                    Err(_) => continue,
                },
                None => None,
            };
            let filtered_name = presented.as_ref().map_or(tool, |(n, _)| n.as_str());
            let admitted = attachment.filter.is_none_or(|f| f.admits(filtered_name))
                && attachment
                    .allowed
                    .as_ref()
                    .is_none_or(|a| a.iter().any(|n| n == tool))
                && caller.sees_tool(&attachment.server, tool);
            if !admitted {
                continue;
            }
            let name = match &presented {
                Some((name, _)) => name.clone(),
                None => prefixed_name(attachment.server.prefix(), tool),
            };
            if !is_tool_name(&name) {
                tracing::warn!(
                    model = model.id(),
                    server = attachment.server.id(),
                    "a gateway tool's name does not fit the providers' tool names (1-64 of a-z A-Z 0-9 _ -); left out"
                );
                continue;
            }
            if client_tools.contains(&name) {
                tracing::info!(model = model.id(), tool = %name, "the client defines a tool of the same name as a gateway tool; the client's wins");
                continue;
            }
            if !taken.insert(name.clone()) {
                continue;
            }
            // One parse of the listed item for both fields.
            let mut fields = item.fields().unwrap_or_default();
            let via = presented.map(|(name, (vs, o))| {
                fields = vs.present(std::mem::take(&mut fields), &name, o.as_ref());
                (vs, o)
            });
            // What the caller's grant sets from the caller is not the model's to choose.
            caller.hide_bound_parameters(&attachment.server, tool, &mut fields);
            set.tools.push(GatewayTool {
                via,
                search: None,
                name,
                server: attachment.server.clone(),
                tool: tool.to_string(),
                description: match fields.remove("description") {
                    Some(Value::String(d)) => Some(d),
                    _ => None,
                },
                schema: schema::sanitize(fields.get("inputSchema").unwrap_or(&Value::Null)),
                approval: attachment.approval,
                visibility: attachment.visibility,
            });
        }
    }
    Ok(set)
}

/// Both providers' tool names: 1 to 64 of `a-z A-Z 0-9 _ -`.
fn is_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gateway_urls_name_a_prefix() {
        assert_eq!(
            prefix_of_gateway_url("http://cx:8080/mcp/docs"),
            Some("docs")
        );
        assert_eq!(
            prefix_of_gateway_url("https://cx/mcp/docs/?x=1"),
            Some("docs")
        );
        assert_eq!(prefix_of_gateway_url("http://cx/mcp"), None);
        assert_eq!(prefix_of_gateway_url("http://cx/other/docs"), None);
    }

    #[test]
    fn references_are_taken_out_and_foreign_connectors_stay() {
        let mut body = json!({
            "tools": [
                {"name": "Read", "input_schema": {"type": "object"}},
                {"type": "mcp", "server_url": "http://cx/mcp/docs", "require_approval": "never", "allowed_tools": ["search"]}
            ],
            "mcp_servers": [
                {"type": "url", "url": "http://cx/mcp/ocr", "name": "ocr"},
                {"type": "url", "url": "https://elsewhere.example/sse", "name": "x"}
            ]
        });
        let object = body.as_object_mut().unwrap();
        let refs = take_references(object, |u| prefix_of_gateway_url(u).is_some()).unwrap();
        assert_eq!(refs.len(), 2);
        assert_eq!(refs[0].field, "tools[1]");
        assert_eq!(refs[0].allowed_tools, Some(vec!["search".to_string()]));
        assert_eq!(refs[1].field, "mcp_servers[0]");
        assert_eq!(body["tools"].as_array().unwrap().len(), 1);
        assert_eq!(
            body["mcp_servers"].as_array().unwrap().len(),
            1,
            "a foreign server stays for the provider"
        );
    }

    #[test]
    fn provider_tool_names() {
        assert!(is_tool_name("docs__search-v2"));
        assert!(!is_tool_name("docs__search.v2"));
        assert!(!is_tool_name(&"x".repeat(65)));
    }
}
