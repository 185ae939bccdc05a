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

use std::collections::BTreeSet;
use std::net::SocketAddr;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;
use switchboard_snapshot::{NetworkPolicy, ServerSpec, UpstreamNetworks};

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
        }
        Ok(())
    }
}

fn is_api_server_name(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    API_SERVER_NAMES.contains(&host.as_str())
}

/// Every `address:port` the API server is reached at: the `kubernetes` Service's address from
/// the pod environment, the address this operator's client uses, and the Service's endpoints
/// (the API server processes themselves). Each source that fails is skipped with a warning:
/// the others still apply.
pub async fn api_server_endpoints(
    client: &kube::Client,
    cluster_url: &axum::http::Uri,
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
    fn a_bad_flag_entry_is_named() {
        let networks = UpstreamNetworks {
            allow: vec!["everything".into()],
            ..UpstreamNetworks::default()
        };
        let e = UpstreamPolicy::new(&networks, true).unwrap_err();
        assert!(e.contains("allow[0]"), "{e}");
    }
}
