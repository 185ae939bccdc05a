//! Status: what each resource's conditions should say, computed from the render, the replicas'
//! acknowledgements and the readiness probes, and which events a change is worth. All pure;
//! [`crate::status_write`] writes it (server-side apply, only when it changed).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType};
use sha2::{Digest, Sha256};
use switchboard_crds::Condition;
use switchboard_crds::server::ReviewedTool;

use crate::render::Verdict;

/// A condition before timestamps: what we decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Desired {
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: String,
    pub message: String,
}

/// How many of the known gateway replicas serve a generation at least `needed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rollout {
    pub serving: usize,
    pub known: usize,
    pub needed: u64,
}

pub(crate) fn programmed(verdict: &Verdict, rollout: Option<Rollout>) -> Desired {
    let Some(r) = rollout.filter(|_| verdict.accepted) else {
        return Desired {
            type_: "Programmed",
            status: "False",
            reason: "NotAccepted".into(),
            message: "not in the snapshot".into(),
        };
    };
    let message = format!(
        "{}/{} gateway replicas serve generation {}",
        r.serving, r.known, r.needed
    );
    let (status, reason) = match (r.known, r.serving == r.known) {
        (0, _) => ("False", "NoReplicas"),
        (_, true) => ("True", "Programmed"),
        (_, false) => ("False", "Pending"),
    };
    Desired {
        type_: "Programmed",
        status,
        reason: reason.into(),
        message,
    }
}

pub fn accepted(verdict: &Verdict) -> Desired {
    Desired {
        type_: "Accepted",
        status: if verdict.accepted { "True" } else { "False" },
        reason: verdict.reason.to_string(),
        message: verdict.message.clone(),
    }
}

/// What the readiness probe found for a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Listed with the gateway's credential: the tools served after `spec.tools`, and for an
    /// OpenAPI server the selected operations left out (`<document path>: <why>`).
    Listed {
        tools: BTreeSet<String>,
        left_out: Vec<String>,
        at: Timestamp,
        /// The listed tools not approved as they are, or flagged (`None`: `tools.pinning:
        /// off`, nothing reviewed).
        review: Option<Vec<ReviewedTool>>,
    },
    Failed {
        reason: &'static str,
        message: String,
    },
    /// The catalog depends on each caller's credential: nothing to probe as the gateway.
    DependsOnCaller,
}

pub fn ready(verdict: &Verdict, probe: Option<&Probe>) -> Desired {
    let (status, reason, message) = match (verdict.accepted, probe) {
        (false, _) => ("False", "NotAccepted", "not in the snapshot".to_string()),
        (true, None) => (
            "Unknown",
            "Probing",
            "the upstream has not been probed yet".to_string(),
        ),
        (
            true,
            Some(Probe::Listed {
                tools, left_out, ..
            }),
        ) if left_out.is_empty() => (
            "True",
            "UpstreamReady",
            format!(
                "the upstream answered the gateway's listing; {} tools are served after spec.tools",
                tools.len()
            ),
        ),
        // An OpenAPI server serves what it could; the operations it could not are named, each
        // with its path in the document, so the document or the selection can be fixed.
        (
            true,
            Some(Probe::Listed {
                tools, left_out, ..
            }),
        ) => (
            "True",
            "OperationsLeftOut",
            format!(
                "{} tools are served; {} selected operations are left out: {}",
                tools.len(),
                left_out.len(),
                bounded_list(left_out, 5)
            ),
        ),
        (true, Some(Probe::Failed { reason, message })) => ("False", *reason, message.clone()),
        (true, Some(Probe::DependsOnCaller)) => (
            "Unknown",
            "DependsOnCaller",
            "the upstream uses each caller's own credential; readiness depends on the caller"
                .to_string(),
        ),
    };
    Desired {
        type_: "Ready",
        status,
        reason: reason.into(),
        message,
    }
}

/// `ToolsChanged` of a server: whether its listed tools' definitions are the approved ones,
/// naming the tools that are not and in which parts, and what the poisoning and shadowing
/// checks found. True is the state that needs the platform team (a review and an approval).
pub(crate) fn tools_changed(verdict: &Verdict, probe: Option<&Probe>) -> Desired {
    let desired = |status, reason: &str, message: String| Desired {
        type_: "ToolsChanged",
        status,
        reason: reason.into(),
        message,
    };
    let review = match probe {
        _ if !verdict.accepted => {
            return desired("Unknown", "NotAccepted", "not in the snapshot".into());
        }
        Some(Probe::Listed { review: None, .. }) => {
            return desired(
                "False",
                "PinningOff",
                "spec.tools.pinning is off: definitions are not reviewed".into(),
            );
        }
        Some(Probe::Listed {
            review: Some(review),
            ..
        }) => review,
        _ => {
            return desired(
                "Unknown",
                "NotListed",
                "the gateway's own listing of the upstream is needed to review its tools".into(),
            );
        }
    };
    let changed: Vec<String> = review
        .iter()
        .filter(|t| t.state == "changed" || t.state == "new")
        .map(|t| {
            let what = if t.state == "new" {
                "new".to_string()
            } else if t.changed.is_empty() {
                "definition changed".to_string()
            } else {
                format!("{} changed", t.changed.join(", "))
            };
            let held = if t.held { ", held" } else { "" };
            format!("{} ({what}{held})", t.name)
        })
        .collect();
    let findings: Vec<String> = review
        .iter()
        .flat_map(|t| t.findings.iter().map(move |f| format!("{}: {f}", t.name)))
        .collect();
    let unpinned: Vec<&str> = review
        .iter()
        .filter(|t| t.state == "unpinned")
        .map(|t| t.name.as_str())
        .collect();
    let mut message = Vec::new();
    if !changed.is_empty() {
        message.push(format!(
            "{} tools differ from spec.tools.approved: {}",
            changed.len(),
            bounded_list(&changed, 10)
        ));
    }
    if !findings.is_empty() {
        message.push(format!(
            "{} findings: {}",
            findings.len(),
            bounded_list(&findings, 10)
        ));
    }
    let review_hint = "review with `switchboard-operator tools review <namespace>/<name>`";
    if !changed.is_empty() {
        message.push(review_hint.into());
        return desired("True", "ToolsChanged", message.join("; "));
    }
    if !findings.is_empty() {
        message.push(review_hint.into());
        return desired("True", "ToolsFlagged", message.join("; "));
    }
    if !unpinned.is_empty() {
        // Under hold nothing is served until something is approved: that needs people too.
        let held = review.iter().any(|t| t.held);
        let (status, reason, served) = if held {
            ("True", "NotApproved", "none is served (pinning: hold)")
        } else {
            ("False", "NotPinned", "all are served (pinning: warn)")
        };
        return desired(
            status,
            reason,
            format!(
                "no tool is approved yet: {} listed, {served}; pin them with `switchboard-operator tools review <namespace>/<name>`",
                unpinned.len()
            ),
        );
    }
    desired(
        "False",
        "Approved",
        "every listed tool's definition is the approved one".into(),
    )
}

/// `Running` of a server the operator runs: its pods, and why they do not run.
pub(crate) fn running(health: &crate::workload::Health) -> Desired {
    let counts = format!("{}/{} pods ready", health.ready, health.desired);
    let (status, reason, message) = match (&health.failure, health.created) {
        (Some(f), _) => (
            "False",
            f.reason.clone(),
            format!("{counts}; {}", f.message),
        ),
        (None, false) => (
            "Unknown",
            "Creating".into(),
            "the Deployment is being created".to_string(),
        ),
        (None, true) if health.desired > 0 && health.ready >= health.desired => {
            ("True", "PodsReady".into(), counts)
        }
        (None, true) if health.desired == 0 => ("False", "ScaledToZero".into(), counts),
        (None, true) => ("False", "Progressing".into(), counts),
    };
    Desired {
        type_: "Running",
        status,
        reason,
        message,
    }
}

/// `Ready` of a server the operator runs: while its pods fail, that is the reason (the probe
/// could only say the Service does not answer); else what the probe found.
pub(crate) fn ready_running(
    verdict: &Verdict,
    probe: Option<&Probe>,
    health: &crate::workload::Health,
) -> Desired {
    match &health.failure {
        Some(f) if verdict.accepted && health.ready == 0 => Desired {
            type_: "Ready",
            status: "False",
            reason: f.reason.clone(),
            message: format!("no pod of the server runs: {}", f.message),
        },
        _ => ready(verdict, probe),
    }
}

/// What the readiness probe of a model found. It never calls the model: it asks the
/// provider for its model listing (`GET <baseUrl>/v1/models` or `GET <baseUrl>/models`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ModelProbe {
    /// The provider answered the listing with a 2xx.
    Answered { status: u16 },
    Failed {
        reason: &'static str,
        message: String,
    },
}

/// An McpKey's `Ready`: refused once it expired (`expired_at`: its `expiresAt`, when that has
/// passed), not while the resource is not accepted, and true only when every known gateway
/// replica serves a generation that has it.
pub(crate) fn key_ready(verdict: &Verdict, expired_at: Option<&str>, served: Rollout) -> Desired {
    let (status, reason, message) = if let Some(at) = expired_at {
        (
            "False",
            "Expired".to_string(),
            format!("the key expired at {at}; gateways refuse it"),
        )
    } else if !verdict.accepted {
        ("False", verdict.reason.to_string(), verdict.message.clone())
    } else {
        let message = format!(
            "{}/{} gateway replicas accept this key",
            served.serving, served.known
        );
        if served.known > 0 && served.serving == served.known {
            ("True", "Served".to_string(), message)
        } else {
            ("False", "Pending".to_string(), message)
        }
    };
    Desired {
        type_: "Ready",
        status,
        reason,
        message,
    }
}

/// What the operator found at an identity provider: its signing keys, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeysProbe {
    Loaded {
        keys: usize,
    },
    Failed {
        reason: &'static str,
        message: String,
    },
}

/// An IdentityProvider's `KeysLoaded`: discovery and the key set read the way a gateway reads
/// them (`Unknown` until the first look).
pub(crate) fn keys_loaded(verdict: &Verdict, probe: Option<&KeysProbe>) -> Desired {
    let (status, reason, message) = match (verdict.accepted, probe) {
        (false, _) => ("False", "NotAccepted", "not in the snapshot".to_string()),
        (true, None) => (
            "Unknown",
            "Fetching",
            "the provider's keys have not been fetched yet".to_string(),
        ),
        (true, Some(KeysProbe::Loaded { keys })) => (
            "True",
            "KeysLoaded",
            format!("discovery read, {keys} signing keys loaded"),
        ),
        (true, Some(KeysProbe::Failed { reason, message })) => ("False", *reason, message.clone()),
    };
    Desired {
        type_: "KeysLoaded",
        status,
        reason: reason.into(),
        message,
    }
}

/// An IdentityProvider's `Ready`: accepted, its keys loaded, and served by every known gateway
/// replica (a grant naming it works on each of them).
pub(crate) fn identity_provider_ready(
    verdict: &Verdict,
    keys: &Desired,
    served: Option<Rollout>,
) -> Desired {
    let (status, reason, message) = if !verdict.accepted {
        ("False", verdict.reason.to_string(), verdict.message.clone())
    } else if keys.status != "True" {
        (keys.status, keys.reason.clone(), keys.message.clone())
    } else {
        match served {
            Some(r) if r.known > 0 && r.serving == r.known => (
                "True",
                "Ready".to_string(),
                format!(
                    "{}/{} gateway replicas serve it; {}",
                    r.serving, r.known, keys.message
                ),
            ),
            Some(r) => (
                "False",
                "Pending".to_string(),
                format!("{}/{} gateway replicas serve it", r.serving, r.known),
            ),
            None => (
                "False",
                "Pending".to_string(),
                "not published yet".to_string(),
            ),
        }
    };
    Desired {
        type_: "Ready",
        status,
        reason,
        message,
    }
}

pub(crate) fn model_ready(verdict: &Verdict, probe: Option<&ModelProbe>) -> Desired {
    let (status, reason, message) = match (verdict.accepted, probe) {
        (false, _) => ("False", "NotAccepted", "not in the snapshot".to_string()),
        (true, None) => (
            "Unknown",
            "Probing",
            "the provider has not been probed yet".to_string(),
        ),
        (true, Some(ModelProbe::Answered { status })) => (
            "True",
            "ProviderReady",
            format!("the provider answered its model listing with HTTP {status}"),
        ),
        (true, Some(ModelProbe::Failed { reason, message })) => ("False", *reason, message.clone()),
    };
    Desired {
        type_: "Ready",
        status,
        reason: reason.into(),
        message,
    }
}

/// Turns decisions into conditions, keeping `lastTransitionTime` where the status is unchanged.
pub(crate) fn conditions(
    desired: &[Desired],
    current: &[Condition],
    generation: Option<i64>,
) -> Vec<Condition> {
    desired
        .iter()
        .map(|d| {
            let previous = current.iter().find(|c| c.type_ == d.type_);
            let since = previous
                .filter(|c| c.status == d.status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| Time(Timestamp::now()));
            Condition {
                type_: d.type_.into(),
                status: d.status.into(),
                reason: d.reason.clone(),
                message: d.message.clone(),
                last_transition_time: since,
                observed_generation: generation,
            }
        })
        .collect()
}

/// Condition types the operator writes. Others in a status belong to other writers (the
/// conditions are a map keyed by type, so server-side apply keeps them) and are never compared.
pub(crate) const OWN_TYPES: [&str; 5] =
    ["Accepted", "Programmed", "Ready", "Running", "KeysLoaded"];

/// Whether the conditions say something other than the operator's own in `current`
/// (timestamps aside).
pub(crate) fn differs(desired: &[Condition], current: &[Condition]) -> bool {
    let key = |c: &Condition| {
        (
            c.type_.clone(),
            c.status.clone(),
            c.reason.clone(),
            c.message.clone(),
            c.observed_generation,
        )
    };
    let a: Vec<_> = desired.iter().map(key).collect();
    let b: Vec<_> = current
        .iter()
        .filter(|c| OWN_TYPES.contains(&c.type_.as_str()))
        .map(key)
        .collect();
    a != b
}

/// The events for a status write: a condition that changed status or reason gets one, named by
/// the condition's reason (`UpstreamUnavailable`, `UpstreamAuthFailed`, ...). The recorder groups
/// events by reason, so a reason per cause keeps a later cause from hiding under an earlier one
/// (a connection refused that turns into a 401 is a second event, not a repeat of the first).
pub(crate) fn transitions(wanted: &[Condition], current: &[Condition]) -> Vec<Event> {
    wanted
        .iter()
        .filter(|c| {
            let before = current.iter().find(|p| p.type_ == c.type_);
            match before {
                // A definition that changes again while the condition stays True is news too.
                Some(p) if c.type_ == "ToolsChanged" && c.status == "True" => {
                    p.status != c.status || p.reason != c.reason || p.message != c.message
                }
                Some(p) => p.status != c.status || p.reason != c.reason,
                None => c.status != "Unknown",
            }
        })
        .map(|c| Event {
            // ToolsChanged is the one condition whose True (not False) needs people.
            type_: if c.status
                == if c.type_ == "ToolsChanged" {
                    "True"
                } else {
                    "False"
                } {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: c.reason.clone(),
            note: Some(format!(
                "{} is {}: {}",
                c.type_,
                c.status,
                c.message.chars().take(1000).collect::<String>()
            )),
            action: "Reconcile".into(),
            // An event recorder folds events of one key into a series that keeps the first
            // note; each new set of changed tools is its own event, so people read what
            // changed: the field it concerns, with a tag of the message, tells them apart.
            secondary: (c.type_ == "ToolsChanged").then(|| ObjectReference {
                field_path: Some(format!(
                    "status.toolReview#{}",
                    hex::encode(&Sha256::digest(c.message.as_bytes())[..8])
                )),
                ..ObjectReference::default()
            }),
        })
        .collect()
}

/// What a virtual server presents, judged from its servers' last listings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Presented {
    /// Distinct tool names it presents from the servers that were listed.
    pub tools: usize,
    /// Tools it names exactly (an override, an `allow` entry without `*`) that their server
    /// no longer lists: left out of its listing.
    pub missing: Vec<String>,
    /// Sources whose server has not been listed: `(server id, why)`.
    pub unlisted: Vec<(String, String)>,
    /// Sources whose server uses each caller's credential (nothing to list as the gateway).
    pub per_caller: Vec<String>,
}

impl Presented {
    /// Every source's server was listed: `tools` is the whole count.
    pub fn complete(&self) -> bool {
        self.unlisted.is_empty() && self.per_caller.is_empty()
    }
}

/// What `spec` presents given each server's probe (`probe(server id)`).
pub fn presented(
    spec: &switchboard_snapshot::VirtualServerSpec,
    probe: impl Fn(&str) -> Option<Probe>,
) -> Presented {
    let mut out = Presented::default();
    let mut names = BTreeSet::new();
    for source in &spec.sources {
        let Some(filter) = &source.tools else {
            continue;
        };
        let listed = match probe(&source.server) {
            Some(Probe::Listed { tools, .. }) => tools,
            Some(Probe::DependsOnCaller) => {
                out.per_caller.push(source.server.clone());
                continue;
            }
            Some(Probe::Failed { reason, .. }) => {
                out.unlisted
                    .push((source.server.clone(), reason.to_string()));
                continue;
            }
            None => {
                out.unlisted
                    .push((source.server.clone(), "not probed yet".to_string()));
                continue;
            }
        };
        for tool in listed.iter().filter(|t| filter.admits(t)) {
            let o = source.overrides.iter().find(|o| &o.tool == tool);
            names.insert(
                o.and_then(|o| o.name.clone())
                    .unwrap_or_else(|| tool.clone()),
            );
        }
        let named = source.overrides.iter().map(|o| o.tool.as_str()).chain(
            filter
                .allow
                .iter()
                .map(String::as_str)
                .filter(|a| !a.contains('*')),
        );
        for tool in named {
            let entry = format!("{tool:?} of {}", source.server);
            if !listed.contains(tool) && !out.missing.contains(&entry) {
                out.missing.push(entry);
            }
        }
    }
    out.tools = names.len();
    out
}

/// `Ready` of a virtual server: every tool it names is listed by its server.
pub(crate) fn virtual_ready(verdict: &Verdict, presented: Option<&Presented>) -> Desired {
    let (status, reason, message) = match (verdict.accepted, presented) {
        (false, _) | (true, None) => ("False", "NotAccepted", "not in the snapshot".to_string()),
        (true, Some(p)) if !p.missing.is_empty() => (
            "False",
            "ToolsNotListed",
            format!(
                "left out of its listing, their servers do not list them: {}",
                bounded_list(&p.missing, 5)
            ),
        ),
        (true, Some(p)) if !p.unlisted.is_empty() => {
            let names: Vec<String> = p
                .unlisted
                .iter()
                .map(|(server, why)| format!("{server} ({why})"))
                .collect();
            let status = if p.unlisted.iter().all(|(_, why)| why == "not probed yet") {
                ("Unknown", "Probing")
            } else {
                ("False", "ServerNotReady")
            };
            (
                status.0,
                status.1,
                format!(
                    "servers not listed by the gateway: {}",
                    bounded_list(&names, 5)
                ),
            )
        }
        (true, Some(p)) if p.tools == 0 && !p.per_caller.is_empty() => (
            "Unknown",
            "DependsOnCaller",
            "its servers use each caller's own credential; what it presents depends on the caller"
                .to_string(),
        ),
        (true, Some(p)) => (
            "True",
            "ToolsListed",
            format!("{} tools presented; every tool it names is listed", p.tools),
        ),
    };
    Desired {
        type_: "Ready",
        status,
        reason: reason.into(),
        message,
    }
}

/// At most `max` entries joined, and how many more.
fn bounded_list(items: &[String], max: usize) -> String {
    let mut text = items
        .iter()
        .take(max)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if items.len() > max {
        text.push_str(&format!(" (and {} more)", items.len() - max));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::Reason;

    fn accepted_verdict() -> Verdict {
        Verdict {
            accepted: true,
            reason: Reason::Accepted,
            message: String::new(),
            secret_missing: false,
        }
    }

    /// A key is Ready only when every known replica serves it; none known is not ready (a new
    /// leader that knows no replica yet must not say "0/0" is all); expiry and a refused
    /// resource win over the count.
    #[test]
    fn key_ready_needs_every_known_replica() {
        let v = accepted_verdict();
        let served = |serving, known| Rollout {
            serving,
            known,
            needed: 3,
        };
        let all = key_ready(&v, None, served(2, 2));
        assert_eq!(
            (all.status, all.reason.as_str(), all.message.as_str()),
            ("True", "Served", "2/2 gateway replicas accept this key")
        );
        let some = key_ready(&v, None, served(1, 2));
        assert_eq!((some.status, some.reason.as_str()), ("False", "Pending"));
        assert_eq!(key_ready(&v, None, served(0, 0)).status, "False");
        let expired = key_ready(&v, Some("2026-01-01T00:00:00Z"), served(2, 2));
        assert_eq!(
            (expired.status, expired.reason.as_str()),
            ("False", "Expired")
        );
        assert!(expired.message.contains("2026-01-01T00:00:00Z"));
        let refused = Verdict {
            accepted: false,
            reason: Reason::SecretNotFound,
            message: "spec.x: gone".into(),
            secret_missing: false,
        };
        let r = key_ready(&refused, None, served(2, 2));
        assert_eq!(
            (r.status, r.reason.as_str(), r.message.as_str()),
            ("False", "SecretNotFound", "spec.x: gone")
        );
    }

    #[test]
    fn programmed_counts_replicas() {
        let v = accepted_verdict();
        let all = programmed(
            &v,
            Some(Rollout {
                serving: 2,
                known: 2,
                needed: 7,
            }),
        );
        assert_eq!(
            (all.status, all.message.as_str()),
            ("True", "2/2 gateway replicas serve generation 7")
        );
        let one = programmed(
            &v,
            Some(Rollout {
                serving: 1,
                known: 2,
                needed: 7,
            }),
        );
        assert_eq!((one.status, one.reason.as_str()), ("False", "Pending"));
        assert_eq!(
            programmed(
                &v,
                Some(Rollout {
                    serving: 0,
                    known: 0,
                    needed: 7
                })
            )
            .reason,
            "NoReplicas"
        );
    }

    #[test]
    fn tools_changed_names_the_tools_and_parts_and_the_findings() {
        let v = accepted_verdict();
        let listed = |review: Option<Vec<ReviewedTool>>| Probe::Listed {
            tools: ["weather"].map(String::from).into(),
            left_out: Vec::new(),
            at: Timestamp::now(),
            review,
        };
        let tool = |name: &str, state: &str, changed: &[&str], held: bool| ReviewedTool {
            name: name.into(),
            digest: "v1:x".into(),
            state: state.into(),
            changed: changed.iter().map(|s| s.to_string()).collect(),
            findings: Vec::new(),
            held,
        };
        let c = tools_changed(
            &v,
            Some(&listed(Some(vec![
                tool("weather", "changed", &["description", "inputSchema"], true),
                tool("forecast", "new", &[], false),
            ]))),
        );
        assert_eq!((c.status, c.reason.as_str()), ("True", "ToolsChanged"));
        assert!(
            c.message.starts_with(
                "2 tools differ from spec.tools.approved: weather (description, inputSchema changed, held); forecast (new)"
            ),
            "{}",
            c.message
        );
        let mut flagged = tool("weather", "approved", &[], false);
        flagged.findings = vec!["shadowing in name (the same name as b's weather)".into()];
        let c = tools_changed(&v, Some(&listed(Some(vec![flagged]))));
        assert_eq!((c.status, c.reason.as_str()), ("True", "ToolsFlagged"));
        assert!(
            c.message.contains("weather: shadowing in name"),
            "{}",
            c.message
        );
        let c = tools_changed(&v, Some(&listed(Some(vec![]))));
        assert_eq!((c.status, c.reason.as_str()), ("False", "Approved"));
        let c = tools_changed(
            &v,
            Some(&listed(Some(vec![tool("weather", "unpinned", &[], false)]))),
        );
        assert_eq!((c.status, c.reason.as_str()), ("False", "NotPinned"));
        let c = tools_changed(
            &v,
            Some(&listed(Some(vec![tool("weather", "unpinned", &[], true)]))),
        );
        assert_eq!((c.status, c.reason.as_str()), ("True", "NotApproved"));
        let c = tools_changed(&v, Some(&listed(None)));
        assert_eq!((c.status, c.reason.as_str()), ("False", "PinningOff"));
        // A True ToolsChanged is a warning, and a new change while it stays True is news.
        let at = |c: &Desired| Condition {
            type_: c.type_.into(),
            status: c.status.into(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            last_transition_time: Time(Timestamp::now()),
            observed_generation: None,
        };
        let before = at(&tools_changed(
            &v,
            Some(&listed(Some(vec![tool("a", "new", &[], false)]))),
        ));
        let after = at(&tools_changed(
            &v,
            Some(&listed(Some(vec![tool("b", "new", &[], false)]))),
        ));
        let events = transitions(&[after], &[before]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].type_, EventType::Warning);
    }

    #[test]
    fn ready_says_why() {
        let v = accepted_verdict();
        assert_eq!(
            ready(
                &v,
                Some(&Probe::Listed {
                    tools: ["a", "b", "c"].map(String::from).into(),
                    left_out: Vec::new(),
                    at: Timestamp::now(),
                    review: None,
                })
            )
            .status,
            "True"
        );
        let failed = ready(
            &v,
            Some(&Probe::Failed {
                reason: "UpstreamTimeout",
                message: "x".into(),
            }),
        );
        assert_eq!(
            (failed.status, failed.reason.as_str()),
            ("False", "UpstreamTimeout")
        );
        assert_eq!(
            ready(&v, Some(&Probe::DependsOnCaller)).reason,
            "DependsOnCaller"
        );
        let rejected = Verdict {
            accepted: false,
            reason: Reason::SecretNotFound,
            message: String::new(),
            secret_missing: false,
        };
        assert_eq!(ready(&rejected, None).status, "False");
    }

    #[test]
    fn model_ready_says_why() {
        let v = accepted_verdict();
        let probing = model_ready(&v, None);
        assert_eq!(
            (probing.status, probing.reason.as_str()),
            ("Unknown", "Probing")
        );
        let ready = model_ready(&v, Some(&ModelProbe::Answered { status: 200 }));
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            ("True", "ProviderReady")
        );
        let refused = model_ready(
            &v,
            Some(&ModelProbe::Failed {
                reason: "ProviderAuthFailed",
                message: "the provider refused the API key (HTTP 401 on the model listing)".into(),
            }),
        );
        assert_eq!(
            (refused.status, refused.reason.as_str()),
            ("False", "ProviderAuthFailed")
        );
        let rejected = Verdict {
            accepted: false,
            reason: Reason::ServerNotFound,
            message: String::new(),
            secret_missing: false,
        };
        let r = model_ready(&rejected, Some(&ModelProbe::Answered { status: 200 }));
        assert_eq!((r.status, r.reason.as_str()), ("False", "NotAccepted"));
    }

    #[test]
    fn events_follow_the_reason_not_only_the_status() {
        let cond = |status: &str, reason: &str, message: &str| Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        };
        let refused = cond("False", "UpstreamUnavailable", "connection refused");
        let rejected = cond(
            "False",
            "UpstreamAuthFailed",
            "upstream rejected the credential (401)",
        );
        let first = transitions(std::slice::from_ref(&refused), &[]);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].reason, "UpstreamUnavailable");
        assert_eq!(first[0].type_, EventType::Warning);
        let next = transitions(
            std::slice::from_ref(&rejected),
            std::slice::from_ref(&refused),
        );
        assert_eq!(
            next.len(),
            1,
            "a new cause under the same status is a new event"
        );
        assert_eq!(next[0].reason, "UpstreamAuthFailed");
        assert!(next[0].note.as_deref().unwrap_or("").contains("401"));
        assert!(
            transitions(
                std::slice::from_ref(&rejected),
                std::slice::from_ref(&rejected)
            )
            .is_empty()
        );
        let back = transitions(&[cond("True", "UpstreamReady", "ok")], &[rejected]);
        assert_eq!(
            (back[0].reason.as_str(), back[0].type_),
            ("UpstreamReady", EventType::Normal)
        );
        assert!(transitions(&[cond("Unknown", "Probing", "")], &[]).is_empty());
    }

    #[test]
    fn transition_time_is_kept_while_status_holds() {
        let earlier = Time(Timestamp::from_second(1_000).unwrap());
        let current = vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "UpstreamReady".into(),
            message: "old".into(),
            last_transition_time: earlier.clone(),
            observed_generation: Some(1),
        }];
        let same = Desired {
            type_: "Ready",
            status: "True",
            reason: "UpstreamReady".into(),
            message: "new".into(),
        };
        assert_eq!(
            conditions(&[same], &current, Some(1))[0].last_transition_time,
            earlier
        );
        let flipped = Desired {
            type_: "Ready",
            status: "False",
            reason: "UpstreamTimeout".into(),
            message: "m".into(),
        };
        assert_ne!(
            conditions(&[flipped], &current, Some(1))[0].last_transition_time,
            earlier
        );
    }

    #[test]
    fn a_virtual_server_is_ready_when_every_tool_it_names_is_listed() {
        let spec: switchboard_snapshot::VirtualServerSpec =
            serde_json::from_value(serde_json::json!({
                "name": "curated",
                "sources": [
                    {"server": "a", "tools": {"allow": ["read", "list_*"]},
                     "overrides": [{"tool": "read", "name": "read_docs"}]},
                    {"server": "b", "tools": {}}
                ]
            }))
            .unwrap();
        let listed = |names: &[&str]| Probe::Listed {
            tools: names.iter().map(|n| n.to_string()).collect(),
            left_out: Vec::new(),
            at: Timestamp::now(),
            review: None,
        };
        let v = accepted_verdict();
        let all = |id: &str| match id {
            "a" => Some(listed(&["read", "list_x", "list_y", "write"])),
            _ => Some(listed(&["read_docs", "z"])),
        };
        let p = presented(&spec, all);
        // read→read_docs, list_x, list_y from a; b's read_docs is shadowed by a's rename; z.
        assert_eq!(p.tools, 4);
        let ready = virtual_ready(&v, Some(&p));
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            ("True", "ToolsListed"),
            "{ready:?}"
        );

        // The server stopped listing a tool the virtual server names: left out, and said.
        let gone = |id: &str| match id {
            "a" => Some(listed(&["list_x"])),
            _ => Some(listed(&["z"])),
        };
        let ready = virtual_ready(&v, Some(&presented(&spec, gone)));
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            ("False", "ToolsNotListed")
        );
        assert!(ready.message.contains("\"read\" of a"), "{}", ready.message);

        // A server not probed yet, then failing.
        let unknown = virtual_ready(
            &v,
            Some(&presented(&spec, |id| {
                (id == "a").then(|| listed(&["read"]))
            })),
        );
        assert_eq!(
            (unknown.status, unknown.reason.as_str()),
            ("Unknown", "Probing")
        );
        let failing = |id: &str| match id {
            "a" => Some(listed(&["read"])),
            _ => Some(Probe::Failed {
                reason: "UpstreamTimeout",
                message: "x".into(),
            }),
        };
        let failed = virtual_ready(&v, Some(&presented(&spec, failing)));
        assert_eq!(
            (failed.status, failed.reason.as_str()),
            ("False", "ServerNotReady")
        );
        assert!(
            failed.message.contains("b (UpstreamTimeout)"),
            "{}",
            failed.message
        );
    }

    #[test]
    fn an_openapi_server_names_the_operations_it_left_out() {
        let ready = ready(
            &accepted_verdict(),
            Some(&Probe::Listed {
                tools: ["getPet"].map(String::from).into(),
                left_out: vec![
                    "paths./pets/{id}.delete.parameters: path parameter {id} is not declared"
                        .into(),
                ],
                at: Timestamp::now(),
                review: None,
            }),
        );
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            ("True", "OperationsLeftOut")
        );
        assert!(
            ready.message.contains(
                "1 tools are served; 1 selected operations are left out: paths./pets/{id}.delete"
            ),
            "{}",
            ready.message
        );
    }

    #[test]
    fn another_writers_condition_is_not_a_difference() {
        let desired = [accepted(&accepted_verdict())];
        let wanted = conditions(&desired, &[], Some(1));
        let mut current = wanted.clone();
        assert!(!differs(&wanted, &current));
        current.push(Condition {
            type_: "example.com/Audited".into(),
            status: "True".into(),
            reason: "Audited".into(),
            message: "another controller's".into(),
            last_transition_time: Time(Timestamp::now()),
            observed_generation: Some(1),
        });
        assert!(
            !differs(&wanted, &current),
            "a foreign condition never causes a write"
        );
        // Control: one of the operator's own that it no longer wants is a difference.
        current.push(Condition {
            type_: "Running".into(),
            ..current[0].clone()
        });
        assert!(differs(&wanted, &current));
    }
}
