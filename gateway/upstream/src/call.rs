//! One call as a face hands it to the plane: what to ask an upstream, and on which of its
//! sessions. The plane resolves where it goes and with which credential (`client::RpcCall`
//! holds this by reference on its way to the wire), so these fields are written once.

use serde_json::Value;
use switchboard_protocol::Params;

/// One method call as it goes upstream.
pub struct UpstreamCall<'a> {
    pub method: &'a str,
    /// Parameters as the upstream gets them (names already without the gateway prefix).
    pub params: Option<Params>,
    /// The answer may come back as a stream to relay event by event (the client accepts SSE
    /// and nothing needs the whole answer first); otherwise an SSE answer is read whole.
    pub stream: bool,
    /// The legacy upstream session to use (a legacy client's own, or the shared one).
    pub session: SessionScope,
    /// The client speaks 2026-07-28: its `Mcp-Param-*` headers are its own business (passed
    /// through, never synthesized); a legacy client's are derived from the tool's schema.
    pub modern_client: bool,
    /// A legacy client's log level, for a 2026-07-28 upstream.
    pub log_level: Option<&'static str>,
}

impl UpstreamCall<'static> {
    /// The legacy handshake (`initialize`) on `session`'s upstream session: what a session
    /// exchange asks, when it asks anything.
    pub const fn handshake(session: SessionScope) -> UpstreamCall<'static> {
        UpstreamCall {
            method: "initialize",
            params: None,
            stream: false,
            session,
            modern_client: false,
            log_level: None,
        }
    }
}

impl<'a> UpstreamCall<'a> {
    /// A plain request on the shared session, answered whole.
    pub fn whole(method: &'a str, params: Option<Value>) -> UpstreamCall<'a> {
        UpstreamCall {
            method,
            params: params.map(Params::from),
            stream: false,
            session: SessionScope::default(),
            log_level: None,
            modern_client: false,
        }
    }
}

/// Whose upstream session a request uses on a legacy upstream. A legacy client's requests go
/// on an upstream session of its own (opened with its capabilities, closed when it ends);
/// everything else shares one session per credential partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SessionScope {
    /// The client session's tag, 0 for the shared session.
    pub client: u64,
    /// The client's capabilities ([`switchboard_protocol::capabilities`] bits).
    pub capabilities: u8,
}
