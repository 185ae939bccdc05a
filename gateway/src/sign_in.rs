//! What the brokered sign-in handlers (`oauth.rs`: the authorization server) and the
//! protected-resource metadata (`well_known.rs`) read: the table that serves now and the
//! upstream plane (client metadata documents, the provider's token endpoint, an upstream's own
//! metadata). Their context, as the faces have theirs: no handler takes the whole gateway.

use std::sync::Arc;

use switchboard_core::live::LiveTable;
use switchboard_core::table::RoutingTable;
use switchboard_upstream::UpstreamPlane;

pub(crate) struct SignInContext {
    live: Arc<LiveTable>,
    pub upstream: Arc<UpstreamPlane>,
}

impl SignInContext {
    pub fn new(live: Arc<LiveTable>, upstream: Arc<UpstreamPlane>) -> SignInContext {
        SignInContext { live, upstream }
    }

    /// The table serving now.
    pub fn table(&self) -> Arc<RoutingTable> {
        self.live.load()
    }
}
