//! MCP towards upstream servers.

pub mod address_policy;
pub mod client;
pub mod credentials;
pub mod listing;
pub mod plane;
pub mod request_credential;
pub mod tokens;
