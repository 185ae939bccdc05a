//! What the brokered sign-in handlers (`oauth.rs`: the authorization server) and the
//! protected-resource metadata (`well_known.rs`) read: the table that serves now and the
//! upstream plane (client metadata documents, the provider's token endpoint, an upstream's own
//! metadata). Their context, as the faces have theirs: no handler takes the whole gateway.

use std::sync::Arc;

use switchboard_core::live::LiveTable;
use switchboard_core::metrics::Metrics;
use switchboard_core::table::RoutingTable;
use switchboard_upstream::UpstreamPlane;

pub(crate) struct SignInContext {
    live: Arc<LiveTable>,
    pub upstream: Arc<UpstreamPlane>,
    pub metrics: Arc<Metrics>,
}

impl SignInContext {
    pub fn new(
        live: Arc<LiveTable>,
        upstream: Arc<UpstreamPlane>,
        metrics: Arc<Metrics>,
    ) -> SignInContext {
        SignInContext {
            live,
            upstream,
            metrics,
        }
    }

    /// The table serving now.
    pub fn table(&self) -> Arc<RoutingTable> {
        self.live.load()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! What the sign-in handlers' in-process tests share: a context over a table built from a
    //! config (its upstream plane prepared, as `Gateway::apply` does), and a response's status
    //! and JSON body.
    use super::*;
    use axum::http::StatusCode;
    use axum::response::Response;
    use serde_json::Value;
    use switchboard_snapshot::{SystemLookup, load};

    pub(crate) fn context(config: &str) -> Arc<SignInContext> {
        let table = RoutingTable::build(&load(config, &SystemLookup).expect("a valid config"))
            .expect("a valid table");
        let live = Arc::new(LiveTable::empty());
        let metrics = Arc::new(Metrics::default());
        let upstream = Arc::new(UpstreamPlane::new(metrics.clone()));
        upstream.prepare(&table);
        live.store(Arc::new(table));
        Arc::new(SignInContext::new(live, upstream, metrics))
    }

    pub(crate) async fn body(response: Response) -> (StatusCode, Value) {
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("a body");
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}
