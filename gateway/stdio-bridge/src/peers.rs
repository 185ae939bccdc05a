//! Where a session with an affinity lives. A session stays where it was opened: before a
//! replica opens one, it asks the others (`--peers`: each `host:port`; a headless Service's name
//! resolves to every ready pod) whether one of them holds it, or has seen it end; only a session
//! no replica knows is new, and it goes to the replica that ranks highest for the affinity
//! (rendezvous hashing) among those that answered and are not draining.
//!
//! So the gateway replicas' handshakes for one client session reach one process, whichever
//! replica the Service picked, and the members changing (a replica joining, what an autoscaler
//! does) moves no session that is open: the rank only places new ones. A session whose replica
//! went, or whose process ended, is never opened again under its affinity when the gateway says
//! it had one (it asks to resume), or when a replica remembers it ended (the replica's own
//! sessions, and those a draining replica announced): the gateway's client then opens a new
//! session, instead of going on without the state it had.

use sha2::{Digest, Sha256};

use crate::pool::Holding;

pub struct Peers {
    names: Vec<String>,
}

impl Peers {
    pub fn new(names: Vec<String>) -> Peers {
        Peers { names }
    }

    /// The replicas now: every name resolved, plus `me`; sorted, without repeats. A name that
    /// does not resolve counts for nothing (a replica that is gone).
    pub async fn members(&self, me: &str) -> Vec<String> {
        let mut members = vec![me.to_string()];
        for name in &self.names {
            match tokio::net::lookup_host(name.as_str()).await {
                Ok(addrs) => members.extend(addrs.map(|a| a.to_string())),
                Err(e) => tracing::debug!(peer = %name, error = %e, "a peer name did not resolve"),
            }
        }
        members.sort();
        members.dedup();
        members
    }

    /// The replicas now but `me`: the ones to ask about a session or to tell of ended ones.
    pub(crate) async fn others(&self, me: &str) -> Vec<String> {
        let mut others = self.members(me).await;
        others.retain(|m| m != me);
        others
    }
}

/// What another replica answered when asked about a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    Answered {
        holding: Holding,
        draining: bool,
    },
    /// No connection: a replica that is gone (its sessions with it).
    Unreachable,
    /// Connected, but no answer in time: it may hold the session.
    Unsure,
}

/// Where a handshake for a session goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Held here, or new and this replica's to open.
    Here,
    /// Held by this replica.
    Holder(String),
    /// New, and this replica's to open.
    Home(String),
    /// It ended (or the gateway asked to resume a session nobody holds): the client starts over.
    Ended,
    /// A replica that may hold it did not answer: try again rather than risk two processes.
    Unsure,
}

/// Where the handshake for `affinity` goes, from what this replica (`me`) knows of it and what
/// the others answered. `resume`: the gateway had this session, so a new one is no answer.
pub(crate) fn place(
    affinity: &str,
    me: &str,
    here: Holding,
    me_draining: bool,
    answers: &[(String, Asked)],
    resume: bool,
) -> Place {
    match here {
        Holding::Held => return Place::Here,
        Holding::Ended => return Place::Ended,
        Holding::Unknown => {}
    }
    if let Some((peer, _)) = answers.iter().find(|(_, a)| {
        matches!(
            a,
            Asked::Answered {
                holding: Holding::Held,
                ..
            }
        )
    }) {
        return Place::Holder(peer.clone());
    }
    if answers.iter().any(|(_, a)| {
        matches!(
            a,
            Asked::Answered {
                holding: Holding::Ended,
                ..
            }
        )
    }) {
        return Place::Ended;
    }
    if answers.iter().any(|(_, a)| *a == Asked::Unsure) {
        return Place::Unsure;
    }
    if resume {
        return Place::Ended;
    }
    let mut candidates: Vec<String> = answers
        .iter()
        .filter(|(_, a)| {
            matches!(
                a,
                Asked::Answered {
                    draining: false,
                    ..
                }
            )
        })
        .map(|(peer, _)| peer.clone())
        .collect();
    if !me_draining {
        candidates.push(me.to_string());
    }
    match rendezvous(affinity, &candidates) {
        Some(home) if home != me => Place::Home(home),
        _ => Place::Here,
    }
}

fn rendezvous(affinity: &str, members: &[String]) -> Option<String> {
    members
        .iter()
        .max_by_key(|m| {
            let digest: [u8; 32] = Sha256::new()
                .chain_update(affinity.as_bytes())
                .chain_update(b"\0")
                .chain_update(m.as_bytes())
                .finalize()
                .into();
            digest
        })
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_replica_agrees_and_few_affinities_move_when_one_joins() {
        let three: Vec<String> = ["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"]
            .map(String::from)
            .to_vec();
        let mut four = three.clone();
        four.push("10.0.0.4:8080".into());
        let affinities: Vec<String> = (0..1000).map(|i| format!("{i:032x}")).collect();
        let homes: Vec<_> = affinities
            .iter()
            .map(|a| rendezvous(a, &three).unwrap())
            .collect();
        // Spread over all three.
        for m in &three {
            let n = homes.iter().filter(|h| *h == m).count();
            assert!(n > 200, "{m} holds {n} of 1000");
        }
        // A fourth replica takes about a quarter; nothing moves between the other three.
        let moved: Vec<_> = affinities
            .iter()
            .zip(&homes)
            .filter_map(|(a, h)| {
                let now = rendezvous(a, &four).unwrap();
                (now != *h).then_some(now)
            })
            .collect();
        assert!(
            moved.iter().all(|m| m == "10.0.0.4:8080"),
            "only to the new replica"
        );
        assert!((150..350).contains(&moved.len()), "{} moved", moved.len());
    }

    #[tokio::test]
    async fn without_peers_the_members_are_me_and_unresolvable_names_count_for_nothing() {
        assert_eq!(Peers::new(vec![]).members("me:1").await, vec!["me:1"]);
        let peers = Peers::new(vec!["127.0.0.1:9".into(), "no-such-host.invalid:80".into()]);
        let members = peers.members("127.0.0.1:8").await;
        assert_eq!(
            members,
            vec!["127.0.0.1:8".to_string(), "127.0.0.1:9".to_string()]
        );
        assert_eq!(peers.others("127.0.0.1:8").await, vec!["127.0.0.1:9"]);
    }

    fn answered(holding: Holding, draining: bool) -> Asked {
        Asked::Answered { holding, draining }
    }

    #[test]
    fn a_held_session_stays_where_it_is_whoever_ranks_higher_now() {
        // Affinities whose rank among {old, new} puts the new replica first: what moved them
        // before (growth re-ranked, a second process opened on the new replica).
        let old = "10.0.0.1:8080".to_string();
        let new = "10.0.0.2:8080".to_string();
        let both = [old.clone(), new.clone()];
        let moved: Vec<String> = (0..200)
            .map(|i| format!("{i:032x}"))
            .filter(|a| rendezvous(a, &both).as_ref() == Some(&new))
            .collect();
        assert!(moved.len() > 50, "{}", moved.len());
        for a in &moved {
            // Asked on the new replica: the old one holds it.
            let answers = [(old.clone(), answered(Holding::Held, false))];
            assert_eq!(
                place(a, &new, Holding::Unknown, false, &answers, false),
                Place::Holder(old.clone())
            );
            // Asked on the old replica: here.
            let answers = [(new.clone(), answered(Holding::Unknown, false))];
            assert_eq!(
                place(a, &old, Holding::Held, false, &answers, false),
                Place::Here
            );
            // A new session of that affinity goes to its rank's first.
            let answers = [(old.clone(), answered(Holding::Unknown, false))];
            assert_eq!(
                place(a, &new, Holding::Unknown, false, &answers, false),
                Place::Here
            );
            assert_eq!(
                place(
                    a,
                    &old,
                    Holding::Unknown,
                    false,
                    &[(new.clone(), answered(Holding::Unknown, false))],
                    false
                ),
                Place::Home(new.clone())
            );
        }
    }

    #[test]
    fn a_session_that_ended_or_that_nobody_holds_on_resume_is_ended() {
        let me = "10.0.0.1:8080";
        let other = "10.0.0.2:8080".to_string();
        let a = "ab".repeat(16);
        // Ended here, or there (a drained replica's sessions, announced).
        assert_eq!(
            place(&a, me, Holding::Ended, false, &[], false),
            Place::Ended
        );
        let answers = [(other.clone(), answered(Holding::Ended, false))];
        assert_eq!(
            place(&a, me, Holding::Unknown, false, &answers, false),
            Place::Ended
        );
        // The gateway had it; its replica is gone (unreachable) and nobody else holds it.
        let answers = [(other.clone(), Asked::Unreachable)];
        assert_eq!(
            place(&a, me, Holding::Unknown, false, &answers, true),
            Place::Ended
        );
        // The same without resume is a new session, opened among those that answered.
        assert_eq!(
            place(&a, me, Holding::Unknown, false, &answers, false),
            Place::Here
        );
        // A replica that did not answer may hold it: neither ended nor new.
        let answers = [(other.clone(), Asked::Unsure)];
        assert_eq!(
            place(&a, me, Holding::Unknown, false, &answers, true),
            Place::Unsure
        );
        assert_eq!(
            place(&a, me, Holding::Unknown, false, &answers, false),
            Place::Unsure
        );
        // ... unless another holds it.
        let third = "10.0.0.3:8080".to_string();
        let answers = [
            (other.clone(), Asked::Unsure),
            (third.clone(), answered(Holding::Held, true)),
        ];
        assert_eq!(
            place(&a, me, Holding::Unknown, false, &answers, true),
            Place::Holder(third)
        );
    }

    #[test]
    fn new_sessions_go_to_replicas_that_answered_and_are_not_draining() {
        let me = "10.0.0.1:8080".to_string();
        let peers: Vec<String> = (2..6).map(|i| format!("10.0.0.{i}:8080")).collect();
        for i in 0..200 {
            let a = format!("{i:032x}");
            let answers: Vec<(String, Asked)> = vec![
                (peers[0].clone(), answered(Holding::Unknown, true)),
                (peers[1].clone(), Asked::Unreachable),
                (peers[2].clone(), answered(Holding::Unknown, false)),
                (peers[3].clone(), answered(Holding::Unknown, false)),
            ];
            let open = [me.clone(), peers[2].clone(), peers[3].clone()];
            let want = match rendezvous(&a, &open) {
                Some(h) if h == me => Place::Here,
                Some(h) => Place::Home(h),
                None => unreachable!(),
            };
            assert_eq!(
                place(&a, &me, Holding::Unknown, false, &answers, false),
                want
            );
            // This replica draining: never here.
            let got = place(&a, &me, Holding::Unknown, true, &answers, false);
            assert!(
                matches!(&got, Place::Home(h) if *h == peers[2] || *h == peers[3]),
                "{got:?}"
            );
        }
    }
}
