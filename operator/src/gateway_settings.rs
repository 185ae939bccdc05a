//! `--gateway-settings FILE`: the gateway settings a Kubernetes install gives every replica, in
//! the standalone file's own shape (a document with one `gateway:` section, the same fields,
//! checked by the same validation), so a setting has one name and one meaning in both modes.
//! The chart renders `gateway.settings` values into it.
//!
//! Three fields are the operator's, not the file's: `sessionKey` (kept in the snapshot Secret,
//! one for every replica), `serviceAccountTokens` (read from the API server) and
//! `upstreamNetworks` (the operator's own admission uses them: `--upstream-*` flags).

use switchboard_snapshot::{GatewaySettings, SecretLookup};

/// Fields the file may not set, and what sets them instead (the chart's values schema leaves
/// them out of `gateway.settings`, so Helm refuses them too).
pub(crate) const OPERATOR_OWNED: [(&str, &str); 3] = [
    (
        "sessionKey",
        "the operator keeps one in its snapshot Secret",
    ),
    (
        "serviceAccountTokens",
        "the operator reads the issuer's keys from the API server",
    ),
    (
        "upstreamNetworks",
        "set --upstream-deny-networks / --upstream-allow-networks (chart operator.upstreamNetworks)",
    ),
];

/// The settings in `text` (named `path` in messages), validated as the gateway validates a
/// standalone file's; every problem names its field.
pub fn parse(text: &str, path: &str, lookup: &dyn SecretLookup) -> Result<GatewaySettings, String> {
    let raw: serde_json::Value = serde_saphyr::from_str(text)
        .map_err(|e| format!("{path}: not YAML: {}", e.without_snippet()))?;
    let Some(top) = raw.as_object() else {
        return Err(format!("{path}: must be a mapping with one key, gateway"));
    };
    if let Some(other) = top.keys().find(|k| *k != "gateway") {
        return Err(format!(
            "{path}: {other}: only the gateway section belongs here (servers, keys and models are resources)"
        ));
    }
    if let Some(gateway) = top.get("gateway").and_then(|g| g.as_object())
        && let Some((field, why)) = OPERATOR_OWNED
            .iter()
            .find(|(f, _)| gateway.contains_key(*f))
    {
        return Err(format!("{path}: gateway.{field} cannot be set here: {why}"));
    }
    // Checked as part of the snapshot the operator sends, which always carries the session key
    // of its Secret (rules such as a shared store's sealing key lean on it): a stand-in here,
    // never kept.
    let mut checked = raw.clone();
    if let Some(gateway) = checked.get_mut("gateway").and_then(|g| g.as_object_mut()) {
        gateway.insert(
            "sessionKey".into(),
            "a stand-in for the operator's session key".into(),
        );
    }
    let mut snapshot = switchboard_snapshot::load(&checked.to_string(), lookup)
        .map_err(|e| format!("{path}: {e}"))?;
    snapshot.gateway.session_key = None;
    Ok(snapshot.gateway)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoSecrets;
    impl SecretLookup for NoSecrets {
        fn env(&self, _: &str) -> Option<String> {
            None
        }
        fn file(&self, _: &str) -> std::io::Result<String> {
            Err(std::io::Error::other("no files"))
        }
    }

    #[test]
    fn the_standalone_files_gateway_section_is_read_and_checked_by_field() {
        let text = "gateway:\n  maxBodyBytes: 2048\n  sessionTtl: 90s\n  listingTtl: 5s\n  listingPageCap: 7\n  allowedOrigins: [https://app.example]\n";
        let s = parse(text, "settings.yaml", &NoSecrets).expect("valid");
        assert_eq!(s.max_body_bytes, 2048);
        assert_eq!(s.session_ttl, std::time::Duration::from_secs(90));
        assert_eq!(s.listing_ttl, std::time::Duration::from_secs(5));
        assert_eq!(s.listing_page_cap, 7);
        assert_eq!(s.allowed_origins, ["https://app.example"]);

        let refused = |text: &str| parse(text, "settings.yaml", &NoSecrets).expect_err(text);
        let e = refused("gateway:\n  maxBodyByte: 1\n");
        assert!(e.contains("maxBodyByte"), "{e}");
        let e = refused("gateway:\n  sessionTtl: soon\n");
        assert!(e.contains("gateway.sessionTtl"), "{e}");
        let e = refused("gateway:\n  sessionKey: x\n");
        assert!(e.contains("gateway.sessionKey cannot be set here"), "{e}");
        let e = refused("gateway:\n  upstreamNetworks: {deny: []}\n");
        assert!(e.contains("--upstream-deny-networks"), "{e}");
        let e = refused("servers: []\ngateway: {}\n");
        assert!(e.contains("servers: only the gateway section"), "{e}");
    }

    /// What the chart renders from gateway.store: a shared Redis whose sealing key comes from
    /// the operator's session key (not in this file), the password from a mounted file.
    #[test]
    fn a_shared_store_is_read_without_a_session_key_of_its_own() {
        struct Mounted;
        impl SecretLookup for Mounted {
            fn env(&self, _: &str) -> Option<String> {
                None
            }
            fn file(&self, path: &str) -> std::io::Result<String> {
                assert_eq!(path, "/etc/switchboard/redis/password");
                Ok("the redis password".into())
            }
        }
        let text = "gateway:\n  store:\n    redis:\n      url: redis://sb-demo-redis.sb.svc:6379/0\n      password: {file: /etc/switchboard/redis/password}\n";
        let s = parse(text, "settings.yaml", &Mounted).expect("valid");
        let redis = s.store.redis.as_ref().expect("redis");
        assert_eq!(redis.url, "redis://sb-demo-redis.sb.svc:6379/0");
        assert_eq!(
            redis
                .password
                .as_ref()
                .and_then(switchboard_snapshot::resolved_value),
            Some("the redis password")
        );
        assert!(s.session_key.is_none(), "the stand-in is never kept");
        let e = parse(
            "gateway:\n  store:\n    redis: {url: 'redis://:pw@h:6379'}\n",
            "settings.yaml",
            &Mounted,
        )
        .expect_err("a password in the URL");
        assert!(e.contains("gateway.store.redis.url"), "{e}");
    }
}
