//! The upstream plane: talking to upstream MCP servers (clients, eras, sessions, redirects,
//! streams), their credentials (minted, exchanged, the caller's own), their listings and the
//! tool-ownership map, and their protected-resource metadata; and REST APIs described by
//! OpenAPI documents, answered as MCP servers (`openapi.rs`). [`plane::UpstreamPlane`] is the
//! one type the client faces and the operator's probe use; [`error::UpstreamError`] is all it
//! returns when something fails (the faces map it to their client-facing error once).

pub mod broker_login;
mod call_span;
mod catalog;
pub mod client;
pub mod error;
pub mod http_client;
pub mod identity_keys;
pub mod listing;
mod openapi;
pub mod plane;
pub mod protected_resource;
pub mod request_credential;
pub mod tls;
mod tokens;
