//! Which addresses the gateway may connect to on behalf of a server or model: an upstream URL
//! is written by whoever may create an McpServer, so without a policy it could point the gateway
//! (which holds credentials and sits inside the cluster network) at the cloud metadata service or
//! the Kubernetes API server.
//!
//! The rule: an address is refused when it is in a `deny` network and in no `allow` network, or
//! when it is one of `denyEndpoints` (exact address and port: the operator lists the API
//! server's there, so a service on another port of the same node stays reachable). IPv4 addresses
//! written as IPv6 (`::ffff:169.254.169.254`) are checked as IPv4.
//!
//! The same policy is checked three times: when a config or snapshot is validated (literal
//! addresses in URLs), when the gateway connects (every address a name resolves to) and on every
//! redirect the gateway would follow.
//!
//! A server may carry its own, narrower policy ([`ServerAddressPolicy`], `servers[].upstreamPolicy`;
//! the operator fills it from the annotations of the McpServer's namespace): the hosts its URLs
//! may name and the networks its addresses must be in. It only ever narrows the gateway-wide
//! policy, checked at the same three points.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::names::is_dns_label;

/// Link-local (where every cloud's metadata service lives: 169.254.169.254, fd00:ec2::254 on
/// AWS over IPv6) and Alibaba Cloud's metadata address.
pub const DEFAULT_DENIED_NETWORKS: &[&str] = &[
    "169.254.0.0/16",
    "fe80::/10",
    "fd00:ec2::254/128",
    "100.100.100.200/32",
];

/// `gateway.upstreamNetworks` as written in a config file or rendered by the operator.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamNetworks {
    /// Networks (CIDR, or a single address) upstreams must not be in.
    #[serde(default = "default_denied")]
    pub deny: Vec<String>,
    /// Exceptions: networks allowed although a `deny` network holds them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Exact `address:port` pairs that are always refused (`allow` does not lift them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_endpoints: Vec<String>,
}

fn default_denied() -> Vec<String> {
    DEFAULT_DENIED_NETWORKS
        .iter()
        .map(|s| s.to_string())
        .collect()
}

impl Default for UpstreamNetworks {
    fn default() -> Self {
        UpstreamNetworks {
            deny: default_denied(),
            allow: Vec::new(),
            deny_endpoints: Vec::new(),
        }
    }
}

/// The parsed policy, cheap to check per connection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetworkPolicy {
    deny: Vec<IpNet>,
    allow: Vec<IpNet>,
    deny_endpoints: Vec<SocketAddr>,
}

/// Why an address was refused; says which rule, never the URL (it may carry credentials).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{address} is denied by {policy} ({rule})")]
pub struct Denied {
    pub address: String,
    pub rule: String,
    /// Which policy: `gateway.upstreamNetworks` or the server's `upstreamPolicy`.
    pub policy: &'static str,
}

const GATEWAY_POLICY: &str = "gateway.upstreamNetworks";
const SERVER_POLICY: &str = "the server's upstreamPolicy";

impl NetworkPolicy {
    /// Parses the written policy; errors are `(field, message)` with the field relative to
    /// `upstreamNetworks` (e.g. `deny[2]`).
    pub fn parse(networks: &UpstreamNetworks) -> Result<NetworkPolicy, Vec<(String, String)>> {
        let mut errors = Vec::new();
        let deny = parse_nets(&networks.deny, "deny", &mut errors);
        let allow = parse_nets(&networks.allow, "allow", &mut errors);
        let deny_endpoints = networks
            .deny_endpoints
            .iter()
            .enumerate()
            .filter_map(|(i, text)| match text.parse::<SocketAddr>() {
                Ok(addr) => Some(canonical_socket(addr)),
                Err(_) => {
                    errors.push((
                        format!("denyEndpoints[{i}]"),
                        format!("{text:?} is not an address:port (IPv6 as [addr]:port)"),
                    ));
                    None
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(NetworkPolicy {
                deny,
                allow,
                deny_endpoints,
            })
        } else {
            Err(errors)
        }
    }

    /// Whether the gateway may connect to `addr`.
    pub fn check(&self, addr: SocketAddr) -> Result<(), Denied> {
        let addr = canonical_socket(addr);
        if self.deny_endpoints.contains(&addr) {
            return Err(Denied {
                address: addr.to_string(),
                rule: "denyEndpoints".into(),
                policy: GATEWAY_POLICY,
            });
        }
        let ip = addr.ip();
        match self.deny.iter().find(|net| net.contains(&ip)) {
            Some(net) if !self.allow.iter().any(|a| a.contains(&ip)) => Err(Denied {
                address: ip.to_string(),
                rule: format!("deny {net}"),
                policy: GATEWAY_POLICY,
            }),
            _ => Ok(()),
        }
    }

    /// Whether the gateway may connect to `ip` on any port: what a resolver can check, since it
    /// sees no port (an address in `denyEndpoints` is refused on every port).
    pub fn check_any_port(&self, ip: IpAddr) -> Result<(), Denied> {
        let ip = ip.to_canonical();
        if let Some(endpoint) = self.deny_endpoints.iter().find(|e| e.ip() == ip) {
            return Err(Denied {
                address: ip.to_string(),
                rule: format!("denyEndpoints {endpoint}"),
                policy: GATEWAY_POLICY,
            });
        }
        self.check(SocketAddr::new(ip, 0))
    }

    /// Checks a URL whose host is a literal address (names are checked when they resolve).
    pub fn check_url(&self, url: &url::Url) -> Result<(), Denied> {
        let ip = match url.host() {
            Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
            Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
            _ => return Ok(()),
        };
        let port = url.port_or_known_default().unwrap_or(80);
        self.check(SocketAddr::new(ip, port))
    }
}

/// `servers[].upstreamPolicy`: what one server may reach, within the gateway-wide policy.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerAddressPolicy {
    /// Host names the server's URLs (its token endpoint's and every redirect's included) may
    /// name: exact (`mcp.example.com`), a wildcard for subdomains (`*.team-a.svc.cluster.local`),
    /// or a literal address. Empty: any host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Networks (CIDR, or a single address) every address the server is reached at must be in.
    /// Empty: any address the gateway-wide policy allows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<String>,
}

/// A parsed [`ServerAddressPolicy`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScopedPolicy {
    hosts: Vec<HostPattern>,
    networks: Vec<IpNet>,
}

#[derive(Debug, Clone, PartialEq)]
enum HostPattern {
    Exact(String),
    /// `*.suffix`: any name ending in `.suffix` (not `suffix` itself).
    Subdomains(String),
    Address(IpAddr),
}

impl HostPattern {
    fn parse(text: &str) -> Option<HostPattern> {
        let text = text.trim().trim_end_matches('.').to_ascii_lowercase();
        if let Ok(ip) = text.trim_matches(['[', ']']).parse::<IpAddr>() {
            return Some(HostPattern::Address(ip.to_canonical()));
        }
        let (wildcard, name) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest.to_string()),
            None => (false, text),
        };
        // (lower-cased above, so a DNS-1123 label check is a host-name label check)
        if !name.split('.').all(is_dns_label) {
            return None;
        }
        Some(if wildcard {
            HostPattern::Subdomains(name)
        } else {
            HostPattern::Exact(name)
        })
    }

    fn admits(&self, host: &url::Host<&str>) -> bool {
        match (self, host) {
            (HostPattern::Address(a), url::Host::Ipv4(ip)) => *a == IpAddr::V4(*ip),
            (HostPattern::Address(a), url::Host::Ipv6(ip)) => *a == IpAddr::V6(*ip).to_canonical(),
            (HostPattern::Exact(name), url::Host::Domain(d)) => {
                d.trim_end_matches('.').eq_ignore_ascii_case(name)
            }
            (HostPattern::Subdomains(suffix), url::Host::Domain(d)) => {
                let d = d.trim_end_matches('.').to_ascii_lowercase();
                d.len() > suffix.len() + 1
                    && d.ends_with(suffix.as_str())
                    && d.as_bytes()[d.len() - suffix.len() - 1] == b'.'
            }
            _ => false,
        }
    }
}

impl ScopedPolicy {
    /// Parses the written policy; errors are `(field, message)` relative to `upstreamPolicy`.
    pub fn parse(policy: &ServerAddressPolicy) -> Result<ScopedPolicy, Vec<(String, String)>> {
        let mut errors = Vec::new();
        let hosts = policy
            .hosts
            .iter()
            .enumerate()
            .filter_map(|(i, text)| {
                let parsed = HostPattern::parse(text);
                if parsed.is_none() {
                    errors.push((
                        format!("hosts[{i}]"),
                        format!("{text:?} is not a host name, *.domain wildcard or address"),
                    ));
                }
                parsed
            })
            .collect();
        let networks = parse_nets(&policy.networks, "networks", &mut errors);
        if errors.is_empty() {
            Ok(ScopedPolicy { hosts, networks })
        } else {
            Err(errors)
        }
    }

    /// Whether the server may be reached at `ip` (any port).
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Denied> {
        let ip = ip.to_canonical();
        if self.networks.is_empty() || self.networks.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        Err(Denied {
            address: ip.to_string(),
            rule: "not in its networks".into(),
            policy: SERVER_POLICY,
        })
    }

    /// Whether a URL's host is one the server may name, and a literal address one it may use.
    pub fn check_url(&self, url: &url::Url) -> Result<(), Denied> {
        let Some(host) = url.host() else {
            return Ok(()); // (URLs without a host are refused by validation)
        };
        if !self.hosts.is_empty() && !self.hosts.iter().any(|p| p.admits(&host)) {
            return Err(Denied {
                address: host.to_string(),
                rule: "not one of its hosts".into(),
                policy: SERVER_POLICY,
            });
        }
        match host {
            url::Host::Ipv4(ip) => self.check_ip(IpAddr::V4(ip)),
            url::Host::Ipv6(ip) => self.check_ip(IpAddr::V6(ip)),
            url::Host::Domain(_) => Ok(()),
        }
    }
}

/// Parses a list of networks; an entry that is none is reported as `(field[i], message)`.
fn parse_nets(list: &[String], field: &str, errors: &mut Vec<(String, String)>) -> Vec<IpNet> {
    list.iter()
        .enumerate()
        .filter_map(|(i, text)| {
            let parsed = parse_net(text);
            if parsed.is_none() {
                errors.push((
                    format!("{field}[{i}]"),
                    format!("{text:?} is not a network (CIDR such as 10.0.0.0/8) or an address"),
                ));
            }
            parsed
        })
        .collect()
}

fn parse_net(text: &str) -> Option<IpNet> {
    let text = text.trim();
    text.parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
        .map(|net| match net {
            // `::ffff:a.b.c.d/120` means the IPv4 network; addresses are compared as IPv4.
            IpNet::V6(v6) => match v6.addr().to_ipv4_mapped() {
                Some(v4) if v6.prefix_len() >= 96 => {
                    IpNet::new(IpAddr::V4(v4), v6.prefix_len() - 96).unwrap_or(net)
                }
                _ => net,
            },
            v4 => v4,
        })
        .map(|net| net.trunc())
}

fn canonical_socket(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(deny: &[&str], allow: &[&str], endpoints: &[&str]) -> NetworkPolicy {
        let strings = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        NetworkPolicy::parse(&UpstreamNetworks {
            deny: strings(deny),
            allow: strings(allow),
            deny_endpoints: strings(endpoints),
        })
        .unwrap()
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn defaults_deny_metadata_addresses_in_every_spelling() {
        let p = NetworkPolicy::parse(&UpstreamNetworks::default()).unwrap();
        for denied in [
            "169.254.169.254:80",
            "[::ffff:169.254.169.254]:80",
            "[fd00:ec2::254]:80",
            "[fe80::1]:443",
            "100.100.100.200:80",
        ] {
            assert!(p.check(addr(denied)).is_err(), "{denied} passed");
        }
        for allowed in ["10.0.0.1:80", "127.0.0.1:8080", "[::1]:80", "8.8.8.8:443"] {
            assert_eq!(p.check(addr(allowed)), Ok(()), "{allowed}");
        }
        let url = url::Url::parse("http://[::ffff:a9fe:a9fe]/latest/meta-data").unwrap();
        assert!(p.check_url(&url).is_err());
        let named = url::Url::parse("http://metadata.google.internal/").unwrap();
        assert_eq!(
            p.check_url(&named),
            Ok(()),
            "names are checked when resolved"
        );
    }

    #[test]
    fn allow_carves_out_of_deny_but_not_out_of_endpoints() {
        let p = policy(&["10.0.0.0/8"], &["10.1.0.0/16"], &["10.1.0.1:6443"]);
        assert!(p.check(addr("10.2.0.1:80")).is_err());
        assert_eq!(p.check(addr("10.1.2.3:80")), Ok(()));
        let e = p.check(addr("10.1.0.1:6443")).unwrap_err();
        assert_eq!(e.rule, "denyEndpoints");
        assert_eq!(
            p.check(addr("10.1.0.1:8080")),
            Ok(()),
            "other ports stay open"
        );
        assert!(
            p.check_any_port("10.1.0.1".parse().unwrap()).is_err(),
            "by name: any port"
        );
        let https = url::Url::parse("https://10.1.0.1:6443/api").unwrap();
        assert!(p.check_url(&https).is_err());
    }

    fn scoped(hosts: &[&str], networks: &[&str]) -> ScopedPolicy {
        let strings = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        ScopedPolicy::parse(&ServerAddressPolicy {
            hosts: strings(hosts),
            networks: strings(networks),
        })
        .unwrap()
    }

    fn url(text: &str) -> url::Url {
        url::Url::parse(text).unwrap()
    }

    #[test]
    fn a_server_policy_admits_only_its_hosts_and_networks() {
        let p = scoped(
            &["mcp.example.com", "*.team-a.svc", "10.9.0.1"],
            &["10.9.0.0/16"],
        );
        for allowed in [
            "http://mcp.example.com/mcp",
            "http://MCP.example.com./mcp",
            "http://tools.team-a.svc:8080/mcp",
            "http://a.b.team-a.svc/mcp",
            "http://10.9.0.1/mcp",
        ] {
            assert_eq!(p.check_url(&url(allowed)), Ok(()), "{allowed}");
        }
        for denied in [
            "http://team-a.svc/mcp",           // the wildcard is for subdomains
            "http://evil-team-a.svc/mcp",      // not a label boundary
            "http://mcp.example.com.evil/mcp", // suffix of another name
            "http://kubernetes.default.svc/",
            "http://10.9.0.2/mcp", // in the networks, but not a listed host
        ] {
            let e = p.check_url(&url(denied)).unwrap_err();
            assert_eq!(e.policy, SERVER_POLICY, "{denied}");
        }
        assert_eq!(p.check_ip("10.9.3.4".parse().unwrap()), Ok(()));
        assert_eq!(p.check_ip("::ffff:10.9.3.4".parse().unwrap()), Ok(()));
        assert!(p.check_ip("10.8.0.1".parse().unwrap()).is_err());

        let networks_only = scoped(&[], &["10.9.0.0/16"]);
        assert_eq!(
            networks_only.check_url(&url("http://anything.example/")),
            Ok(())
        );
        assert!(
            networks_only
                .check_url(&url("http://192.168.1.1/"))
                .is_err()
        );
        assert_eq!(
            ScopedPolicy::default().check_url(&url("http://1.2.3.4/")),
            Ok(())
        );
    }

    #[test]
    fn bad_server_policy_entries_name_their_field() {
        let errors = ScopedPolicy::parse(&ServerAddressPolicy {
            hosts: vec!["ok.example".into(), "bad host".into(), "*.".into()],
            networks: vec!["10.0.0.0/33".into()],
        })
        .unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(fields, ["hosts[1]", "hosts[2]", "networks[0]"]);
    }

    #[test]
    fn bad_entries_name_their_field() {
        let errors = NetworkPolicy::parse(&UpstreamNetworks {
            deny: vec!["10.0.0.0/8".into(), "ten".into()],
            allow: vec!["1.2.3.4/40".into()],
            deny_endpoints: vec!["10.0.0.1".into()],
        })
        .unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(fields, ["deny[1]", "allow[0]", "denyEndpoints[0]"]);
    }
}
