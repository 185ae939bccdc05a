//! The core of the gateway: what a request is judged by, built from one snapshot and tested
//! without sockets. Nothing here opens a connection or reads a file, with one exception, the
//! audit log's writer: [`audit::AuditLog`] opens stdout or the file `--audit-log` names (once, at
//! start, by the binary) and runs one thread that appends the records. It lives beside the
//! record it writes because the request path hands each finished record to it (a bounded queue
//! that never blocks a request); the record itself, and everything else here, is pure.
//!
//! - [`table`]: the immutable routing table built from one snapshot; [`live`] holds the one that
//!   serves now and names the [`live::SnapshotSink`] a source feeds.
//! - [`scope`], [`route`]: who the caller is, what it reaches, where a name goes;
//!   [`virtual_server`]: how a virtual server presents its servers' tools.
//! - [`errors`]: the client-facing error and its one mapping to HTTP, REST and JSON-RPC.
//! - [`limits`]: per-key and per-server request limits. [`metrics`]: every metric the gateway
//!   exports. [`session`]: sealing legacy sessions and the other ids clients hold.
//! - [`audit`]: the audit record of a request, noted into by the layers it passes;
//!   [`request_span`]: what the request's trace span says when its answer ends.
//! - `workload_identity`: ServiceAccount tokens verified offline.
//! - [`credentials`], `address_policy`: composing a server's upstream headers; which upstream
//!   addresses a server may reach.
//! - [`sign_out`]: a person ending every gateway token of their logins (the shared store keeps
//!   when).
//! - [`accounts`]: people's own upstream accounts (`userOAuth`): the connect flow's sealed
//!   records and what the shared store holds.

pub mod accounts;
mod address_policy;
pub mod arguments;
pub mod audit;
pub mod broker;
mod caller_arguments;
pub mod credentials;
pub mod errors;
pub mod jwks;
mod key;
pub mod limits;
pub mod live;
mod memo;
pub mod metrics;
mod noted;
pub mod people;
pub mod remembered_tokens;
pub mod request_span;
pub mod route;
pub mod scope;
mod server;
pub mod session;
pub mod sign_out;
pub mod table;
pub mod virtual_server;
mod workload_identity;

#[cfg(test)]
mod sign_in_tests;
#[cfg(test)]
mod virtual_server_tests;
