//! Switchboard gateway: serves MCP to clients from a configuration snapshot, routes every call
//! to exactly one upstream by its server id, and enforces each key's scope before any I/O.
//!
//! Map of the crate:
//! - [`table`]: the immutable routing table built from one snapshot; [`state`] swaps it.
//! - [`scope`], [`route`]: who the caller is, what it reaches, where a name goes.
//! - [`mcp`]: the client-facing MCP endpoint (protocol rules, sessions, methods, merged
//!   listings, the event-by-event relay).
//! - [`rest`]: the REST face. [`errors`]: every error and its HTTP/JSON-RPC mapping.
//! - [`forward`]: one request to one upstream (credential, headers, send, renew once).
//! - [`upstream`]: talking to upstream MCP servers (headers, eras, streams, pagination).
//! - [`catalog`]: cached listings and the tool-ownership map.
//! - [`llm`]: `/v1/messages` and `/v1/chat/completions`, with gateway-run MCP tools.
//! - [`config_file`]: standalone mode's file source. [`http`]: the router. [`admission`]: the
//!   replica-wide bounds that shed excess requests fast.

pub mod admission;
pub mod catalog;
pub mod config_file;
pub mod errors;
#[cfg(test)]
mod fuzz;
pub mod http;
pub mod limits;
pub mod live;
pub mod llm;
pub mod mcp;
pub mod metrics;
pub mod operator_source;
pub mod operator_tls;
pub mod protected_resource;
pub mod rest;
pub mod route;
pub mod scope;
pub mod serve;
pub mod session;
pub mod state;
pub mod table;
pub mod upstream;
pub mod well_known;
pub mod workload_identity;
