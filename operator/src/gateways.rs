//! The gateway replicas status must count. The hub knows the replicas that follow *this*
//! operator replica's stream; a replica that follows no one yet (a new lease holder has no
//! streams at first, however many gateways answer callers) would otherwise be left out, and a
//! key would be reported Ready while a running gateway still refuses it. So the cluster is
//! asked as well: every gateway pod (a pod running as the gateway's ServiceAccount, the same
//! identity the stream authenticates) that is Ready, i.e. answers callers behind its Service.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::delivery::Replica;

/// The watch's field selector: the pods of the gateway's ServiceAccount.
pub fn selector(service_account: &str) -> String {
    format!("spec.serviceAccountName={service_account}")
}

/// What is kept of a gateway pod: its name, deletion mark and conditions.
pub fn trim(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    pod.metadata.annotations = None;
    pod.spec = None;
    if let Some(status) = pod.status.as_mut() {
        status.container_statuses = None;
        status.init_container_statuses = None;
    }
}

/// A gateway pod that answers callers: Ready and not being deleted (one being deleted says
/// goodbye on its stream and is no longer expected).
fn answering(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
}

/// The replicas status counts: those the hub knows (`known`: connected, or gone for less than
/// the expiry) and every answering gateway pod, which counts as expected and not serving until
/// it follows this operator replica. A replica's name is its pod's name (the gateway's
/// `$POD_NAME` default).
pub fn expected(known: Vec<(String, Replica)>, pods: &[Arc<Pod>]) -> Vec<(String, Replica)> {
    let mut all = known;
    for pod in pods.iter().filter(|p| answering(p)) {
        let name = pod.name_any();
        if !all.iter().any(|(n, _)| *n == name) {
            all.push((
                name,
                Replica {
                    serving: 0,
                    connected: false,
                    last_seen: Instant::now(),
                    rejected: None,
                },
            ));
        }
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn pod(name: &str, ready: bool, deleting: bool) -> Arc<Pod> {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        if deleting {
            pod.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        }
        pod.status = Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        Arc::new(pod)
    }

    fn replica(serving: u64) -> Replica {
        Replica {
            serving,
            connected: true,
            last_seen: Instant::now(),
            rejected: None,
        }
    }

    /// What a new lease holder sees right after a takeover: one gateway has found it, the
    /// other still answers callers with the snapshot it had. Without the pods it would count
    /// 1 of 1 replicas serving (the reported bug); with them, 1 of 2.
    #[test]
    fn a_running_gateway_that_follows_no_one_yet_is_expected() {
        let known = vec![("gw-a".to_string(), replica(7))];
        let pods = [pod("gw-a", true, false), pod("gw-b", true, false)];
        let control = expected(known.clone(), &[]);
        assert_eq!(
            control.len(),
            1,
            "the control: the hub alone knows one replica"
        );
        let all = expected(known, &pods);
        let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["gw-a", "gw-b"]);
        assert!(
            all[0].1.connected && all[0].1.serving == 7,
            "the hub's view is kept"
        );
        assert!(!all[1].1.connected && all[1].1.serving == 0);
    }

    #[test]
    fn pods_that_answer_no_caller_are_not_expected() {
        let pods = [
            pod("starting", false, false),
            pod("leaving", true, true),
            pod("serving", true, false),
        ];
        let all = expected(Vec::new(), &pods);
        let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["serving"]);
    }

    #[test]
    fn trimming_keeps_what_answering_reads() {
        let mut kept = (*pod("gw", true, false)).clone();
        kept.spec = Some(Default::default());
        trim(&mut kept);
        assert!(kept.spec.is_none());
        assert!(answering(&kept));
    }
}
