//! MCP towards clients.

pub mod aggregate;
pub mod dispatch;
pub mod endpoint;
pub mod exchange;
pub mod listen;
pub mod relay;
