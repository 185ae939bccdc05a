//! Where a session with an affinity lives: of the replicas `--peers` names (each `host:port`;
//! a headless Service's name resolves to every ready pod), the one that ranks highest for the
//! affinity (rendezvous hashing). Every replica computes the same home from the same members,
//! so the gateway replicas' handshakes for one client session all reach one process, whichever
//! replica the Service picked; when the members change, only the affinities whose home left
//! or whose new member outranks it move.

use sha2::{Digest, Sha256};

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

    /// The replica that holds `affinity`'s session.
    pub async fn home(&self, affinity: &str, me: &str) -> String {
        if self.names.is_empty() {
            return me.to_string();
        }
        rendezvous(affinity, &self.members(me).await).unwrap_or_else(|| me.to_string())
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
    async fn without_peers_home_is_here_and_unresolvable_names_count_for_nothing() {
        assert_eq!(
            Peers::new(vec![])
                .home("ab".repeat(8).as_str(), "me:1")
                .await,
            "me:1"
        );
        let peers = Peers::new(vec!["127.0.0.1:9".into(), "no-such-host.invalid:80".into()]);
        let members = peers.members("127.0.0.1:8").await;
        assert_eq!(
            members,
            vec!["127.0.0.1:8".to_string(), "127.0.0.1:9".to_string()]
        );
    }
}
