//! The MCP faces towards clients: the MCP endpoint of both eras (sessions, methods, merged
//! listings, the event-by-event relay, era bridging, subscriptions), virtual servers' endpoints
//! and the REST face. Handlers
//! take [`context::McpContext`].

mod aggregate;
pub mod context;
pub mod dispatch;
pub mod endpoint;
mod event_stream;
mod exchange;
mod listen;
mod relay;
pub mod rest;
pub mod target;
#[cfg(test)]
mod test_support;
mod virtual_server;
