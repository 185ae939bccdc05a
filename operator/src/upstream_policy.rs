//! Which upstream addresses McpServers may use, checked at admission: an McpServer whose URL
//! (or token endpoint) is a denied literal address or names the Kubernetes API server is refused
//! with the condition reason `UpstreamAddressDenied` and stays out of the snapshot. Names that
//! only resolve to a denied address are caught where the connection is made, by the gateway and
//! by this operator's probe (both resolve through the same policy), so the probe's `Ready`
//! condition says `UpstreamAddressDenied` too.
//!
//! The cluster-wide policy comes from the operator's flags and reaches the gateways in the
//! snapshot (`gateway.upstreamNetworks`); the API server's own addresses are added to its
//! `denyEndpoints` unless `--allow-api-server-upstream` is given ([`api_server_endpoints`]).
//!
//! A namespace can be narrowed further by annotations on the Namespace object (who may edit
//! Namespaces is a cluster-level permission, so tenants cannot loosen or lift it):
//! `HOSTS_ANNOTATION` lists the host names its McpServers may use, `NETWORKS_ANNOTATION` the
//! networks their addresses must be in. The policy is copied into each server's spec
//! (`upstreamPolicy`), so the gateways enforce it at connect time and on redirects too. An
//! annotation that does not parse refuses every McpServer in the namespace (reason
//! `UpstreamPolicyInvalid`): a policy that failed to read must not fail open.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;
use switchboard_snapshot::{
    NetworkPolicy, ScopedPolicy, ServerAddressPolicy, ServerSpec, UpstreamNetworks,
};

/// Namespace annotation: host names (`mcp.example.com`, `*.team-a.svc.cluster.local`, or an
/// address), comma-separated, that the namespace's McpServers may name in their URLs.
const HOSTS_ANNOTATION: &str = "switchboard.dev/upstream-hosts";
/// Namespace annotation: networks (CIDR or address), comma-separated, that every address of
/// the namespace's McpServers must be in.
const NETWORKS_ANNOTATION: &str = "switchboard.dev/upstream-networks";

/// A namespace's policy from its annotations: `Ok(None)` when it has neither; the error names
/// the annotation and the entry.
pub(crate) fn namespace_policy(
    annotations: &std::collections::BTreeMap<String, String>,
) -> Result<Option<ServerAddressPolicy>, String> {
    let list = |name: &str| -> Option<Vec<String>> {
        annotations.get(name).map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect()
        })
    };
    let (hosts, networks) = (list(HOSTS_ANNOTATION), list(NETWORKS_ANNOTATION));
    if hosts.is_none() && networks.is_none() {
        return Ok(None);
    }
    let policy = ServerAddressPolicy {
        hosts: hosts.unwrap_or_default(),
        networks: networks.unwrap_or_default(),
    };
    ScopedPolicy::parse(&policy).map_err(|errors| {
        errors
            .into_iter()
            .map(|(field, message)| {
                let annotation = if field.starts_with("hosts") {
                    HOSTS_ANNOTATION
                } else {
                    NETWORKS_ANNOTATION
                };
                let entry = field
                    .split_once('[')
                    .map_or("", |(_, rest)| rest.trim_end_matches(']'));
                format!("annotation {annotation}, entry {entry}: {message}")
            })
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    Ok(Some(policy))
}

/// The names every pod can reach the API server by, through cluster DNS.
const API_SERVER_NAMES: &[&str] = &[
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

#[derive(Debug, Clone, Default)]
pub struct UpstreamPolicy {
    networks: NetworkPolicy,
    deny_api_server: bool,
}

impl UpstreamPolicy {
    /// Errors name the flag's entry that does not parse.
    pub fn new(
        networks: &UpstreamNetworks,
        deny_api_server: bool,
    ) -> Result<UpstreamPolicy, String> {
        let networks = NetworkPolicy::parse(networks).map_err(|errors| {
            errors
                .into_iter()
                .map(|(field, message)| format!("upstream networks {field}: {message}"))
                .collect::<Vec<_>>()
                .join("; ")
        })?;
        Ok(UpstreamPolicy {
            networks,
            deny_api_server,
        })
    }

    /// Whether a server's URLs are allowed; the message names the field and the rule, never the
    /// URL (it may carry credentials).
    pub fn check(&self, spec: &ServerSpec) -> Result<(), String> {
        // (render put it there from namespace_policy, which parsed it already)
        let scoped = spec
            .upstream_policy
            .as_ref()
            .and_then(|p| ScopedPolicy::parse(p).ok());
        for (field, text) in spec.connect_urls() {
            let Ok(url) = url::Url::parse(text) else {
                continue; // reported as InvalidSpec by validation
            };
            if self.deny_api_server
                && let Some(url::Host::Domain(host)) = url.host()
                && is_api_server_name(host)
            {
                return Err(format!(
                    "spec.{field}: {host} is the Kubernetes API server, which upstreams may not \
                     use (the operator's --allow-api-server-upstream allows it)"
                ));
            }
            if let Err(denied) = self.networks.check_url(&url) {
                return Err(format!("spec.{field}: {denied}"));
            }
            if let Some(scoped) = &scoped
                && let Err(denied) = scoped.check_url(&url)
            {
                return Err(format!(
                    "spec.{field}: {} is not allowed in namespace {} ({}; the Namespace's \
                     annotations {HOSTS_ANNOTATION} and {NETWORKS_ANNOTATION} say what is)",
                    denied.address, spec.namespace, denied.rule
                ));
            }
        }
        Ok(())
    }
}

fn is_api_server_name(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    API_SERVER_NAMES.contains(&host.as_str())
}

/// Every `address:port` the API server is reached at: the `kubernetes` Service's address from
/// the pod environment, the address this operator's client uses, the address the API server
/// advertises in its discovery (`/api`, readable by any client), and with `endpoint_slices`
/// the Service's endpoints (every API server process of a control plane with several; needs
/// list on EndpointSlices in `default`). Each source that fails is skipped with a warning: the
/// others still apply.
pub async fn api_server_endpoints(
    client: &kube::Client,
    cluster_url: &axum::http::Uri,
    endpoint_slices: bool,
) -> Vec<String> {
    let mut found = BTreeSet::new();
    if let (Ok(host), Ok(port)) = (
        std::env::var("KUBERNETES_SERVICE_HOST"),
        std::env::var("KUBERNETES_SERVICE_PORT"),
    ) && let Ok(ip) = host.parse::<std::net::IpAddr>()
        && let Ok(port) = port.parse::<u16>()
    {
        found.insert(SocketAddr::new(ip, port));
    }
    if let Some(host) = cluster_url.host() {
        let port = cluster_url.port_u16().unwrap_or(443);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match tokio::net::lookup_host((host, port)).await {
            Ok(addrs) => found.extend(addrs),
            Err(e) => tracing::warn!(error = %e, "could not resolve the API server's host"),
        }
    }
    match client.list_core_api_versions().await {
        Ok(versions) => {
            for advertised in versions.server_address_by_client_cidrs {
                match advertised.server_address.parse::<SocketAddr>() {
                    Ok(addr) => {
                        found.insert(addr);
                    }
                    Err(_) => tracing::debug!(
                        address = %advertised.server_address,
                        "the API server advertises an address that is not ip:port"
                    ),
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not read the API server's discovery (/api)"),
    }
    // The `kubernetes` Service's endpoints, when the chart lets the operator read them in
    // `default` (apiServerEndpointSlices).
    if endpoint_slices {
        let slices: kube::Api<EndpointSlice> = kube::Api::namespaced(client.clone(), "default");
        match slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
            .await
        {
            Ok(list) => {
                for slice in list.items {
                    let ports: Vec<u16> = slice
                        .ports
                        .iter()
                        .flatten()
                        .filter_map(|p| p.port.and_then(|p| u16::try_from(p).ok()))
                        .collect();
                    for endpoint in slice.endpoints {
                        for address in endpoint.addresses {
                            let Ok(ip) = address.parse::<std::net::IpAddr>() else {
                                continue;
                            };
                            found.extend(ports.iter().map(|port| SocketAddr::new(ip, *port)));
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(
                error = %e,
                "could not list the API server's endpoints (EndpointSlices in default); its Service \
                 address is still denied"
            ),
        }
    }
    found.into_iter().map(|a| a.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(url: &str, token_url: Option<&str>) -> ServerSpec {
        let auth = token_url.map_or(serde_json::json!({"type": "none"}), |t| {
            serde_json::json!({"type": "oauth2ClientCredentials", "tokenUrl": t, "clientId": "c", "clientSecret": "s"})
        });
        serde_json::from_value(serde_json::json!({"name": "a", "url": url, "auth": auth})).unwrap()
    }

    #[test]
    fn metadata_api_server_names_and_endpoints_are_refused_with_the_field() {
        let networks = UpstreamNetworks {
            deny_endpoints: vec!["10.96.0.1:443".into()],
            ..UpstreamNetworks::default()
        };
        let policy = UpstreamPolicy::new(&networks, true).unwrap();
        let refused = |url: &str, token: Option<&str>| policy.check(&spec(url, token)).unwrap_err();
        assert!(
            refused("http://169.254.169.254/latest/meta-data", None)
                .starts_with("spec.url: 169.254.169.254")
        );
        assert!(
            refused("https://kubernetes.default.svc/api", None).contains("Kubernetes API server")
        );
        assert!(
            refused("https://KUBERNETES.default.svc.cluster.local./api", None)
                .contains("API server")
        );
        assert!(refused("https://10.96.0.1/api", None).contains("denyEndpoints"));
        assert!(
            refused(
                "http://tools.example/mcp",
                Some("http://169.254.169.254/token")
            )
            .starts_with("spec.auth.tokenUrl")
        );
        assert_eq!(
            policy.check(&spec("http://10.96.0.1:8080/mcp", None)),
            Ok(())
        );
        assert_eq!(
            policy.check(&spec("http://kubernetes-tools.default.svc/mcp", None)),
            Ok(())
        );
        let lenient = UpstreamPolicy::new(&UpstreamNetworks::default(), false).unwrap();
        assert_eq!(
            lenient.check(&spec("https://kubernetes.default.svc/api", None)),
            Ok(())
        );
    }

    #[test]
    fn a_namespace_policy_narrows_what_its_servers_may_use() {
        let annotations = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        assert_eq!(namespace_policy(&annotations(&[("other", "x")])), Ok(None));
        let policy = namespace_policy(&annotations(&[
            (
                HOSTS_ANNOTATION,
                " *.team-a.svc.cluster.local, mcp.example.com ,10.0.0.7,",
            ),
            (NETWORKS_ANNOTATION, "10.0.0.0/24"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(policy.hosts.len(), 3);
        let cluster = UpstreamPolicy::new(&UpstreamNetworks::default(), true).unwrap();
        let in_namespace = |url: &str| {
            let mut s = spec(url, None);
            s.namespace = "team-a".into();
            s.upstream_policy = Some(policy.clone());
            cluster.check(&s)
        };
        assert_eq!(
            in_namespace("http://tools.team-a.svc.cluster.local/mcp"),
            Ok(())
        );
        assert_eq!(in_namespace("http://10.0.0.7:8080/mcp"), Ok(()));
        let refused = in_namespace("http://tools.team-b.svc.cluster.local/mcp").unwrap_err();
        assert!(
            refused.starts_with(
                "spec.url: tools.team-b.svc.cluster.local is not allowed in namespace team-a"
            ),
            "{refused}"
        );
        assert!(refused.contains(HOSTS_ANNOTATION), "{refused}");
        // Never wider than the cluster: the metadata address stays denied.
        let mut metadata = policy.clone();
        metadata.hosts.push("169.254.169.254".into());
        metadata.networks.push("169.254.0.0/16".into());
        let mut s = spec("http://169.254.169.254/", None);
        s.upstream_policy = Some(metadata);
        assert!(
            cluster
                .check(&s)
                .unwrap_err()
                .contains("gateway.upstreamNetworks")
        );

        let bad = namespace_policy(&annotations(&[(NETWORKS_ANNOTATION, "10.0.0.0/8, ten")]))
            .unwrap_err();
        assert!(
            bad.contains(NETWORKS_ANNOTATION) && bad.contains("entry 1"),
            "{bad}"
        );
    }

    #[test]
    fn a_bad_flag_entry_is_named() {
        let networks = UpstreamNetworks {
            allow: vec!["everything".into()],
            ..UpstreamNetworks::default()
        };
        let e = UpstreamPolicy::new(&networks, true).unwrap_err();
        assert!(e.contains("allow[0]"), "{e}");
    }
}
