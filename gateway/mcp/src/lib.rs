//! The MCP faces towards clients: the MCP endpoint of both eras (sessions, methods, merged
//! listings, the event-by-event relay, era bridging, subscriptions) and the REST face. Handlers
//! take [`context::McpContext`].

pub mod aggregate;
pub mod context;
pub mod dispatch;
pub mod endpoint;
pub mod event_stream;
pub mod exchange;
pub mod listen;
pub mod relay;
pub mod rest;
