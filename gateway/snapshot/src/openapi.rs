//! An OpenAPI-backed server: its upstream is a REST API described by an OpenAPI 3.0 or 3.1
//! document, and the gateway serves the operations it selects as MCP tools (the compiler is
//! the `switchboard-openapi` crate). The server's `url` is the API's base URL; its auth,
//! timeout, TLS and address policy apply to every call and to the document's fetch.

use serde::{Deserialize, Serialize};

use crate::secret::SecretSource;

/// The operations a path item can have, as OpenAPI names them (and `operations.methods` too).
pub const HTTP_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenApiSpec {
    /// The document itself, JSON or YAML (inline, from the environment or a file; the operator
    /// puts a ConfigMap's or Secret's key here). Exactly one of `document` and `documentUrl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<SecretSource>,
    /// Where the gateway fetches the document, with the server's credential, TLS and address
    /// policy (refreshed every `gateway.listingTtl`). Relative to `url` when it is a path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document_url: Option<String>,
    /// Which operations become tools (all of them when left out).
    #[serde(default)]
    pub operations: OperationSelector,
    /// Names and descriptions other than the derived ones, by operation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<OperationOverride>,
    /// Output schemas larger than this many bytes (as JSON) are left out of the listing (the
    /// tool's structured result still comes back); 0 leaves every output schema out. Left out:
    /// every output schema is listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_schema_bytes: Option<u64>,
    /// The most the compiled tools (schemas and descriptions, as text) may take; a document
    /// that compiles to more is refused with a message saying so (an inline one refuses the
    /// config; a fetched one fails the server's listings), rather than taking the gateway's
    /// memory. Default 64 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_compiled_bytes: Option<u64>,
}

impl OpenApiSpec {
    /// `maxCompiledBytes`, or its default (64 MiB).
    pub fn max_compiled_bytes(&self) -> u64 {
        self.max_compiled_bytes.unwrap_or(64 << 20)
    }
}

/// An operation is selected when it matches one of `operationIds`, `tags` or `paths` (each a
/// list of globs with `*`; all three empty selects every operation), its method is in
/// `methods` (when given), and no `exclude` glob matches its operationId (or, for one without,
/// `<method> <path>`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OperationSelector {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operation_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Path templates as the document writes them (`/api/v1/namespaces/{namespace}/*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// Lower-case HTTP methods (`get`, `post`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OperationOverride {
    /// The operation, by operationId, or as `<method> <path>` for one without an id.
    pub operation: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}
