//! The labels the operator puts on what it writes. Here, below every module that writes objects
//! (keys, the snapshot Secret, the workloads of `spec.run`), so none of them uses another for it.

/// Marks every object the operator created and owns (Secrets, Deployments, Services, ...).
pub(crate) const MANAGED_BY: (&str, &str) =
    ("app.kubernetes.io/managed-by", "switchboard-operator");
