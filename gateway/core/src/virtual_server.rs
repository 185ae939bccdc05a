//! A virtual server as the gateway serves it: its sources resolved to servers of the table, and
//! the pure rules of presentation (which tool a name stands for, what a listed tool looks like,
//! what arguments go upstream). Routing is a parse: a presented name maps to its source and the
//! tool's own name through the snapshot alone (renamed names through the override, others
//! through the first source whose `tools` select the name), never through a listing.

use std::sync::Arc;

use foldhash::HashMap;
use serde_json::json;
use serde_json::{Map, Value};
use switchboard_snapshot::{
    CALL_TOOL, FIND_TOOLS, ToolFilter, ToolOverride, VirtualServerSpec, VirtualSource,
};

use crate::arguments::{CompiledRule, RefusedArguments};
use crate::server::Server;

/// Which of a server's lists a selection is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selected {
    Tools,
    Prompts,
    Resources,
}

#[derive(Debug)]
pub struct VirtualServer {
    pub spec: VirtualServerSpec,
    /// The sources, in order, each with its server.
    pub sources: Vec<Source>,
    /// Presented name → (source, the tool's own name), for renamed tools.
    renamed: HashMap<String, (usize, String)>,
    /// `spec.arguments`, compiled: rules over presented names, for every caller.
    rules: Vec<CompiledRule>,
}

#[derive(Debug)]
pub struct Source {
    pub server: Arc<Server>,
    pub spec: VirtualSource,
    /// Overrides by the tool's own name.
    overrides: HashMap<String, ToolOverride>,
}

impl Source {
    fn filter(&self, kind: Selected) -> &Option<ToolFilter> {
        match kind {
            Selected::Tools => &self.spec.tools,
            Selected::Prompts => &self.spec.prompts,
            Selected::Resources => &self.spec.resources,
        }
    }

    /// Whether the source presents its item `own` of this kind. A source that selects tools
    /// and says nothing of resources presents its MCP Apps UI resources (`ui://`) with them: a
    /// host reads the resource a listed tool links to (a `resources` filter, when written,
    /// decides alone).
    pub fn selects(&self, kind: Selected, own: &str) -> bool {
        self.spec.selects(self.filter(kind), own)
            || (kind == Selected::Resources
                && self.spec.resources.is_none()
                && self.spec.tools.is_some()
                && crate::route::is_ui_uri(own))
    }

    pub fn override_of(&self, own: &str) -> Option<&ToolOverride> {
        self.overrides.get(own)
    }
}

impl VirtualServer {
    /// Resolves the sources against the table's servers (the snapshot was validated: every
    /// source names exactly one server).
    pub fn build(spec: &VirtualServerSpec, servers: &[Arc<Server>]) -> Option<VirtualServer> {
        let mut sources = Vec::with_capacity(spec.sources.len());
        let mut renamed = HashMap::default();
        for (i, source) in spec.sources.iter().enumerate() {
            let server = servers
                .iter()
                .find(|s| spec.names_server(&source.server, &s.spec))?;
            let mut overrides = HashMap::default();
            for o in &source.overrides {
                if let Some(name) = &o.name {
                    renamed.insert(name.clone(), (i, o.tool.clone()));
                }
                overrides.insert(o.tool.clone(), o.clone());
            }
            sources.push(Source {
                server: server.clone(),
                spec: source.clone(),
                overrides,
            });
        }
        Some(VirtualServer {
            spec: spec.clone(),
            sources,
            renamed,
            // (validation refused what does not compile: such a snapshot is never loaded)
            rules: spec
                .arguments
                .iter()
                .filter_map(CompiledRule::compile)
                .collect(),
        })
    }

    /// A listed tool as this virtual server presents it ([`present_tool`]), without the
    /// arguments its rules bind to the caller: the model never sees what it cannot set.
    pub fn present(
        &self,
        tool: Map<String, Value>,
        name: &str,
        o: Option<&ToolOverride>,
    ) -> Map<String, Value> {
        let mut tool = present_tool(tool, name, o);
        let bound: Vec<&str> = self
            .rules_for(name)
            .flat_map(CompiledRule::bound_names)
            .collect();
        hide_parameters(&mut tool, &bound);
        tool
    }

    /// Its argument rules for the presented tool `name`.
    pub(crate) fn rules_for<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a CompiledRule> {
        self.rules.iter().filter(move |r| r.covers(name))
    }

    pub fn id(&self) -> &str {
        self.spec.id()
    }

    /// The source and own name a presented name stands for. A renamed tool is reached by its
    /// new name only; another name is the first selecting source's.
    pub fn route<'a>(&'a self, kind: Selected, name: &'a str) -> Option<(&'a Source, &'a str)> {
        if kind == Selected::Tools
            && let Some((i, own)) = self.renamed.get(name)
        {
            return Some((&self.sources[*i], own.as_str()));
        }
        self.sources
            .iter()
            .find(|s| {
                s.selects(kind, name)
                    && (kind != Selected::Tools
                        || s.override_of(name).is_none_or(|o| o.name.is_none()))
            })
            .map(|s| (s, name))
    }

    /// The name a source's item is presented by, when it is presented at all: selected, and
    /// not shadowed by an earlier source or a rename (the listing then says so).
    pub fn presented_name<'a>(
        &'a self,
        kind: Selected,
        source: usize,
        own: &'a str,
    ) -> Result<&'a str, Shadowed> {
        let s = &self.sources[source];
        if !s.selects(kind, own) {
            return Err(Shadowed::NotSelected);
        }
        let name = match (kind, s.override_of(own).and_then(|o| o.name.as_deref())) {
            (Selected::Tools, Some(name)) => name,
            _ => own,
        };
        match self.route(kind, name) {
            Some((routed, routed_own)) if std::ptr::eq(routed, s) && routed_own == own => Ok(name),
            _ => Err(Shadowed::By(name.to_string())),
        }
    }
}

/// A call of one of a search-mode virtual server's own tools.
#[derive(Debug, Clone, PartialEq)]
pub enum SearchCall {
    /// `find_tools`: the words to search by, and how many tools to answer.
    Find { query: String, limit: usize },
    /// `call_tool`: the presented name of a tool found, and its arguments.
    Call {
        name: String,
        arguments: Option<Value>,
    },
}

impl VirtualServer {
    /// Whether it is in search mode: it lists [`Self::search_tools`] and its pinned tools.
    pub fn searches(&self) -> bool {
        self.spec.search.is_some()
    }

    /// Whether a search-mode virtual server lists the presented tool `name` (pinned).
    pub fn pins(&self, name: &str) -> bool {
        self.spec
            .search
            .as_ref()
            .is_some_and(|s| s.pinned.iter().any(|p| p == name))
    }

    /// The two tools a search-mode virtual server lists besides its pinned ones, as listed.
    pub fn search_tools(&self) -> [Map<String, Value>; 2] {
        let results = self.spec.search.as_ref().map_or(5, |s| s.results);
        let object = |v: Value| match v {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        [
            object(json!({
                "name": FIND_TOOLS,
                "title": "Find tools",
                "description": format!("Finds the tools of {} that fit a task, best first, each with its input schema. Describe what you want to do in a few words; then call a tool found with {CALL_TOOL}.", self.id()),
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "What the tool should do, in a few words (for example: list open pull requests)."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": format!("How many tools to answer at most (default {results}).")}
                    },
                    "required": ["query"]
                },
                "annotations": {"readOnlyHint": true, "openWorldHint": false}
            })),
            object(json!({
                "name": CALL_TOOL,
                "title": "Call a tool found",
                "description": format!("Calls a tool that {FIND_TOOLS} found, by its name, with arguments that follow its input schema."),
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "The tool's name, as found."},
                        "arguments": {"type": "object", "description": "The tool's arguments."}
                    },
                    "required": ["name"]
                }
            })),
        ]
    }

    /// A call of one of its search tools, read (`None`: `name` is not one, or the virtual
    /// server is not in search mode).
    pub fn search_call(
        &self,
        name: &str,
        arguments: Option<&Value>,
    ) -> Option<Result<SearchCall, ArgumentRefused>> {
        let search = self.spec.search.as_ref()?;
        if name != FIND_TOOLS && name != CALL_TOOL {
            return None;
        }
        let empty = Map::new();
        let arguments = match arguments {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(m)) => m,
            Some(_) => return Some(Err(ArgumentRefused::NotAnObject)),
        };
        let text = |field: &str| match arguments.get(field) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            _ => Err(ArgumentRefused::Required(field.to_string())),
        };
        Some(if name == FIND_TOOLS {
            text("query").and_then(|query| {
                let limit = match arguments.get("limit") {
                    None | Some(Value::Null) => search.results as usize,
                    Some(v) => match v.as_u64().filter(|n| (1..=50).contains(n)) {
                        Some(n) => n as usize,
                        None => {
                            return Err(ArgumentRefused::NotAllowed {
                                param: "limit".into(),
                                allowed: json!("an integer from 1 to 50"),
                            });
                        }
                    },
                };
                Ok(SearchCall::Find { query, limit })
            })
        } else {
            text("name").and_then(|name| {
                if name == FIND_TOOLS || name == CALL_TOOL {
                    return Err(ArgumentRefused::NotAllowed {
                        param: "name".into(),
                        allowed: json!("the name of a tool found"),
                    });
                }
                Ok(SearchCall::Call {
                    name,
                    arguments: arguments.get("arguments").cloned(),
                })
            })
        })
    }
}

/// Why a listed item is not presented.
#[derive(Debug, PartialEq, Eq)]
pub enum Shadowed {
    NotSelected,
    /// Another source (or a rename) already presents this name.
    By(String),
}

/// A listed tool as the virtual server presents it: renamed, re-titled, described anew, and its
/// input schema narrowed (fixed parameters removed, enums narrowed, descriptions replaced).
pub fn present_tool(
    mut tool: Map<String, Value>,
    name: &str,
    o: Option<&ToolOverride>,
) -> Map<String, Value> {
    tool.insert("name".into(), Value::String(name.to_string()));
    let Some(o) = o else { return tool };
    if let Some(title) = &o.title {
        tool.insert("title".into(), Value::String(title.clone()));
    }
    let description = o.description.clone().or_else(|| {
        tool.get("description")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let description = match (description, &o.description_suffix) {
        (Some(d), Some(suffix)) => Some(format!("{d}\n\n{suffix}")),
        (None, Some(suffix)) => Some(suffix.clone()),
        (d, None) => d,
    };
    if let Some(d) = description {
        tool.insert("description".into(), Value::String(d));
    }
    if let Some(Value::Object(schema)) = tool.get_mut("inputSchema") {
        narrow_schema(schema, o);
    }
    tool
}

/// A listed tool (its JSON object) without the parameters `names` in its input schema: what
/// the gateway sets (bound to the caller) and the model therefore never sees.
pub fn hide_parameters<S: AsRef<str>>(listed: &mut Map<String, Value>, names: &[S]) {
    if let Some(Value::Object(schema)) = listed.get_mut("inputSchema") {
        for name in names {
            remove_parameter(schema, name.as_ref());
        }
    }
}

/// A parameter the client cannot set, gone from an input schema (and from its `required`).
fn remove_parameter(schema: &mut Map<String, Value>, param: &str) {
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        props.remove(param);
    }
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        required.retain(|r| r.as_str() != Some(param));
    }
}

fn narrow_schema(schema: &mut Map<String, Value>, o: &ToolOverride) {
    for (param, narrowed) in &o.parameters {
        if narrowed.fixed.is_some() {
            remove_parameter(schema, param);
            continue;
        }
        let Some(Value::Object(property)) =
            schema.get_mut("properties").and_then(|p| p.get_mut(param))
        else {
            continue;
        };
        if let Some(allowed) = &narrowed.allowed {
            property.insert("enum".into(), Value::Array(allowed.clone()));
        }
        if let Some(d) = &narrowed.description {
            property.insert("description".into(), Value::String(d.clone()));
        }
    }
}

/// Why a virtual server refused a call's arguments.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallRefused {
    /// The presentation's fixed or narrowed parameters: the client's mistake (invalid params).
    #[error(transparent)]
    Presentation(ArgumentRefused),
    /// One of the virtual server's argument rules: a refusal, recorded as one.
    #[error(transparent)]
    Rule(RefusedArguments),
}

/// Why a virtual server's tool refuses a client's arguments (each names the argument): the
/// client's mistake, answered as invalid params (MCP) or a tool error (the LLM loop).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgumentRefused {
    #[error("arguments must be an object")]
    NotAnObject,
    #[error("argument {0:?} is fixed by the gateway and cannot be set")]
    Fixed(String),
    #[error("argument {0:?} is required")]
    Required(String),
    #[error("argument {param:?} must be one of {allowed}")]
    NotAllowed { param: String, allowed: Value },
}

/// The arguments that go upstream: the client's, with every fixed parameter set (a client may
/// not choose a hidden parameter) and every narrowed one checked against its enum.
pub fn upstream_arguments(
    arguments: Option<Value>,
    o: Option<&ToolOverride>,
) -> Result<Option<Value>, ArgumentRefused> {
    let Some(o) = o.filter(|o| !o.parameters.is_empty()) else {
        return Ok(arguments);
    };
    let mut arguments = match arguments {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(ArgumentRefused::NotAnObject),
    };
    for (param, narrowed) in &o.parameters {
        if let Some(fixed) = &narrowed.fixed {
            if arguments.get(param).is_some_and(|given| given != fixed) {
                return Err(ArgumentRefused::Fixed(param.clone()));
            }
            arguments.insert(param.clone(), fixed.clone());
        } else if let (Some(allowed), Some(given)) = (&narrowed.allowed, arguments.get(param))
            && !allowed.contains(given)
        {
            return Err(ArgumentRefused::NotAllowed {
                param: param.clone(),
                allowed: Value::Array(allowed.clone()),
            });
        }
    }
    Ok(Some(Value::Object(arguments)))
}
