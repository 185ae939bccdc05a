//! What the LLM endpoints need to serve a request: the live table (models, keys, servers), the
//! upstream plane (gateway tools run through it, providers are called on its HTTP client) and
//! metrics.

use std::sync::Arc;

use switchboard_core::live::LiveTable;
use switchboard_core::metrics::Metrics;
use switchboard_core::table::RoutingTable;
use switchboard_upstream::UpstreamPlane;

pub struct LlmContext {
    live: Arc<LiveTable>,
    pub upstream: Arc<UpstreamPlane>,
    pub metrics: Arc<Metrics>,
}

impl LlmContext {
    pub fn new(
        live: Arc<LiveTable>,
        upstream: Arc<UpstreamPlane>,
        metrics: Arc<Metrics>,
    ) -> LlmContext {
        LlmContext {
            live,
            upstream,
            metrics,
        }
    }

    pub fn table(&self) -> Arc<RoutingTable> {
        self.live.load()
    }
}
