//! MCP towards clients.

pub mod aggregate;
pub mod dispatch;
pub mod endpoint;
pub mod era;
