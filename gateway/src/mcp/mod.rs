//! MCP towards clients.

pub mod aggregate;
pub mod capabilities;
pub mod dispatch;
pub mod endpoint;
pub mod exchange;
pub mod listen;
pub mod protocol;
pub mod relay;
