//! The upstream plane: talking to upstream MCP servers (clients, eras, sessions, redirects,
//! streams), their credentials (minted, exchanged, the caller's own), their listings and the
//! tool-ownership map, and their protected-resource metadata; and REST APIs described by
//! OpenAPI documents, answered as MCP servers (`openapi.rs`).
//!
//! The public surface is the plane and what its callers hold: [`UpstreamPlane`] is the one
//! type the client faces and the operator's probe use (its parts are private; a face asks it),
//! [`UpstreamCall`] one call as a face hands it over, [`RpcOutcome`] / [`RpcResult`] /
//! [`UpstreamStream`] what comes back, [`SessionScope`] which upstream session a call uses,
//! the listing types ([`listing`]), and [`error`]: [`error::UpstreamError`] is all a call
//! returns when something fails (the faces map it to their client-facing error once), the
//! others are the errors of what the gateway fetches for itself. Two modules stay open for what
//! a face does beside the plane: [`http_client`] (the LLM face's provider calls: a client the
//! plane built, [`UpstreamPlane::http_for_model`]) and [`identity_keys`] (what a fetch of an
//! identity provider found, and how often gateways refresh it).

mod accounts;
mod broker_login;
mod call;
mod call_span;
mod catalog;
mod client;
pub mod error;
pub mod http_client;
pub mod identity_keys;
pub mod listing;
mod openapi;
mod plane;
mod policy;
mod protected_resource;
mod request_credential;
/// The in-process upstream MCP server tests drive the plane against (this crate's tests, and
/// other crates' through the `test-support` feature, a dev-dependency only).
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod test_upstream;
mod tls;
mod tokens;
mod tool_search;
mod trust;

pub use broker_login::ProviderGrant;
pub use call::{SessionScope, UpstreamCall};
pub use client::{RpcOutcome, RpcResult, UpstreamStream};
pub use listing::{FlaggedTool, HeldTool, ListingReview};
pub use plane::{CONNECT_TOOL, UpstreamPlane};
/// The parser of a `WWW-Authenticate` challenge (exposed for the gateway's fuzz targets).
pub use protected_resource::auth_challenge;
/// The server-certificate verifier that checks a fixed name (the gateway's operator client).
pub use tls::NamedVerifier;
pub use tool_search::{FoundTools, Searched};
pub use trust::review_entries;
