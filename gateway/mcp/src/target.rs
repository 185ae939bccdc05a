//! Which endpoint a request came in on, and which handler answers its methods there: the
//! aggregate's and a single server's in [`crate::dispatch`], a virtual server's in
//! `crate::virtual_server`.

use std::sync::Arc;

use crate::context::McpContext;
use crate::dispatch::{Answer, Failure, Request};
use switchboard_core::scope::Caller;
use switchboard_core::table::Server;

/// Which endpoint a request came in on.
pub enum Target {
    /// `POST /mcp`: every server in the caller's scope, prefixed names.
    Aggregate,
    /// `POST /mcp/{prefix}`: one server, its own names, routed by the path alone.
    Single(Arc<Server>),
    /// `POST /mcp/{path}` of a virtual server: its servers' selected tools, as it presents them.
    Virtual(Arc<switchboard_core::virtual_server::VirtualServer>),
}

pub async fn dispatch(
    cx: &McpContext,
    caller: &Caller,
    target: &Target,
    request: Request,
) -> Result<Answer, Failure> {
    match target {
        Target::Aggregate => crate::dispatch::aggregate_method(cx, caller, request).await,
        Target::Single(server) => crate::dispatch::single_method(cx, caller, server, request).await,
        Target::Virtual(vs) => crate::virtual_server::method(cx, caller, vs, request).await,
    }
}
