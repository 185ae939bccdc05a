//! MCP towards clients.

pub mod aggregate;
pub mod context;
pub mod dispatch;
pub mod endpoint;
pub mod event_stream;
pub mod exchange;
pub mod listen;
pub mod relay;
