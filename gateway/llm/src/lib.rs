//! The LLM face of the gateway: `/v1/messages` (Anthropic Messages) and
//! `/v1/chat/completions` (OpenAI Chat Completions) in front of the models of the snapshot,
//! running the gateway's own MCP tools for the model while the client's tools go back to the
//! client untouched (docs/llm.md).
//!
//! - [`routes`]: the handlers; [`errors`]: every error and its shape in each format.
//! - `toolset`: which gateway tools a request gets; the one schema sanitizer is `switchboard_protocol::schema`.
//! - [`format`](mod@format): the two formats; `turn`: the shapes of a tool turn both share; `wire`,
//!   `anthropic`, `openai`: what the loop needs of each format.
//! - `run`: the loop, answered whole; `stream`: the loop, streamed.
//! - `carry`: hidden tools' work, sealed into ids the client echoes back.
//! - `provider`: the calls to the provider; `model_span`: each call's GenAI trace span;
//!   `record`: a request's metrics and log line.
//! - [`context`]: what the handlers need of the gateway.
//!
//! (Modules this crate keeps to itself are named in code spans, not linked: the crate's public
//! documentation does not link to private items.)

mod anthropic;
mod carry;
pub mod context;
pub mod errors;
pub mod format;
mod model_span;
mod openai;
mod provider;
mod record;
pub mod routes;
mod run;
mod stream;
mod toolset;
mod turn;
mod wire;
