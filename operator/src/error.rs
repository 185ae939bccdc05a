//! What fails a reconcile pass: one enum, each variant with the `error` label it is counted
//! under (`switchboard_operator_reconcile_errors_total{error}`), as kube-rs's controller-rs
//! counts its reconcile failures. What a resource gets wrong is not an error here: it is that
//! resource's condition ([`crate::render::Verdict`]), and the pass goes on.

/// A reconcile pass that failed (the loop logs it, counts it and runs the pass again).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The lease holder could not store the snapshot in its Secret (where gateways that start
    /// while the operator is away read it).
    #[error("storing the snapshot in Secret {secret}: {source}")]
    StoreSnapshot {
        secret: String,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The metric label of this failure (low cardinality: the variant, never a name).
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            Error::StoreSnapshot { .. } => "store_snapshot",
        }
    }
}
