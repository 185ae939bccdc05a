//! From a document to tools: parse, select operations, build each one's schemas and binding.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use switchboard_protocol::schema::{Cleaned, Cleaner, DefNames, USE_ANNOTATIONS};
use switchboard_snapshot::{OpenApiSpec, OperationSelector, glob_match};

use crate::bundle::each_reference;
use crate::json_schema::{Direction, KEPT_FOR_CLIENTS, Version, each_subschema, upgrade};
use switchboard_snapshot::openapi::HTTP_METHODS as METHODS;
/// Tool names clients accept: 1 to 64 of `a-z A-Z 0-9 _ - .`.
const MAX_NAME: usize = 64;
/// Header parameters the OpenAPI specification says to ignore (the request sets them).
const IGNORED_HEADERS: [&str; 3] = ["accept", "content-type", "authorization"];

/// A document that cannot be read at all: where, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentError {
    /// A path into the document (`openapi`, `paths./pets.get.parameters[0]`), empty for the
    /// whole text.
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for DocumentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// The tools of one document, and the selected operations that could not be expressed.
#[derive(Debug, Default)]
pub struct Compiled {
    pub tools: Vec<OperationTool>,
    /// Tool name → index in `tools` (every call looks its tool up).
    by_name: HashMap<String, usize>,
    pub problems: Vec<DocumentError>,
    /// The OpenAPI version the document declares.
    pub version: String,
    /// Output schemas left out for `openapi.maxOutputSchemaBytes`.
    pub outputs_left_out: usize,
    /// The definitions the tools' schemas share ([`Def`]), by index.
    defs: Vec<Def>,
}

impl Compiled {
    pub fn tool(&self, name: &str) -> Option<&OperationTool> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }

    /// The `tools/list` result: every tool, by path and then method (a stable order), written
    /// as text straight from the tools' own and the definitions they share (no tree of the
    /// whole listing is built).
    pub fn listing(&self) -> Box<RawValue> {
        // (as listed, each schema with its definitions: more than is held)
        let listed: usize = (0..self.tools.len()).map(|i| self.listed_bytes(i)).sum();
        let mut out = String::with_capacity(listed + 16);
        out.push_str("{\"tools\":[");
        for (i, tool) in self.tools.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            self.write_listed(tool, &tool.name, &mut out);
        }
        out.push_str("]}");
        RawValue::from_string(out).unwrap_or_else(|_| empty_listing())
    }

    /// Tool `index` (of [`Compiled::tools`]) as `tools/list` lists it, named `name` (an
    /// aggregate lists it under its prefixed name): its schemas written with the definitions
    /// they reach, so a listing that keeps a tool by its index holds none of that text.
    pub fn listed_tool(&self, index: usize, name: &str) -> Option<String> {
        let tool = self.tools.get(index)?;
        let mut out = String::with_capacity(self.listed_bytes(index) + name.len());
        self.write_listed(tool, name, &mut out);
        Some(out)
    }

    /// About how many bytes tool `index` takes as listed (schemas with their definitions,
    /// description, and the rest of the item); 0 for no such tool.
    pub fn listed_bytes(&self, index: usize) -> usize {
        self.tools.get(index).map_or(0, |t| {
            t.input.listed_bytes(&self.defs)
                + t.output.as_ref().map_or(0, |o| o.listed_bytes(&self.defs))
                + t.description.as_ref().map_or(0, String::len)
                + t.name.len()
                + 160
        })
    }

    /// Bytes of the tools' schemas and descriptions and of their shared definitions, as held.
    pub fn bytes(&self) -> usize {
        self.tools.iter().map(OperationTool::bytes).sum::<usize>()
            + self.defs.iter().map(Def::bytes).sum::<usize>()
    }

    /// A tool's input schema as listed (its definitions in its `$defs`).
    #[cfg(test)]
    pub(crate) fn input_schema(&self, tool: &OperationTool) -> Value {
        let mut text = String::new();
        write_schema(&mut text, &tool.input, &self.defs);
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// A tool's output schema as listed.
    #[cfg(test)]
    pub(crate) fn output_schema(&self, tool: &OperationTool) -> Option<Value> {
        let mut text = String::new();
        write_schema(&mut text, tool.output.as_ref()?, &self.defs);
        serde_json::from_str(&text).ok()
    }

    /// The tool as `tools/list` lists it, named `name`, written onto `out`.
    fn write_listed(&self, tool: &OperationTool, name: &str, out: &mut String) {
        let quoted = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
        out.push_str("{\"name\":");
        out.push_str(&quoted(name));
        if let Some(description) = &tool.description {
            out.push_str(",\"description\":");
            out.push_str(&quoted(description));
        }
        out.push_str(",\"inputSchema\":");
        write_schema(out, &tool.input, &self.defs);
        if let Some(output) = &tool.output {
            out.push_str(",\"outputSchema\":");
            write_schema(out, output, &self.defs);
        }
        let method = &tool.method;
        let read_only = matches!(*method, http::Method::GET | http::Method::HEAD);
        let destructive = *method == http::Method::DELETE;
        let idempotent = matches!(
            *method,
            http::Method::GET | http::Method::HEAD | http::Method::PUT | http::Method::DELETE
        );
        out.push_str(&format!(
            ",\"annotations\":{{\"readOnlyHint\":{read_only},\"destructiveHint\":{destructive},\"idempotentHint\":{idempotent}}}}}"
        ));
    }
}

/// A tool schema as held: its own text, where each definition it uses is a `$ref` into its
/// `$defs`, and the definitions it reaches (directly or through others), in name order.
#[derive(Debug, Clone)]
pub(crate) struct ToolSchema {
    top: Box<RawValue>,
    defs: Vec<u32>,
}

impl ToolSchema {
    /// Bytes as listed ([`write_schema`]: `,"$defs":{`, each `"<name>":<text>` and a comma
    /// between, `}`).
    fn listed_bytes(&self, defs: &[Def]) -> usize {
        let n = self.defs.len();
        let entries: usize = self
            .defs
            .iter()
            .map(|&i| defs[i as usize].bytes() + 3)
            .sum();
        self.top.get().len() + if n == 0 { 0 } else { 11 + entries + n - 1 }
    }
}

/// One definition the tool schemas of a document share: a referenced schema cleaned once (for
/// one direction: a request's and a response's differ in what is required) and held once, and
/// written into the `$defs` of each tool schema that reaches it. An OpenAPI document's
/// components are used many times over: GitHub's `simple-user` five times in one issue, the
/// Kubernetes `ObjectMeta` in every object of a list; copied at each use they were most of a
/// listing.
#[derive(Debug)]
struct Def {
    /// The name under `$defs`: only `A-Z a-z 0-9 . _ -` ([`def_names`]), so written as is
    /// between quotes and in a `$ref` without escapes.
    name: String,
    text: Box<RawValue>,
}

impl Def {
    fn bytes(&self) -> usize {
        self.name.len() + self.text.get().len()
    }
}

/// A tool schema written with its `$defs` (an object at the top: the defs go in before its
/// closing brace).
fn write_schema(out: &mut String, schema: &ToolSchema, defs: &[Def]) {
    let top = schema.top.get();
    let open = top.strip_suffix('}').filter(|_| !schema.defs.is_empty());
    let Some(open) = open else {
        out.push_str(top);
        return;
    };
    out.push_str(open);
    if open != "{" {
        out.push(',');
    }
    out.push_str("\"$defs\":{");
    for (i, &d) in schema.defs.iter().enumerate() {
        let def = &defs[d as usize];
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        out.push_str(&def.name);
        out.push_str("\":");
        out.push_str(def.text.get());
    }
    out.push_str("}}");
}

fn empty_listing() -> Box<RawValue> {
    RawValue::from_string("{\"tools\":[]}".into()).unwrap_or_default()
}

/// One operation as a tool.
#[derive(Debug, Clone)]
pub struct OperationTool {
    pub name: String,
    pub description: Option<String>,
    /// Kept as JSON text (as listings are): a GitHub-sized document's schemas take a tenth of
    /// what they take as trees, and a listing writes them out as they are.
    /// ([`Compiled::listing`] writes it.)
    pub(crate) input: ToolSchema,
    /// The JSON schema of the success response, an object (a non-object response is wrapped
    /// as `{"result": ...}`: MCP's structured content is an object).
    pub(crate) output: Option<ToolSchema>,
    pub(crate) wraps_output: bool,
    pub method: http::Method,
    /// The path template (`/pets/{petId}`).
    pub path: String,
    pub params: Vec<Param>,
    /// The argument that carries the JSON request body, if the operation takes one.
    pub body: Option<Body>,
}

/// An operation's JSON request body as a tool argument.
#[derive(Debug, Clone, PartialEq)]
pub struct Body {
    /// The argument's name (`body`, or `requestBody` when a parameter is called `body`).
    pub argument: String,
    pub required: bool,
    /// The media type the document gives the body (`application/merge-patch+json`), sent as
    /// the request's `Content-Type`; `application/json` for a wildcard.
    pub media_type: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub location: ParamLocation,
    pub required: bool,
    /// Arrays as repeated query parameters (`explode`, the default for `form`), else joined
    /// with commas.
    pub explode: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamLocation {
    Path,
    Query,
    Header,
    Cookie,
}

impl ParamLocation {
    fn parse(text: &str) -> Option<ParamLocation> {
        Some(match text {
            "path" => ParamLocation::Path,
            "query" => ParamLocation::Query,
            "header" => ParamLocation::Header,
            "cookie" => ParamLocation::Cookie,
            _ => return None,
        })
    }
}

impl OperationTool {
    /// Bytes of its own schemas and description (not the shared definitions).
    pub fn bytes(&self) -> usize {
        self.input.top.get().len()
            + self.output.as_ref().map_or(0, |s| s.top.get().len())
            + self.description.as_ref().map_or(0, String::len)
    }

    /// Whether the tool has an output schema.
    #[cfg(test)]
    pub(crate) fn has_output_schema(&self) -> bool {
        self.output.is_some()
    }
}

/// A schema as the text a tool keeps.
fn as_text(schema: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(schema)
        .unwrap_or_else(|_| RawValue::from_string("{}".into()).unwrap_or_default())
}

/// Reads a document (JSON or YAML) and compiles the operations `spec` selects.
pub fn compile(text: &str, spec: &OpenApiSpec) -> Result<Compiled, DocumentError> {
    compile_document(&parse(text)?, spec)
}

/// Parses a document's text, JSON or YAML.
pub fn parse(text: &str) -> Result<Value, DocumentError> {
    let whole = |message: String| DocumentError {
        path: String::new(),
        message,
    };
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| whole(format!("not valid JSON: {e}")))
    } else {
        serde_saphyr::from_str(text)
            .map_err(|e| whole(format!("not valid YAML: {}", e.without_snippet())))
    }
}

/// Compiles a parsed document (one [`crate::bundle::bundle`] made whole, for a fetched one
/// with references into others).
pub fn compile_document(document: &Value, spec: &OpenApiSpec) -> Result<Compiled, DocumentError> {
    let mut compiled = compile_value(document, spec)?;
    // References into documents that are not at hand: the schemas below them are "any
    // value" and operations that need them are left out; say which documents, once each.
    let mut unreachable = std::collections::BTreeSet::new();
    each_reference(document, &mut |reference| {
        if !reference.starts_with('#') {
            unreachable.insert(reference.split('#').next().unwrap_or(reference).to_string());
        }
    });
    for target in unreachable {
        compiled.problems.push(DocumentError {
            path: String::new(),
            message: format!(
                "$ref into {target:?} is not followed (references into other documents are followed for a documentUrl, at most {} documents)",
                crate::bundle::MAX_DOCUMENTS
            ),
        });
    }
    Ok(compiled)
}

fn compile_value(document: &Value, spec: &OpenApiSpec) -> Result<Compiled, DocumentError> {
    let at = |path: &str, message: String| DocumentError {
        path: path.to_string(),
        message,
    };
    if !document.is_object() {
        return Err(at("", "is not an OpenAPI document (not an object)".into()));
    }
    if document.get("swagger").is_some() {
        return Err(at(
            "swagger",
            "Swagger 2.0 is not supported; convert the document to OpenAPI 3".into(),
        ));
    }
    let version = document
        .get("openapi")
        .and_then(Value::as_str)
        .ok_or_else(|| at("openapi", "is missing (not an OpenAPI 3 document)".into()))?;
    if !(version.starts_with("3.0") || version.starts_with("3.1")) {
        return Err(at(
            "openapi",
            format!("version {version:?} is not supported (3.0 or 3.1)"),
        ));
    }
    let paths = match document.get("paths") {
        Some(Value::Object(paths)) => paths,
        None => &Map::new(),
        Some(_) => return Err(at("paths", "must be an object".into())),
    };
    let schema_version = Version::of(version);
    let definitions = definitions(document, schema_version);
    let names = def_names(&definitions);
    let mut table = DefTable::new(&definitions, &names);
    let overrides: HashMap<&str, &switchboard_snapshot::OperationOverride> = spec
        .overrides
        .iter()
        .map(|o| (o.operation.as_str(), o))
        .collect();
    let mut compiled = Compiled {
        version: version.to_string(),
        ..Compiled::default()
    };
    let mut taken: HashMap<String, String> = HashMap::new();
    // Bytes the tools kept so far take (schemas and descriptions, as text; the definitions
    // they share are counted by the table).
    let mut held: u64 = 0;
    for (path, item) in paths {
        let item_path = format!("paths.{path}");
        let item = match resolve(document, item) {
            Ok(Value::Object(item)) => item,
            Ok(_) => {
                compiled
                    .problems
                    .push(at(&item_path, "must be an object".into()));
                continue;
            }
            Err(message) => {
                compiled.problems.push(at(&item_path, message));
                continue;
            }
        };
        let shared = item.get("parameters");
        for method in METHODS {
            let Some(Value::Object(operation)) = item.get(method) else {
                continue;
            };
            let op_path = format!("{item_path}.{method}");
            let id = operation.get("operationId").and_then(Value::as_str);
            if !selected(&spec.operations, id, operation, path, method) {
                continue;
            }
            let key = id.map_or_else(|| format!("{method} {path}"), str::to_owned);
            let overridden = overrides.get(key.as_str()).copied();
            let built = Operation {
                document,
                definitions: &definitions,
                version: schema_version,
                path,
                method,
                operation,
                shared,
                at: &op_path,
                output_bytes: spec.max_output_schema_bytes,
            }
            .build(overridden, &mut table);
            match built {
                Ok((tool, output_left_out)) => {
                    if let Some(first) = taken.get(&tool.name) {
                        compiled.problems.push(at(
                            &op_path,
                            format!(
                                "its tool name {:?} is already {first}'s (set a name in overrides)",
                                tool.name
                            ),
                        ));
                        continue;
                    }
                    taken.insert(tool.name.clone(), op_path.clone());
                    if output_left_out {
                        compiled.outputs_left_out += 1;
                    }
                    held += tool.bytes() as u64;
                    if held + table.bytes > spec.max_compiled_bytes() {
                        return Err(at(
                            "",
                            format!(
                                "its tools take more than openapi.maxCompiledBytes ({} MiB) as compiled; select fewer operations, bound output schemas (openapi.maxOutputSchemaBytes) or raise the limit",
                                spec.max_compiled_bytes() >> 20
                            ),
                        ));
                    }
                    compiled
                        .by_name
                        .insert(tool.name.clone(), compiled.tools.len());
                    compiled.tools.push(tool);
                }
                Err(problem) => compiled.problems.push(problem),
            }
        }
    }
    compiled.defs = table.into_used(&mut compiled.tools);
    for o in &spec.overrides {
        if !override_used(&compiled, o, paths) {
            compiled.problems.push(at(
                "",
                format!(
                    "overrides: operation {:?} is not a selected operation of the document",
                    o.operation
                ),
            ));
        }
    }
    Ok(compiled)
}

/// Whether an override names an operation that became a tool.
fn override_used(
    compiled: &Compiled,
    o: &switchboard_snapshot::OperationOverride,
    paths: &Map<String, Value>,
) -> bool {
    let derived = paths.iter().any(|(path, item)| {
        METHODS.iter().any(|m| {
            item.get(*m).is_some_and(|op| {
                let id = op.get("operationId").and_then(Value::as_str);
                id == Some(o.operation.as_str())
                    || (id.is_none() && format!("{m} {path}") == o.operation)
            })
        })
    });
    derived
        && o.name
            .as_deref()
            .is_none_or(|n| compiled.tools.iter().any(|t| t.name == n))
}

fn selected(
    selector: &OperationSelector,
    id: Option<&str>,
    operation: &Map<String, Value>,
    path: &str,
    method: &str,
) -> bool {
    let any = |globs: &[String], value: &str| globs.iter().any(|g| glob_match(g, value));
    let tags: Vec<&str> = operation
        .get("tags")
        .and_then(Value::as_array)
        .map(|t| t.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let everything =
        selector.operation_ids.is_empty() && selector.tags.is_empty() && selector.paths.is_empty();
    let matched = everything
        || id.is_some_and(|id| any(&selector.operation_ids, id))
        || tags.iter().any(|t| any(&selector.tags, t))
        || any(&selector.paths, path);
    let method_ok = selector.methods.is_empty()
        || selector
            .methods
            .iter()
            .any(|m| m.eq_ignore_ascii_case(method));
    // (an operation without an id by `<method> <path>`, the key overrides use too)
    let excluded = match id {
        Some(id) => any(&selector.exclude, id),
        None => any(&selector.exclude, &format!("{method} {path}")),
    };
    matched && method_ok && !excluded
}

/// The target of every local `$ref` in the document, by reference string as written, for the
/// sanitizer: `#/components/schemas/<name>` and any other JSON pointer into the document
/// (`#/components/schemas/Pet/properties/kind`, `#/paths/~1pets/...`), escapes and
/// percent-encoding decoded. Each is read as its document's version says (see [`prepared`]).
fn definitions(document: &Value, version: Version) -> Map<String, Value> {
    let mut out = Map::new();
    each_reference(document, &mut |reference| {
        if !reference.starts_with('#') || out.contains_key(reference) {
            return;
        }
        if let Some(target) = local_target(document, reference).cloned() {
            out.insert(reference.to_string(), prepared(target, version));
        }
    });
    out
}

/// Each reference's name under a tool schema's `$defs`: a component's own name
/// (`#/components/schemas/Pet` → `Pet`), a target copied from another document
/// ([`crate::bundle()`]) its `title` if it has one (`bundled_<n>` if not), any other pointer its
/// tokens joined with `.` (`components.schemas.Pet.properties.kind`); characters outside
/// `A-Z a-z 0-9 . _ -` become
/// `_` (so a name is written and referred to without escapes), and a name met again is
/// numbered (`Pet_2`) in the order of the references (sorted): the same document gives the
/// same names.
fn def_names(definitions: &Map<String, Value>) -> DefNames {
    let mut taken = HashSet::new();
    let mut out = DefNames::new();
    for (reference, target) in definitions {
        let fragment = reference.trim_start_matches('#');
        let pointer = percent_encoding::percent_decode_str(fragment).decode_utf8_lossy();
        let tokens: Vec<String> = pointer
            .split('/')
            .skip(1)
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect();
        let name = match tokens.as_slice() {
            [components, schemas, name] if components == "components" && schemas == "schemas" => {
                name.clone()
            }
            [bundled, n] if bundled == crate::bundle::BUNDLED => target
                .get("title")
                .and_then(Value::as_str)
                .map_or_else(|| format!("bundled_{n}"), str::to_owned),
            _ => tokens.join("."),
        };
        let mut name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if name.is_empty() {
            name.push('_');
        }
        let mut unique = name.clone();
        let mut n = 1;
        while !taken.insert(unique.clone()) {
            n += 1;
            unique = format!("{name}_{n}");
        }
        out.insert(reference.clone(), unique);
    }
    out
}

/// The definitions of one document being compiled: each referenced schema cleaned once per
/// direction, when a tool first reaches it, and what each refers to (a tool lists every
/// definition it reaches, through others too).
struct DefTable<'a> {
    definitions: &'a Map<String, Value>,
    names: &'a DefNames,
    /// A `$ref` as a cleaned schema writes it (`#/$defs/<name>`) → the reference it stands for.
    by_ref: HashMap<String, &'a str>,
    ids: HashMap<(&'a str, Direction), u32>,
    defs: Vec<Def>,
    /// Each definition's definitions, by index, that it refers to itself.
    refs: Vec<Vec<u32>>,
    /// Definitions given an index and not yet cleaned (a worklist: a chain of references as
    /// long as the document's is followed without recursion).
    pending: Vec<(u32, &'a str, Direction)>,
    /// Bytes of `defs`.
    bytes: u64,
}

impl<'a> DefTable<'a> {
    fn new(definitions: &'a Map<String, Value>, names: &'a DefNames) -> Self {
        let by_ref = names
            .iter()
            .filter_map(|(reference, name)| {
                let (reference, _) = definitions.get_key_value(reference)?;
                Some((format!("#/$defs/{name}"), reference.as_str()))
            })
            .collect();
        DefTable {
            definitions,
            names,
            by_ref,
            ids: HashMap::new(),
            defs: Vec::new(),
            refs: Vec::new(),
            pending: Vec::new(),
            bytes: 0,
        }
    }

    /// What a `$ref` of a cleaned schema stands for, aliases followed (for its marks).
    fn uses(&self, cleaned_ref: &str) -> Option<&'a Value> {
        let mut target = self.definitions.get(*self.by_ref.get(cleaned_ref)?)?;
        for _ in 0..8 {
            match target.get("$ref").and_then(Value::as_str) {
                Some(next) if target.as_object().is_some_and(|o| o.len() == 1) => {
                    target = self.definitions.get(next)?;
                }
                _ => break,
            }
        }
        Some(target)
    }

    /// A cleaned tool schema as held: its text and every definition it reaches.
    fn held(&mut self, cleaned: Cleaned, direction: Direction) -> ToolSchema {
        ToolSchema {
            top: as_text(&cleaned.schema),
            defs: self.reached(&cleaned.reached, direction),
        }
    }

    /// Every definition `references` reach, directly or through others, in name order.
    fn reached(&mut self, references: &[String], direction: Direction) -> Vec<u32> {
        let mut stack: Vec<u32> = references
            .iter()
            .filter_map(|r| self.id(r, direction))
            .collect();
        self.clean_pending();
        let mut seen = HashSet::new();
        while let Some(id) = stack.pop() {
            if seen.insert(id) {
                stack.extend(self.refs[id as usize].iter().copied());
            }
        }
        let mut out: Vec<u32> = seen.into_iter().collect();
        out.sort_by(|a, b| {
            self.defs[*a as usize]
                .name
                .cmp(&self.defs[*b as usize].name)
        });
        out
    }

    /// The index of a reference's definition for `direction`, given one (and put on the
    /// worklist) the first time.
    fn id(&mut self, reference: &str, direction: Direction) -> Option<u32> {
        let (reference, _) = self.definitions.get_key_value(reference)?;
        let name = self.names.get(reference)?;
        if let Some(&id) = self.ids.get(&(reference.as_str(), direction)) {
            return Some(id);
        }
        let id = u32::try_from(self.defs.len()).ok()?;
        self.ids.insert((reference.as_str(), direction), id);
        self.defs.push(Def {
            name: name.clone(),
            text: as_text(&json!({})),
        });
        self.refs.push(Vec::new());
        self.pending.push((id, reference.as_str(), direction));
        Some(id)
    }

    /// Cleans the definitions on the worklist (and those they reach first).
    fn clean_pending(&mut self) {
        while let Some((id, reference, direction)) = self.pending.pop() {
            let Some(target) = self.definitions.get(reference) else {
                continue;
            };
            let cleaned =
                Cleaner::sharing(self.definitions, KEPT_FOR_CLIENTS, self.names, 1).clean(target);
            let mut schema = cleaned.schema;
            collapse_single_all_of(&mut schema);
            direction.settle_within(&mut schema, &|r| self.uses(r));
            let text = as_text(&schema);
            self.bytes += (text.get().len() + self.defs[id as usize].name.len()) as u64;
            self.defs[id as usize].text = text;
            let refs = cleaned
                .reached
                .iter()
                .filter_map(|r| self.id(r, direction))
                .collect();
            self.refs[id as usize] = refs;
        }
    }

    /// The definitions some tool lists (an output schema left out leaves its own behind),
    /// the tools' indices renumbered to match.
    fn into_used(self, tools: &mut [OperationTool]) -> Vec<Def> {
        let mut used = vec![false; self.defs.len()];
        for tool in tools.iter() {
            for schema in std::iter::once(&tool.input).chain(tool.output.as_ref()) {
                for &d in &schema.defs {
                    used[d as usize] = true;
                }
            }
        }
        let mut renumbered = vec![0u32; self.defs.len()];
        let mut kept = Vec::new();
        for (i, def) in self.defs.into_iter().enumerate() {
            if used[i] {
                renumbered[i] = kept.len() as u32;
                kept.push(def);
            }
        }
        for tool in tools.iter_mut() {
            let schemas = std::iter::once(&mut tool.input).chain(tool.output.as_mut());
            for schema in schemas {
                schema
                    .defs
                    .iter_mut()
                    .for_each(|d| *d = renumbered[*d as usize]);
            }
        }
        kept
    }
}

/// A schema of the document as the sanitizer should read it: in OpenAPI 3.1 (JSON Schema
/// 2020-12) keywords next to a `$ref` count ([`wrap_ref_siblings`]); in both, what is not
/// JSON Schema 2020-12 is rewritten into it ([`upgrade`]).
fn prepared(mut schema: Value, version: Version) -> Value {
    match version {
        Version::V31 => wrap_ref_siblings(&mut schema),
        Version::V30 => drop_ref_annotations(&mut schema),
    }
    upgrade(&mut schema);
    schema
}

/// What a local reference (`#/a/b~1c`, percent-encoded as a URI fragment may be) names.
fn local_target<'a>(document: &'a Value, reference: &str) -> Option<&'a Value> {
    let fragment = reference.strip_prefix('#')?;
    let pointer = percent_encoding::percent_decode_str(fragment)
        .decode_utf8()
        .ok()?;
    // `Value::pointer` undoes the `~1` and `~0` escapes of each token itself.
    document.pointer(&pointer)
}

/// Follows a local `$ref` (a chain of at most a few) to what it names.
fn resolve<'a>(document: &'a Value, value: &'a Value) -> Result<&'a Value, String> {
    let mut value = value;
    for _ in 0..8 {
        let Some(reference) = value.get("$ref").and_then(Value::as_str) else {
            return Ok(value);
        };
        if !reference.starts_with('#') {
            return Err(format!(
                "$ref {reference:?} points into another document that is not at hand (followed only for a documentUrl)"
            ));
        }
        value = local_target(document, reference)
            .ok_or_else(|| format!("$ref {reference:?} names nothing in the document"))?;
    }
    Err("$ref chain longer than 8".into())
}

/// OpenAPI 3.1 (JSON Schema 2020-12) applies the keywords next to a `$ref` as well as the
/// referenced schema: FastAPI writes an enum parameter with a default as
/// `{"$ref": "#/components/schemas/Priority", "default": "normal"}`. The sanitizer inlines a
/// bare reference (keeping only a sibling description), so such a node becomes
/// `{"allOf": [{"$ref": ...}], "default": "normal"}`, which means the same; after sanitizing,
/// [`collapse_single_all_of`] merges it into one schema again.
fn wrap_ref_siblings(schema: &mut Value) {
    let Value::Object(o) = schema else { return };
    each_subschema(o, wrap_ref_siblings);
    if o.len() < 2 || !o.get("$ref").is_some_and(Value::is_string) {
        return;
    }
    let reference = json!({"$ref": o.remove("$ref")});
    match o.get_mut("allOf") {
        Some(Value::Array(branches)) => branches.insert(0, reference),
        _ => {
            o.insert("allOf".into(), json!([reference]));
        }
    }
}

/// OpenAPI 3.0 (JSON Schema draft 5) ignores keywords next to a `$ref`; the sanitizer keeps
/// the annotations beside one (in 2020-12 they describe that use), so in a 3.0 document those
/// go first, its description aside (what documents mean by it, and what readers show).
/// (`nullable` beside a reference is read by [`upgrade`], as its documents mean it.)
fn drop_ref_annotations(schema: &mut Value) {
    let Value::Object(o) = schema else { return };
    each_subschema(o, drop_ref_annotations);
    if o.get("$ref").is_some_and(Value::is_string) {
        // (3.0's `example` too: `upgrade` would make it an `examples`)
        for k in USE_ANNOTATIONS.iter().chain(&["example"]) {
            if *k != "description" {
                o.remove(*k);
            }
        }
    }
}

/// A sanitized schema's `allOf` of one branch merged into its parent (when no constraint of
/// both differs; where both have an annotation, [`USE_ANNOTATIONS`], the parent's, the use,
/// wins over the branch's, the definition): the shape [`wrap_ref_siblings`] makes, and pydantic v1's
/// `allOf: [{$ref}]` with a default, read as one plain schema.
fn collapse_single_all_of(schema: &mut Value) {
    let Value::Object(o) = schema else { return };
    if let Some(Value::Object(properties)) = o.get_mut("properties") {
        properties.values_mut().for_each(collapse_single_all_of);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v) = o.get_mut(key) {
            collapse_single_all_of(v);
        }
    }
    for key in ["anyOf", "allOf"] {
        if let Some(Value::Array(branches)) = o.get_mut(key) {
            branches.iter_mut().for_each(collapse_single_all_of);
        }
    }
    let mergeable = match o.get("allOf") {
        Some(Value::Array(branches)) => match branches.as_slice() {
            // A kept reference takes only annotations beside it: a reader that inlines it
            // (the LLM loop's sanitizer, a client of an older draft) keeps no constraint there.
            [Value::Object(branch)] if branch.contains_key("$ref") => o.keys().all(|k| {
                k == "allOf"
                    || USE_ANNOTATIONS.contains(&k.as_str())
                    || KEPT_FOR_CLIENTS.contains(&k.as_str())
            }),
            [Value::Object(branch)] => branch.iter().all(|(k, v)| {
                USE_ANNOTATIONS.contains(&k.as_str()) || o.get(k).is_none_or(|mine| mine == v)
            }),
            _ => false,
        },
        _ => false,
    };
    if !mergeable {
        return;
    }
    if let Some(Value::Array(mut branches)) = o.remove("allOf")
        && let Some(Value::Object(branch)) = branches.pop()
    {
        for (k, v) in branch {
            o.entry(k).or_insert(v);
        }
    }
}

struct Operation<'a> {
    document: &'a Value,
    definitions: &'a Map<String, Value>,
    /// How the document's schemas are read ([`prepared`]).
    version: Version,
    path: &'a str,
    method: &'a str,
    operation: &'a Map<String, Value>,
    shared: Option<&'a Value>,
    at: &'a str,
    /// `openapi.maxOutputSchemaBytes` (0: no output schema is written at all).
    output_bytes: Option<u64>,
}

impl Operation<'_> {
    /// A schema of this operation as the sanitizer should read it.
    fn prepared(&self, schema: Value) -> Value {
        prepared(schema, self.version)
    }

    /// A tool schema, input or output, from the operation's schemas (each [`Self::prepared`]):
    /// keywords allow-listed by the sanitizer (for the input, the arguments object: an object
    /// at the top), references kept as `$ref`s into the tool schema's `$defs` below the top
    /// and (for the input) below each argument, a one-branch `allOf` merged, and properties
    /// that travel only the other way not required (within each argument of the input).
    fn tool_schema(&self, schema: &Value, direction: Direction, table: &DefTable) -> Cleaned {
        let sharing = |inline_depth| {
            Cleaner::sharing(
                self.definitions,
                KEPT_FOR_CLIENTS,
                table.names,
                inline_depth,
            )
        };
        let mut out = match direction {
            Direction::Request => sharing(2).sanitize(schema),
            Direction::Response => sharing(1).clean(schema),
        };
        collapse_single_all_of(&mut out.schema);
        let uses = |r: &str| table.uses(r);
        match (direction, &mut out.schema) {
            (Direction::Request, Value::Object(arguments)) => {
                if let Some(Value::Object(properties)) = arguments.get_mut("properties") {
                    properties
                        .values_mut()
                        .for_each(|a| direction.settle(a, &uses));
                }
            }
            (_, schema) => direction.settle(schema, &uses),
        }
        out
    }

    fn problem(&self, field: &str, message: impl Into<String>) -> DocumentError {
        DocumentError {
            path: if field.is_empty() {
                self.at.to_string()
            } else {
                format!("{}.{field}", self.at)
            },
            message: message.into(),
        }
    }

    fn build(
        &self,
        overridden: Option<&switchboard_snapshot::OperationOverride>,
        table: &mut DefTable,
    ) -> Result<(OperationTool, bool), DocumentError> {
        let mut properties = Map::new();
        let mut required = Vec::new();
        let mut params: Vec<Param> = Vec::new();
        // Operation parameters override path-item ones of the same name and location.
        let mut by_key: BTreeMap<(String, String), (String, &Value)> = BTreeMap::new();
        let mut order = Vec::new();
        for (section, list) in [
            ("parameters", self.shared),
            ("parameters", self.operation.get("parameters")),
        ] {
            let Some(list) = list else { continue };
            let Some(list) = list.as_array() else {
                return Err(self.problem(section, "must be a list"));
            };
            for (i, p) in list.iter().enumerate() {
                let field = format!("{section}[{i}]");
                let p = resolve(self.document, p).map_err(|m| self.problem(&field, m))?;
                let name = p.get("name").and_then(Value::as_str);
                let location = p.get("in").and_then(Value::as_str);
                let (Some(name), Some(location)) = (name, location) else {
                    return Err(self.problem(&field, "needs a name and an in"));
                };
                let key = (name.to_string(), location.to_string());
                if by_key.insert(key.clone(), (field, p)).is_none() {
                    order.push(key);
                }
            }
        }
        for key in &order {
            let (field, p) = &by_key[key];
            let (name, location) = key;
            let Some(location) = ParamLocation::parse(location) else {
                return Err(self.problem(
                    field,
                    format!("in {location:?} is not path, query, header or cookie"),
                ));
            };
            if location == ParamLocation::Header
                && IGNORED_HEADERS.contains(&name.to_ascii_lowercase().as_str())
            {
                continue;
            }
            if properties.contains_key(name) {
                return Err(self.problem(
                    field,
                    format!("parameter {name:?} appears in two locations; one tool argument cannot stand for both"),
                ));
            }
            let schema = p
                .get("schema")
                .or_else(|| p.pointer("/content/application~1json/schema"))
                .cloned()
                .unwrap_or_else(|| json!({}));
            let mut schema = self.prepared(schema);
            if let (Value::Object(s), Some(d)) = (&mut schema, p.get("description")) {
                s.entry("description").or_insert_with(|| d.clone());
            }
            let is_required = location == ParamLocation::Path
                || p.get("required").and_then(Value::as_bool) == Some(true);
            if is_required {
                required.push(Value::String(name.clone()));
            }
            let style_form = p
                .get("style")
                .and_then(Value::as_str)
                .is_none_or(|s| s == "form");
            params.push(Param {
                name: name.clone(),
                location,
                required: is_required,
                explode: p
                    .get("explode")
                    .and_then(Value::as_bool)
                    .unwrap_or(style_form),
            });
            properties.insert(name.clone(), schema);
        }
        for segment in template_names(self.path) {
            if !params
                .iter()
                .any(|p| p.location == ParamLocation::Path && p.name == segment)
            {
                return Err(self.problem(
                    "parameters",
                    format!("path parameter {{{segment}}} is not declared"),
                ));
            }
        }
        let body = self.body(&mut properties, &mut required)?;
        let input = json!({"type": "object", "properties": properties, "required": required});
        let input = self.tool_schema(&input, Direction::Request, table);
        let input = table.held(input, Direction::Request);
        let (output, wraps_output) = self.output(table);
        // (bounded as listed, its definitions included; with a bound of 0 none is made)
        let (output, output_left_out) = match output {
            None => (None, false),
            Some(_) if self.output_bytes == Some(0) => (None, true),
            Some(cleaned) => {
                let held = table.held(cleaned, Direction::Response);
                let over = self
                    .output_bytes
                    .is_some_and(|max| held.listed_bytes(&table.defs) as u64 > max);
                if over {
                    (None, true)
                } else {
                    (Some(held), false)
                }
            }
        };
        let id = self.operation.get("operationId").and_then(Value::as_str);
        let name = match overridden.and_then(|o| o.name.clone()) {
            Some(name) => {
                if !switchboard_snapshot::is_tool_name(&name) {
                    return Err(self.problem(
                        "",
                        format!("override name {name:?} is not 1-64 of a-z A-Z 0-9 _ - ."),
                    ));
                }
                name
            }
            None => derived_name(id, self.method, self.path),
        };
        let description = overridden
            .and_then(|o| o.description.clone())
            .or_else(|| self.description());
        let tool = OperationTool {
            name,
            description,
            input,
            output,
            wraps_output,
            method: self
                .method
                .to_ascii_uppercase()
                .parse()
                .map_err(|_| self.problem("", "not an HTTP method"))?,
            path: self.path.to_string(),
            params,
            body,
        };
        Ok((tool, output_left_out))
    }

    fn description(&self) -> Option<String> {
        let text = |k: &str| {
            self.operation
                .get(k)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
        };
        match (text("summary"), text("description")) {
            (Some(s), Some(d)) if s != d => Some(format!("{s}\n\n{d}")),
            (Some(s), _) => Some(s.to_string()),
            (None, Some(d)) => Some(d.to_string()),
            (None, None) => None,
        }
    }

    /// The JSON request body as one argument (`body`, or `requestBody` when a parameter is
    /// called `body`).
    fn body(
        &self,
        properties: &mut Map<String, Value>,
        required: &mut Vec<Value>,
    ) -> Result<Option<Body>, DocumentError> {
        let Some(body) = self.operation.get("requestBody") else {
            return Ok(None);
        };
        let body = resolve(self.document, body).map_err(|m| self.problem("requestBody", m))?;
        let is_required = body.get("required").and_then(Value::as_bool) == Some(true);
        let content = body.get("content").and_then(Value::as_object);
        let json_schema = content.and_then(|c| {
            c.iter().find(|(t, _)| is_json(t)).map(|(t, m)| {
                let schema = m.get("schema").cloned().unwrap_or_else(|| json!({}));
                (t.as_str(), self.prepared(schema))
            })
        });
        let Some((media_type, mut schema)) = json_schema else {
            let types: Vec<&str> = content
                .map(|c| c.keys().map(String::as_str).collect())
                .unwrap_or_default();
            if is_required {
                return Err(self.problem(
                    "requestBody.content",
                    format!(
                        "no JSON body ({}); only JSON request bodies become tool arguments",
                        types.join(", ")
                    ),
                ));
            }
            return Ok(None);
        };
        let name = if properties.contains_key("body") {
            "requestBody"
        } else {
            "body"
        };
        if properties.contains_key(name) {
            return Err(self.problem(
                "requestBody",
                "parameters named body and requestBody leave no name for the body",
            ));
        }
        if let (Value::Object(s), Some(d)) = (&mut schema, body.get("description")) {
            s.entry("description").or_insert_with(|| d.clone());
        }
        properties.insert(name.to_string(), schema);
        if is_required {
            required.push(Value::String(name.to_string()));
        }
        let essence = media_type.split(';').next().unwrap_or_default().trim();
        Ok(Some(Body {
            argument: name.to_string(),
            required: is_required,
            media_type: if essence.contains('*') {
                "application/json".to_string()
            } else {
                media_type.to_string()
            },
        }))
    }

    /// The first 2xx response's JSON schema, as an object schema.
    fn output(&self, table: &DefTable) -> (Option<Cleaned>, bool) {
        let Some(Value::Object(responses)) = self.operation.get("responses") else {
            return (None, false);
        };
        let mut codes: Vec<&String> = responses.keys().filter(|c| c.starts_with('2')).collect();
        codes.sort();
        let schema = codes.iter().find_map(|code| {
            let response = resolve(self.document, &responses[code.as_str()]).ok()?;
            let content = response.get("content")?.as_object()?;
            content
                .iter()
                .find(|(t, _)| is_json(t))
                .and_then(|(_, m)| m.get("schema"))
        });
        let Some(schema) = schema else {
            return (None, false);
        };
        let mut cleaned =
            self.tool_schema(&self.prepared(schema.clone()), Direction::Response, table);
        let is_object = cleaned.schema.get("type").and_then(Value::as_str) == Some("object");
        if is_object {
            (Some(cleaned), false)
        } else {
            let result = std::mem::take(&mut cleaned.schema);
            cleaned.schema = json!({"type": "object", "properties": {"result": result}});
            (Some(cleaned), true)
        }
    }
}

pub(crate) fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    essence == "application/json" || essence.ends_with("+json") || essence == "*/*"
}

/// `{name}` segments of a path template.
fn template_names(path: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        out.push(&rest[open + 1..open + close]);
        rest = &rest[open + close + 1..];
    }
    out
}

/// The operationId, or `<method>_<path>`, with every other character than `a-z A-Z 0-9 _ - .`
/// turned into `_`, runs of `_` collapsed, and cut to 64.
pub(crate) fn derived_name(id: Option<&str>, method: &str, path: &str) -> String {
    let raw = match id {
        Some(id) => id.to_string(),
        None => format!("{method}_{path}"),
    };
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() || matches!(c, '-' | '.') {
            c
        } else {
            '_'
        };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    let trimmed = out.trim_matches('_');
    let mut name: String = trimmed.chars().take(MAX_NAME).collect();
    if name.is_empty() {
        name = method.to_string();
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    const PETS: &str = r##"
openapi: 3.0.3
info: {title: pets, version: "1"}
paths:
  /pets/{petId}:
    parameters:
    - {name: petId, in: path, required: true, schema: {type: string}}
    get:
      operationId: getPet
      summary: One pet
      tags: [pets]
      parameters:
      - {name: verbose, in: query, schema: {type: boolean}}
      - {name: X-Trace, in: header, schema: {type: string}}
      - {name: Accept, in: header, schema: {type: string}}
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Pet"}
    put:
      operationId: putPet
      tags: [admin]
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: "#/components/schemas/Pet"}
      responses:
        "204": {description: done}
  /pets:
    get:
      responses:
        "200":
          description: list
          content:
            application/json:
              schema: {type: array, items: {$ref: "#/components/schemas/Pet"}}
    post:
      operationId: upload
      requestBody:
        required: true
        content:
          multipart/form-data:
            schema: {type: object}
      responses: {"201": {description: made}}
components:
  schemas:
    Pet:
      type: object
      required: [name]
      properties:
        name: {type: string, nullable: true}
        kind: {type: string, enum: [cat, dog]}
        parent: {$ref: "#/components/schemas/Pet"}
"##;

    /// A schema with the definitions of its `$defs` inlined (annotations beside a `$ref` kept,
    /// a cycle cut after a few rounds): the schema as written before definitions were shared,
    /// which most of these tests read.
    fn inlined(schema: Value) -> Value {
        fn walk(node: &Value, defs: &Map<String, Value>, depth: usize) -> Value {
            match node {
                Value::Object(o) => {
                    if let Some(name) = o
                        .get("$ref")
                        .and_then(Value::as_str)
                        .and_then(|r| r.strip_prefix("#/$defs/"))
                    {
                        if depth > 6 {
                            return json!({});
                        }
                        let mut out = walk(&defs[name], defs, depth + 1);
                        if let Value::Object(out) = &mut out {
                            for (k, v) in o.iter().filter(|(k, _)| *k != "$ref") {
                                out.insert(k.clone(), walk(v, defs, depth));
                            }
                        }
                        return out;
                    }
                    Value::Object(
                        o.iter()
                            .filter(|(k, _)| *k != "$defs")
                            .map(|(k, v)| (k.clone(), walk(v, defs, depth)))
                            .collect(),
                    )
                }
                Value::Array(a) => Value::Array(a.iter().map(|v| walk(v, defs, depth)).collect()),
                v => v.clone(),
            }
        }
        let defs = schema
            .get("$defs")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        walk(&schema, &defs, 0)
    }

    fn input_of(c: &Compiled, tool: &OperationTool) -> Value {
        inlined(c.input_schema(tool))
    }

    fn output_of(c: &Compiled, tool: &OperationTool) -> Value {
        inlined(c.output_schema(tool).expect("an output schema"))
    }

    fn all() -> Compiled {
        compile(PETS, &OpenApiSpec::default()).expect("the document compiles")
    }

    #[test]
    fn operations_become_tools_with_bindings() {
        let c = all();
        let names: Vec<&str> = c.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["get_pets", "getPet", "putPet"],
            "by path, then method"
        );
        let get = c.tool("getPet").unwrap();
        assert_eq!(get.method, http::Method::GET);
        let params: Vec<(&str, ParamLocation)> = get
            .params
            .iter()
            .map(|p| (p.name.as_str(), p.location))
            .collect();
        assert_eq!(
            params,
            [
                ("petId", ParamLocation::Path),
                ("verbose", ParamLocation::Query),
                ("X-Trace", ParamLocation::Header)
            ],
            "path-item parameters first, Accept ignored"
        );
        assert_eq!(input_of(&c, get)["required"], json!(["petId"]));
        let out = output_of(&c, get);
        assert_eq!(out["properties"]["kind"]["enum"], json!(["cat", "dog"]));
        assert_eq!(out["properties"]["name"]["type"], json!(["string", "null"]));
        assert_eq!(get.description.as_deref(), Some("One pet"));
        let put = c.tool("putPet").unwrap();
        assert_eq!(
            put.body,
            Some(Body {
                argument: "body".into(),
                required: true,
                media_type: "application/json".into()
            })
        );
        assert_eq!(
            input_of(&c, put)["properties"]["body"]["properties"]["kind"]["enum"],
            json!(["cat", "dog"]),
            "the body's $ref is inlined"
        );
        let list = c.tool("get_pets").unwrap();
        assert!(list.wraps_output, "an array response is wrapped");
        assert_eq!(output_of(&c, list)["properties"]["result"]["type"], "array");
    }

    #[test]
    fn an_operation_that_cannot_be_expressed_is_reported_with_its_path() {
        let c = all();
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
        assert_eq!(c.problems[0].path, "paths./pets.post.requestBody.content");
        assert!(c.problems[0].message.contains("multipart/form-data"));
    }

    #[test]
    fn selection_by_tag_id_path_method_and_exclusion() {
        let pick = |sel: OperationSelector| {
            let spec = OpenApiSpec {
                operations: sel,
                ..Default::default()
            };
            compile(PETS, &spec)
                .unwrap()
                .tools
                .into_iter()
                .map(|t| t.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            pick(OperationSelector {
                tags: vec!["pets".into()],
                ..Default::default()
            }),
            ["getPet"]
        );
        assert_eq!(
            pick(OperationSelector {
                operation_ids: vec!["*Pet".into()],
                exclude: vec!["put*".into()],
                ..Default::default()
            }),
            ["getPet"]
        );
        assert_eq!(
            pick(OperationSelector {
                paths: vec!["/pets".into()],
                methods: vec!["get".into()],
                ..Default::default()
            }),
            ["get_pets"]
        );
        // An operation without an id is excluded by `<method> <path>`.
        assert!(
            pick(OperationSelector {
                paths: vec!["/pets".into()],
                methods: vec!["get".into()],
                exclude: vec!["get /pets".into()],
                ..Default::default()
            })
            .is_empty()
        );
    }

    /// `maxOutputSchemaBytes` leaves larger output schemas out (0: all of them), counted;
    /// `maxCompiledBytes` refuses a document whose tools would take more, naming the field.
    #[test]
    fn output_schemas_are_bounded_and_a_document_over_its_limit_is_refused() {
        let all = compile(PETS, &OpenApiSpec::default()).unwrap();
        let with_output = all.tools.iter().filter(|t| t.has_output_schema()).count();
        assert!(with_output > 0);
        let none = OpenApiSpec {
            max_output_schema_bytes: Some(0),
            ..Default::default()
        };
        let none = compile(PETS, &none).unwrap();
        assert!(none.tools.iter().all(|t| !t.has_output_schema()));
        assert_eq!(none.outputs_left_out, with_output);
        assert!(none.bytes() < all.bytes());
        let largest = all
            .tools
            .iter()
            .filter_map(|t| all.output_schema(t).map(|o| o.to_string().len()))
            .max()
            .unwrap();
        let bounded = OpenApiSpec {
            max_output_schema_bytes: Some(largest as u64 - 1),
            ..Default::default()
        };
        let bounded = compile(PETS, &bounded).unwrap();
        assert!(bounded.outputs_left_out >= 1, "the largest is left out");
        let kept: Vec<usize> = bounded
            .tools
            .iter()
            .filter_map(|t| bounded.output_schema(t).map(|o| o.to_string().len()))
            .collect();
        assert_eq!(kept.len(), with_output - bounded.outputs_left_out);
        assert!(kept.iter().all(|&n| n < largest));
        let tight = OpenApiSpec {
            max_compiled_bytes: Some(all.bytes() as u64 - 1),
            ..Default::default()
        };
        let refused = compile(PETS, &tight).unwrap_err().to_string();
        assert!(refused.contains("openapi.maxCompiledBytes"), "{refused}");
        let fits = OpenApiSpec {
            max_compiled_bytes: Some(all.bytes() as u64),
            ..Default::default()
        };
        assert_eq!(compile(PETS, &fits).unwrap().tools.len(), all.tools.len());
    }

    #[test]
    fn overrides_rename_and_unknown_ones_are_reported() {
        let spec = OpenApiSpec {
            overrides: vec![
                switchboard_snapshot::OperationOverride {
                    operation: "get /pets".into(),
                    name: Some("list_pets".into()),
                    description: Some("All pets".into()),
                },
                switchboard_snapshot::OperationOverride {
                    operation: "nope".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let c = compile(PETS, &spec).unwrap();
        let t = c.tool("list_pets").unwrap();
        assert_eq!(t.description.as_deref(), Some("All pets"));
        assert!(
            c.problems.iter().any(|p| p.message.contains("\"nope\"")),
            "{:?}",
            c.problems
        );
    }

    #[test]
    fn references_into_documents_not_at_hand_are_named_once_each() {
        let text = r#"{"openapi": "3.1.0", "paths": {"/a": {"post": {"operationId": "a",
            "requestBody": {"content": {"application/json": {"schema": {"$ref": "common.json#/A"}}}},
            "responses": {"200": {"content": {"application/json": {"schema": {"$ref": "common.json#/B"}}}}}}}}}"#;
        let c = compile(text, &OpenApiSpec::default()).expect("compiles");
        let remote: Vec<String> = c
            .problems
            .iter()
            .map(ToString::to_string)
            .filter(|p| p.contains("common.json"))
            .collect();
        assert_eq!(remote.len(), 1, "{:?}", c.problems);
        assert!(remote[0].contains("is not followed"), "{remote:?}");
        // The same references, the target copied in (what a fetched document gets): none.
        let mut whole: Value = serde_json::from_str(text).unwrap();
        let base = url::Url::parse("https://api.example/openapi.json").unwrap();
        let common = url::Url::parse("https://api.example/common.json").unwrap();
        let have = HashMap::from([(
            common,
            json!({"A": {"type": "object", "properties": {"x": {"type": "string"}}}, "B": {"type": "string"}}),
        )]);
        whole = crate::bundle::bundle(whole, &base, &have);
        let c = compile_document(&whole, &OpenApiSpec::default()).expect("compiles");
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        let a = c.tool("a").unwrap();
        assert_eq!(
            input_of(&c, a)["properties"]["body"]["properties"]["x"]["type"],
            "string"
        );
        assert_eq!(output_of(&c, a)["properties"]["result"]["type"], "string");
    }

    #[test]
    fn broken_documents_name_what_is_wrong() {
        let e = compile("{not json", &OpenApiSpec::default()).unwrap_err();
        assert!(e.message.starts_with("not valid JSON"), "{e}");
        let e = compile("swagger: '2.0'\n", &OpenApiSpec::default()).unwrap_err();
        assert_eq!(e.path, "swagger");
        let e = compile("openapi: 4.0.0\n", &OpenApiSpec::default()).unwrap_err();
        assert_eq!(e.path, "openapi");
        let undeclared = "openapi: 3.1.0\npaths:\n  /a/{x}:\n    get: {responses: {}}\n";
        let c = compile(undeclared, &OpenApiSpec::default()).unwrap();
        assert!(c.tools.is_empty());
        assert_eq!(c.problems[0].path, "paths./a/{x}.get.parameters");
        let remote = "openapi: 3.1.0\npaths:\n  /a:\n    $ref: 'other.yaml#/x'\n";
        let c = compile(remote, &OpenApiSpec::default()).unwrap();
        assert!(
            c.problems[0].message.contains("another document"),
            "{:?}",
            c.problems
        );
    }

    /// FastAPI's 3.1 documents put a parameter's default next to the `$ref` of its enum.
    const SIBLINGS: &str = r##"{"openapi": "3.1.0", "paths": {"/orders": {"post": {
        "operationId": "create",
        "parameters": [{"name": "priority", "in": "query",
                        "schema": {"$ref": "#/components/schemas/Priority", "default": "normal"}}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Order"}}}},
        "responses": {"201": {"description": "", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Order"}}}}}}}},
      "components": {"schemas": {
        "Priority": {"type": "string", "enum": ["low", "normal", "urgent"], "title": "Priority"},
        "Size": {"type": "string", "enum": ["s", "m"]},
        "Order": {"type": "object", "properties": {
            "priority": {"$ref": "#/components/schemas/Priority", "default": "low", "title": "Order priority"},
            "size": {"allOf": [{"$ref": "#/components/schemas/Size"}], "default": "m"},
            "parent": {"$ref": "#/components/schemas/Order", "description": "The order before"}}}}}}"##;

    #[test]
    fn keywords_next_to_a_ref_apply_in_3_1() {
        let c = compile(SIBLINGS, &OpenApiSpec::default()).unwrap();
        let t = c.tool("create").unwrap();
        let props = &input_of(&c, t)["properties"];
        assert_eq!(
            props["priority"],
            json!({"type": "string", "enum": ["low", "normal", "urgent"], "title": "Priority", "default": "normal"}),
            "the default next to the reference is kept, and one schema again"
        );
        let body = &props["body"]["properties"];
        assert_eq!(body["priority"]["default"], "low");
        assert_eq!(
            body["priority"]["title"], "Order priority",
            "the use's annotation wins"
        );
        assert_eq!(body["priority"]["enum"], json!(["low", "normal", "urgent"]));
        assert_eq!(
            body["size"],
            json!({"type": "string", "enum": ["s", "m"], "default": "m"}),
            "a one-branch allOf (pydantic v1) is read as one schema"
        );
        assert_eq!(body["parent"]["description"], "The order before");
        // As listed: each definition once under `$defs`, used by reference below the
        // arguments (an argument itself is inlined: its description and marks are its own).
        let listed = c.input_schema(t);
        assert_eq!(
            listed["properties"]["body"]["properties"]["priority"],
            json!({"$ref": "#/$defs/Priority", "default": "low", "title": "Order priority"})
        );
        assert_eq!(
            listed["properties"]["body"]["properties"]["parent"],
            json!({"$ref": "#/$defs/Order", "description": "The order before"}),
            "a recursive definition refers to itself"
        );
        let defs: Vec<&String> = listed["$defs"].as_object().unwrap().keys().collect();
        assert_eq!(defs, ["Order", "Priority", "Size"], "in name order");
        let out = output_of(&c, t);
        assert_eq!(out["properties"]["priority"]["default"], "low");

        // OpenAPI 3.0: keywords next to a `$ref` are ignored (its description aside).
        let v30 = SIBLINGS.replace("3.1.0", "3.0.3");
        let c = compile(&v30, &OpenApiSpec::default()).unwrap();
        let props = &input_of(&c, c.tool("create").unwrap())["properties"];
        assert_eq!(props["priority"].get("default"), None);
        assert_eq!(
            props["priority"]["enum"],
            json!(["low", "normal", "urgent"])
        );
    }

    /// A component used three times in one answer: written once in that tool schema's `$defs`
    /// (each use a `$ref`), held once per direction for the whole document, and settled per
    /// direction through the reference (a `readOnly` id is not required in a request).
    const SHARED: &str = r##"{"openapi": "3.0.3", "paths": {
      "/issues": {"post": {"operationId": "createIssue",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Issue"}}}},
        "responses": {"201": {"description": "", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Issue"}}}}}}},
      "/issues/{n}": {"get": {"operationId": "getIssue",
        "parameters": [{"name": "n", "in": "path", "required": true, "schema": {"type": "integer"}}],
        "responses": {"200": {"description": "", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Issue"}}}}}}},
      "/user": {"get": {"operationId": "getUser",
        "responses": {"200": {"description": "", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/User"}}}}}}}},
      "components": {"schemas": {
        "Id": {"type": "integer", "readOnly": true},
        "User": {"type": "object", "required": ["id", "login"],
                 "properties": {"id": {"$ref": "#/components/schemas/Id"}, "login": {"type": "string"}}},
        "Issue": {"type": "object", "required": ["title"], "properties": {
            "title": {"type": "string"},
            "author": {"$ref": "#/components/schemas/User"},
            "assignee": {"$ref": "#/components/schemas/User"},
            "closer": {"$ref": "#/components/schemas/User"}}}}}}"##;

    #[test]
    fn a_definition_is_written_once_per_tool_and_held_once_per_document() {
        let c = compile(SHARED, &OpenApiSpec::default()).unwrap();
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        let get = c.output_schema(c.tool("getIssue").unwrap()).unwrap();
        for who in ["author", "assignee", "closer"] {
            assert_eq!(get["properties"][who], json!({"$ref": "#/$defs/User"}));
        }
        let defs: Vec<&String> = get["$defs"].as_object().unwrap().keys().collect();
        assert_eq!(
            defs,
            ["Id", "User"],
            "reached through User too, in name order"
        );
        assert_eq!(get["$defs"]["User"]["required"], json!(["id", "login"]));
        let create = c.input_schema(c.tool("createIssue").unwrap());
        assert_eq!(
            create["$defs"]["User"]["required"],
            json!(["login"]),
            "readOnly through the reference: not required in a request"
        );
        assert_eq!(
            create["properties"]["body"]["properties"]["author"],
            json!({"$ref": "#/$defs/User"}),
            "the body argument is written out, what it refers to is not"
        );
        // What a provider is given (the LLM loop sanitizes every tool schema it hands one):
        // the references inlined again, none left.
        let provider = switchboard_protocol::schema::sanitize(&create);
        assert!(!provider.to_string().contains("$ref"), "{provider}");
        assert_eq!(
            provider["properties"]["body"]["properties"]["author"]["properties"]["login"]["type"],
            "string"
        );
        let user = c.output_schema(c.tool("getUser").unwrap()).unwrap();
        assert_eq!(user["type"], "object", "the top is written out");
        assert_eq!(user["properties"]["id"], json!({"$ref": "#/$defs/Id"}));
        // Held once for the document, per direction: User and Id for requests and responses.
        let held: Vec<&str> = c.defs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(held.len(), 4, "{held:?}");
        // The listing writes User once per schema that reaches it: the input and output of
        // createIssue, the output of getIssue and of getUser (there at the top).
        let listing = c.listing();
        assert_eq!(listing.get().matches("\"login\":{").count(), 4);
        let parsed: Value = serde_json::from_str(listing.get()).unwrap();
        assert_eq!(parsed["tools"][1]["outputSchema"], get, "listed as read");
        // Inlined, the same document costs more.
        assert!(inlined(get.clone()).to_string().len() > get.to_string().len());
    }

    #[test]
    fn definition_names_are_plain_unique_and_stable() {
        let definitions: Map<String, Value> = [
            "#/components/schemas/a%20b",
            "#/components/schemas/a_b",
            "#/components/schemas/Pet/properties/kind",
            "#/components/schemas/v1~1Pet",
            "#/x-switchboard-bundled/0",
            "#/x-switchboard-bundled/1",
        ]
        .iter()
        .map(|r| (r.to_string(), json!({})))
        .chain([(
            "#/x-switchboard-bundled/1".to_string(),
            json!({"title": "Order"}),
        )])
        .collect();
        let names = def_names(&definitions);
        let name = |r: &str| names[r].as_str();
        assert_eq!(name("#/components/schemas/a%20b"), "a_b");
        assert_eq!(name("#/components/schemas/a_b"), "a_b_2");
        assert_eq!(
            name("#/components/schemas/Pet/properties/kind"),
            "components.schemas.Pet.properties.kind"
        );
        assert_eq!(name("#/components/schemas/v1~1Pet"), "v1_Pet");
        assert_eq!(name("#/x-switchboard-bundled/0"), "bundled_0");
        assert_eq!(name("#/x-switchboard-bundled/1"), "Order");
        assert_eq!(
            def_names(&definitions),
            names,
            "the same document, the same names"
        );
    }

    #[test]
    fn a_one_branch_all_of_with_a_clash_stays() {
        let mut schema = json!({"allOf": [{"type": "string", "maxLength": 3}], "maxLength": 5});
        collapse_single_all_of(&mut schema);
        assert_eq!(
            schema,
            json!({"allOf": [{"type": "string", "maxLength": 3}], "maxLength": 5})
        );
        let mut data = json!({"default": {"allOf": [{"a": 1}]}, "allOf": [{}]});
        collapse_single_all_of(&mut data);
        assert_eq!(
            data,
            json!({"default": {"allOf": [{"a": 1}]}}),
            "values are data, not schemas"
        );
    }

    #[test]
    fn references_are_json_pointers() {
        // A parameter reused from another path item (`~1` escapes, `{}` percent-encoded), a
        // schema whose name has a `/`, and a pointer into a schema's properties.
        let doc = r##"{"openapi": "3.1.0", "paths": {
          "/a/{id}": {"get": {"operationId": "getA",
              "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/Pet/properties/kind"}}],
              "responses": {"200": {"description": "", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/v1~1Pet"}}}}}}},
          "/b/{id}": {"get": {"operationId": "getB",
              "parameters": [{"$ref": "#/paths/~1a~1%7Bid%7D/get/parameters/0"}],
              "responses": {}}}},
          "components": {"schemas": {
            "Pet": {"type": "object", "properties": {"kind": {"type": "string", "enum": ["cat", "dog"]}}},
            "v1/Pet": {"type": "object", "properties": {"name": {"type": "string"}}}}}}"##;
        let c = compile(doc, &OpenApiSpec::default()).unwrap();
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        let a = c.tool("getA").unwrap();
        assert_eq!(
            input_of(&c, a)["properties"]["id"]["enum"],
            json!(["cat", "dog"])
        );
        assert_eq!(output_of(&c, a)["properties"]["name"]["type"], "string");
        let b = c.tool("getB").unwrap();
        assert_eq!(b.params[0].name, "id");
        assert_eq!(
            input_of(&c, b)["properties"]["id"]["enum"],
            json!(["cat", "dog"])
        );
    }

    #[test]
    fn the_body_keeps_its_media_type() {
        let doc = |media: &str| {
            format!(
                r#"{{"openapi": "3.1.0", "paths": {{"/o": {{"patch": {{"operationId": "patch",
                "requestBody": {{"content": {{"{media}": {{"schema": {{"type": "object"}}}}}}}},
                "responses": {{}}}}}}}}}}"#
            )
        };
        let media = |m: &str| {
            compile(&doc(m), &OpenApiSpec::default())
                .unwrap()
                .tool("patch")
                .and_then(|t| t.body.clone())
                .map(|b| b.media_type)
        };
        assert_eq!(
            media("application/merge-patch+json").as_deref(),
            Some("application/merge-patch+json")
        );
        assert_eq!(media("*/*").as_deref(), Some("application/json"));
        assert_eq!(media("text/plain"), None, "not JSON: no body argument");
    }

    /// OpenAPI 3.0's own keywords, as GitHub's REST description and ReadMe's examples write
    /// them, in a parameter, a body and a response.
    const V30: &str = r##"{"openapi": "3.0.3", "paths": {"/issues/{n}": {"patch": {
        "operationId": "update",
        "parameters": [
          {"name": "n", "in": "path", "required": true, "schema": {"type": "integer", "minimum": 0, "exclusiveMinimum": true}},
          {"name": "since", "in": "query", "schema": {"type": "string", "nullable": true, "example": "2024-01-01"}}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Issue"}}}},
        "responses": {"200": {"description": "", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Issue"}}}}}}}},
      "components": {"schemas": {
        "User": {"type": "object", "properties": {"login": {"type": "string"}}, "x-github": {"a": 1}},
        "Issue": {"type": "object", "required": ["id", "title", "secret"],
          "discriminator": {"propertyName": "kind"}, "xml": {"name": "issue"}, "externalDocs": {"url": "https://x"},
          "properties": {
            "id": {"type": "integer", "readOnly": true},
            "title": {"type": "string", "maxLength": 256, "x-go-name": "Title"},
            "secret": {"type": "string", "writeOnly": true},
            "state_reason": {"type": "string", "enum": ["completed", "not_planned"], "nullable": true},
            "milestone": {"oneOf": [{"type": "string"}, {"type": "integer"}], "nullable": true},
            "assignee": {"allOf": [{"$ref": "#/components/schemas/User"}], "nullable": true, "description": "Who"},
            "score": {"type": "number", "maximum": 1, "exclusiveMaximum": true, "example": 0.5},
            "labels": {"type": "array", "items": {"type": "string", "nullable": true}}}}}}}"##;

    #[test]
    fn openapi_3_0_keywords_become_json_schema_2020_12_in_input_and_output() {
        let c = compile(V30, &OpenApiSpec::default()).unwrap();
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        let t = c.tool("update").unwrap();
        let input = &input_of(&c, t)["properties"];
        assert_eq!(
            input["n"],
            json!({"type": "integer", "exclusiveMinimum": 0})
        );
        assert_eq!(
            input["since"],
            json!({"type": ["string", "null"], "examples": ["2024-01-01"]})
        );
        let output = output_of(&c, t);
        assert!(!t.wraps_output);
        for (direction, issue) in [("input", &input["body"]), ("output", &output)] {
            let p = &issue["properties"];
            assert_eq!(
                p["state_reason"],
                json!({"type": ["string", "null"], "enum": ["completed", "not_planned", null]}),
                "{direction}"
            );
            assert_eq!(
                p["milestone"],
                json!({"anyOf": [{"anyOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "null"}]}),
                "{direction}"
            );
            assert_eq!(
                p["assignee"],
                json!({"description": "Who", "anyOf": [
                    {"type": "object", "properties": {"login": {"type": "string"}}},
                    {"type": "null"}]}),
                "{direction}: the reference inlined, the one-branch allOf merged, null beside it"
            );
            assert_eq!(
                p["score"],
                json!({"type": "number", "exclusiveMaximum": 1, "examples": [0.5]}),
                "{direction}"
            );
            assert_eq!(p["labels"]["items"]["type"], json!(["string", "null"]));
            assert_eq!(
                p["title"],
                json!({"type": "string", "maxLength": 256}),
                "{direction}: extensions go"
            );
            let text = issue.to_string();
            for gone in [
                "nullable",
                "example\"",
                "discriminator",
                "xml",
                "externalDocs",
                "x-",
            ] {
                assert!(!text.contains(gone), "{direction}: {gone} in {text}");
            }
            assert_eq!(p["id"]["readOnly"], true);
            assert_eq!(p["secret"]["writeOnly"], true);
        }
        assert_eq!(
            input["body"]["required"],
            json!(["title", "secret"]),
            "a read-only property is not required in a request"
        );
        assert_eq!(
            output["required"],
            json!(["id", "title"]),
            "a write-only property is not required in a response"
        );
        assert_eq!(
            input_of(&c, t)["required"],
            json!(["n", "body"]),
            "the arguments are the request's"
        );
        // A 3.1 document written the 3.0 way (ReadMe's own description does) reads the same.
        let v31 = compile(&V30.replace("3.0.3", "3.1.0"), &OpenApiSpec::default()).unwrap();
        let out = output_of(&v31, v31.tool("update").unwrap());
        assert_eq!(
            out["properties"]["state_reason"],
            output["properties"]["state_reason"]
        );
        assert_eq!(out["properties"]["score"], output["properties"]["score"]);
    }

    #[test]
    fn a_nullable_response_is_wrapped_with_its_null() {
        let doc = r#"{"openapi": "3.0.0", "paths": {"/a": {"get": {"operationId": "a",
            "responses": {"200": {"description": "", "content": {"application/json": {
                "schema": {"type": "object", "nullable": true, "properties": {"x": {"type": "string"}}}}}}}}}}}"#;
        let c = compile(doc, &OpenApiSpec::default()).unwrap();
        let t = c.tool("a").unwrap();
        assert!(
            t.wraps_output,
            "a null body is not an object: structured content wraps it"
        );
        assert_eq!(
            output_of(&c, t)["properties"]["result"]["type"],
            json!(["object", "null"])
        );
    }

    #[test]
    fn names_are_derived_predictably() {
        assert_eq!(derived_name(Some("list pets!"), "get", "/x"), "list_pets");
        assert_eq!(
            derived_name(None, "get", "/api/v1/namespaces/{namespace}/pods"),
            "get_api_v1_namespaces_namespace_pods"
        );
        assert_eq!(
            derived_name(Some(&"a".repeat(80)), "get", "/"),
            "a".repeat(64)
        );
    }
}
