//! Switchboard operator: turns McpServer/McpKey/ModelRoute resources into the gateway snapshot,
//! serves it to gateway replicas, and reports on each resource what actually happened.
//!
//! - `render`: pure: resources + Secrets → snapshot + verdicts (tested without an API server).
//! - `status`: pure condition logic; `status_write` writes it by server-side apply.
//! - [`controller`]: the watch → render → publish → status loop.
//! - [`delivery`]: the snapshot stream gateway replicas follow, with TokenReview;
//!   [`delivery_tls`] serves it over TLS, from [`delivery_ca`]'s CA or a provided Secret.
//! - `gateways`: the gateway pods status expects, whichever operator replica they follow.
//! - [`lease`]: leader election (a warm standby takes a released lease at once). [`probe`]: readiness probes (servers: a tool listing; models:
//!   the provider's model listing, never a model call). `keys`: McpKey Secrets.
//! - [`scope`]: the namespaces and instance one install owns; [`reservations`]: names an
//!   administrator reserved for namespaces.
//! - [`chart_schema`]: the Kubernetes types and gateway settings the chart's values schema checks.

pub mod chart_schema;
pub mod controller;
pub mod delivery;
pub mod delivery_ca;
pub mod delivery_tls;
mod error;
pub mod gateway_settings;
mod gateways;
pub mod issuer;
mod keys;
mod labels;
pub mod lease;
pub mod metrics;
pub mod probe;
mod render;
pub mod reservations;
mod retries;
pub mod scope;
mod status;
mod status_write;
pub mod tools_review;
pub mod upstream_policy;
pub mod workload;
mod workload_apply;
