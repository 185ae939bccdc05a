//! Switchboard gateway: the edge and the binary. It composes the layers below into one
//! process and serves them on HTTP.
//!
//! The crates, bottom up (a crate may use only those before it):
//! - `switchboard-telemetry`: the log, traces, and how a binary binds its listeners.
//! - `switchboard-snapshot`: the schema shared with the operator; `switchboard-protocol`: MCP
//!   and JSON-RPC rules; `switchboard-openapi`: OpenAPI documents compiled into tools.
//! - `switchboard-store`: the shared store (single use, limits across replicas, people's
//!   upstream accounts).
//! - `switchboard-core`: the routing table, callers and scope, limits, errors, sessions,
//!   metrics, the live table (no network I/O; the audit log's writer thread aside).
//! - `switchboard-upstream`: the upstream plane (clients, credentials, listings, forwarding).
//! - `switchboard-mcp` and `switchboard-llm`: the client faces, each with its own context.
//! - `switchboard-source`: config file and operator stream, feeding a snapshot sink.
//! - this crate: [`http`] (the router, DNS-rebinding protection, body reads, draining),
//!   [`admission`] (shedding), `well_known` (protected-resource metadata), `oauth` (brokered
//!   sign-in), `connect` (the pages where people connect their own upstream accounts),
//!   [`state`] (the composition root), [`serve`], and the binary.

pub mod admission;
mod connect;
#[cfg(test)]
mod fuzz;
pub mod http;
mod oauth;
mod refused_body;
pub mod serve;
mod sign_in;
pub mod state;
pub mod tools_review;
mod well_known;
