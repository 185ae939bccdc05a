//! `McpServer.spec.openapi`: the upstream is a REST API described by an OpenAPI 3.0 or 3.1
//! document, and the gateway serves the operations it selects as MCP tools. The server's
//! `url` (or `service`) is the API's base URL; its auth, timeout, TLS and the upstream
//! address policy apply to every call and to the document's fetch.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{ConfigMapKeyRef, SecretKeyRef};

/// The REST API's document and which of its operations become tools. Exactly one of
/// `document` and `documentUrl`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.document) != has(self.documentUrl)").message("spec.openapi needs exactly one of document and documentUrl"))]
pub struct OpenApi {
    /// The document (JSON or YAML) from a key of a ConfigMap or a Secret in this namespace.
    /// A ConfigMap holds at most 1 MiB: fetch a larger document with `documentUrl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<DocumentRef>,
    /// Where each gateway replica fetches the document, with this server's credential, TLS
    /// and the upstream address policy (again every `listingTtl`). A path (`/openapi.json`)
    /// is relative to the server's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(https?://[^\s/]+)?/\S*$"), length(max = 2048))]
    pub document_url: Option<String>,
    /// Which operations become tools (every operation of the document when left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operations: Option<OperationSelector>,
    /// Tool names and descriptions other than the derived ones, by operation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub overrides: Vec<OperationOverride>,
    /// Output schemas larger than this many bytes (as JSON) are left out of the listing (the
    /// tool's structured result still comes back); 0 leaves every output schema out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_schema_bytes: Option<u64>,
    /// The most the compiled tools may take (schemas and descriptions, as text; default 64
    /// MiB): a document that compiles to more fails the server's listings, saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_compiled_bytes: Option<u64>,
}

/// A key of a ConfigMap or of a Secret holding the document (exactly one).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.configMapKeyRef) != has(self.secretKeyRef)").message("spec.openapi.document needs exactly one of configMapKeyRef and secretKeyRef"))]
pub struct DocumentRef {
    /// A ConfigMap key (the usual home of a public API description).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<ConfigMapKeyRef>,
    /// A Secret key (for a document that must not be readable by everyone in the namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
}

/// An operation is selected when it matches one of `operationIds`, `tags` or `paths` (all
/// three empty select every operation), its method is one of `methods` (when given), and no
/// `exclude` glob matches its operationId (or, for one without, `<method> <path>`). Entries are
/// exact values or globs with `*`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationSelector {
    /// operationIds (`listCoreV1Namespace`, `list*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 256)))]
    pub operation_ids: Vec<String>,
    /// Tags of operations (`pets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 256)))]
    pub tags: Vec<String>,
    /// Path templates as the document writes them (`/api/v1/namespaces/{namespace}/*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 1024)))]
    pub paths: Vec<String>,
    /// Lower-case HTTP methods (`get`, `post`, ...); every method when left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 8),
        inner(regex(pattern = r"^(get|put|post|delete|options|head|patch|trace)$"))
    )]
    pub methods: Vec<String>,
    /// operationIds (or `<method> <path>` for an operation without one) left out even when
    /// selected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 256)))]
    pub exclude: Vec<String>,
}

/// How one operation is presented.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationOverride {
    /// The operation, by operationId, or as `<method> <path>` (`get /pets/{id}`) for one
    /// without an id.
    #[schemars(length(min = 1, max = 1024))]
    pub operation: String,
    /// The tool's name instead of the derived one (1-64 of `a-z A-Z 0-9 _ - .`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.-]{1,64}$"))]
    pub name: Option<String>,
    /// The tool's description instead of the operation's summary and description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}
