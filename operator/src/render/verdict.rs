//! What happened to each resource: its verdict (accepted, or left out and why).

use kube::ResourceExt;

/// `(namespace, name)` of a resource.
pub(crate) type ObjectRef = (String, String);

/// Why a resource is in the snapshot or not: the `reason` of its `Accepted` condition (and of
/// `Ready` for a key that is not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    Accepted,
    InvalidSpec,
    InvalidSecret,
    SecretNotFound,
    ConfigMapNotFound,
    DuplicateKey,
    IdentityProviderNotFound,
    ModelNameConflict,
    NameConflict,
    PathConflict,
    PrefixConflict,
    NameReserved,
    ServerNotAccepted,
    ServerNotAdmitted,
    ServerNotFound,
    ServiceAccountConflict,
    UpstreamAddressDenied,
    UpstreamPolicyInvalid,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Accepted => "Accepted",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::InvalidSecret => "InvalidSecret",
            Reason::SecretNotFound => "SecretNotFound",
            Reason::ConfigMapNotFound => "ConfigMapNotFound",
            Reason::DuplicateKey => "DuplicateKey",
            Reason::IdentityProviderNotFound => "IdentityProviderNotFound",
            Reason::ModelNameConflict => "ModelNameConflict",
            Reason::NameConflict => "NameConflict",
            Reason::PathConflict => "PathConflict",
            Reason::PrefixConflict => "PrefixConflict",
            Reason::NameReserved => "NameReserved",
            Reason::ServerNotAccepted => "ServerNotAccepted",
            Reason::ServerNotAdmitted => "ServerNotAdmitted",
            Reason::ServerNotFound => "ServerNotFound",
            Reason::ServiceAccountConflict => "ServiceAccountConflict",
            Reason::UpstreamAddressDenied => "UpstreamAddressDenied",
            Reason::UpstreamPolicyInvalid => "UpstreamPolicyInvalid",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// (so a test reads `assert_eq!(verdict.reason, "PrefixConflict")`)
impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Whether a resource made it into the snapshot, and if not why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub accepted: bool,
    pub reason: Reason,
    /// Human-readable; names fields and other resources, never secret values.
    pub message: String,
    /// The Secret the resource refers to does not exist (rather than lacking the key): what
    /// `--secret-selector` may explain ([`crate::render::Rendered::note_secret_selector`]).
    pub secret_missing: bool,
}

impl Verdict {
    pub(crate) fn accepted(message: impl Into<String>) -> Verdict {
        Verdict {
            accepted: true,
            reason: Reason::Accepted,
            message: message.into(),
            secret_missing: false,
        }
    }
    pub(crate) fn rejected(reason: Reason, message: impl Into<String>) -> Verdict {
        Verdict {
            accepted: false,
            reason,
            message: message.into(),
            secret_missing: false,
        }
    }
}

/// Facts about a key that its status shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyOutcome {
    pub verdict: Verdict,
    pub fingerprint: Option<String>,
}

pub(crate) fn object_ref<K: kube::Resource>(object: &K) -> ObjectRef {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// A resource's `<namespace>/<name>`, as verdicts and the snapshot's ids name it.
pub(crate) fn id_of(key: &ObjectRef) -> String {
    format!("{}/{}", key.0, key.1)
}

pub(crate) fn not_accepted(field: &str, kind: &str, id: &str) -> Verdict {
    Verdict::rejected(
        Reason::ServerNotAccepted,
        format!("{field}: {kind} {id} is not in the snapshot (see its Accepted condition)"),
    )
}
