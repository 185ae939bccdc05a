//! OpenAPI-backed servers: an OpenAPI 3.0 or 3.1 document compiled into MCP tools, and a tool
//! call turned into the REST request it stands for (and the response into a tool result).
//!
//! - [`compile`](fn@compile): the document, the operations selected, and per operation its tool (name,
//!   description, input schema of parameters and JSON body, output schema of the JSON
//!   response) and its binding (method, path template, where each argument goes). An
//!   operation that cannot be expressed is left out and reported with its document path.
//! - [`bundle`](fn@bundle): references into other documents, fetched by the caller, copied into the main
//!   document (bounded), so compiling follows references within one document only.
//! - [`OperationTool::request`]: arguments to method, path, query, headers, cookies, body.
//! - [`OperationTool::result`]: a REST response to a `tools/call` result.
//!
//! - `json_schema`: a Schema Object of either version as the JSON Schema 2020-12 a tool schema
//!   is (3.0's `nullable`, boolean exclusive bounds, `example`; `readOnly`/`writeOnly` by
//!   direction), for input and output schemas alike.
//!
//! Schemas go through the one sanitizer the LLM path uses (`switchboard_protocol::schema`):
//! references inlined with a depth and size bound, cycles cut, keywords allow-listed.

mod bundle;
mod compile;
mod json_schema;
mod request;
mod response;

pub use bundle::{MAX_DOCUMENTS, bundle, remote_documents};
pub use compile::{
    Body, Compiled, DocumentError, OperationTool, Param, ParamLocation, compile, compile_document,
    parse,
};
pub use request::{ArgumentError, RestRequest};
