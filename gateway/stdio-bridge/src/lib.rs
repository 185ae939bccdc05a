//! `switchboard-stdio-bridge`: serves one stdio MCP server over Streamable HTTP, so that the
//! gateway reaches it like any other upstream and it scales past one replica.
//!
//! - [`process`]: one child process speaking newline-delimited JSON-RPC, its requests in
//!   flight, its exit (every request in flight answered, never a hang) and its stderr.
//! - [`pool`]: the replica's processes: a pool for 2026-07-28 requests, one per legacy session,
//!   bounded, refilled, reaped.
//! - [`session_id`]: legacy session ids that name the replica holding the session.
//! - [`peers`]: which replica holds the session a gateway asks for by affinity.
//! - [`serve`]: the HTTP face, and the hand-off of a session's request to its holder.
//!
//! How it is deployed (an init container copies this binary into the server's pod, which runs
//! it in front of the image's command) is in docs/stdio-bridge.md.

pub mod peers;
pub mod pool;
pub mod process;
pub mod serve;
pub mod session_id;
