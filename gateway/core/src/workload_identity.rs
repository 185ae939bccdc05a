//! Kubernetes ServiceAccount tokens in place of keys: a workload presents its projected token
//! (audience e.g. `switchboard`) and gets the scope of the key that binds its ServiceAccount.
//!
//! Tokens are verified offline: the signature against the issuer's public keys (the JWKS the
//! snapshot carries, which the operator keeps current), the issuer, an accepted audience, and the
//! expiry. No call to the API server per request or per token: a token the cluster has just
//! issued is accepted on any replica at once, and the API server's availability is not on the
//! request path. (The alternative, a cached TokenReview, costs an API round trip per new token;
//! docs/architecture.md, "Workload identity", has the figures.)

use std::collections::HashMap;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde::Deserialize;
use switchboard_snapshot::ServiceAccountTokens;

/// A verified token's ServiceAccount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccount {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why a token was refused: each a 401 with this reason (logged; the client gets it too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Malformed,
    UnknownSigningKey,
    BadSignature,
    Expired,
    NotYetValid,
    WrongAudience,
    WrongIssuer,
    NotAServiceAccount,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Malformed => "the ServiceAccount token is not a well-formed JWT",
            Refusal::UnknownSigningKey => {
                "the ServiceAccount token is signed with a key the cluster's issuer does not publish"
            }
            Refusal::BadSignature => "the ServiceAccount token's signature does not verify",
            Refusal::Expired => "the ServiceAccount token has expired",
            Refusal::NotYetValid => "the ServiceAccount token is not valid yet",
            Refusal::WrongAudience => {
                "the ServiceAccount token is not for this audience (request one with --audience switchboard)"
            }
            Refusal::WrongIssuer => "the ServiceAccount token was issued by another cluster",
            Refusal::NotAServiceAccount => "the token does not name a ServiceAccount",
        }
    }
}

/// Verifies tokens against one issuer's keys.
pub struct TokenVerifier {
    issuer: String,
    audiences: Vec<String>,
    /// By key id; keys without one are tried in turn.
    keys: Vec<(Option<String>, Algorithm, DecodingKey)>,
    /// Tokens verified lately (by SHA-256), with their expiry: a workload sends the same token
    /// for minutes, and a signature check costs more than the rest of a request.
    verified: moka::sync::Cache<[u8; 32], (ServiceAccount, u64)>,
}

/// Most verified tokens remembered, and for how long at most (never past a token's expiry).
const VERIFIED_CAPACITY: u64 = 10_000;
const VERIFIED_FOR: std::time::Duration = std::time::Duration::from_secs(60);

impl std::fmt::Debug for TokenVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenVerifier")
            .field("issuer", &self.issuer)
            .field("keys", &self.keys.len())
            .finish()
    }
}

#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    sub: String,
    exp: u64,
    #[serde(rename = "kubernetes.io", default)]
    kubernetes: Option<KubernetesClaims>,
}

#[derive(Deserialize)]
struct KubernetesClaims {
    namespace: String,
    serviceaccount: NamedClaim,
}

#[derive(Deserialize)]
struct NamedClaim {
    name: String,
}

/// Clock skew allowed between the issuer and this replica.
const LEEWAY_SECONDS: u64 = 30;

impl TokenVerifier {
    /// The verifier of a snapshot's settings; an error names the key set's problem.
    pub fn new(settings: &ServiceAccountTokens) -> Result<TokenVerifier, String> {
        let set: JwkSet = serde_json::from_value(settings.jwks.clone())
            .map_err(|e| format!("not a JSON Web Key Set: {e}"))?;
        let mut keys = Vec::new();
        for (i, jwk) in set.keys.iter().enumerate() {
            let algorithm = match (&jwk.common.key_algorithm, &jwk.algorithm) {
                (Some(alg), _) => alg.to_string().parse::<Algorithm>().ok(),
                (None, AlgorithmParameters::RSA(_)) => Some(Algorithm::RS256),
                (None, AlgorithmParameters::EllipticCurve(ec)) => match ec.curve {
                    EllipticCurve::P256 => Some(Algorithm::ES256),
                    EllipticCurve::P384 => Some(Algorithm::ES384),
                    _ => None,
                },
                _ => None,
            };
            let Some(algorithm) = algorithm else {
                return Err(format!(
                    "keys[{i}]: an algorithm this gateway cannot verify"
                ));
            };
            let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("keys[{i}]: {e}"))?;
            keys.push((jwk.common.key_id.clone(), algorithm, key));
        }
        Ok(TokenVerifier {
            issuer: settings.issuer.clone(),
            audiences: settings.audiences.clone(),
            keys,
            verified: moka::sync::Cache::builder()
                .max_capacity(VERIFIED_CAPACITY)
                .time_to_live(VERIFIED_FOR)
                .build(),
        })
    }

    /// The ServiceAccount a token proves, or why it proves none.
    pub fn verify(&self, token: &str) -> Result<ServiceAccount, Refusal> {
        use sha2::{Digest, Sha256};
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if let Some((account, exp)) = self.verified.get(&digest)
            && now < exp
        {
            return Ok(account);
        }
        let (account, exp) = self.verify_signed(token)?;
        self.verified.insert(digest, (account.clone(), exp));
        Ok(account)
    }

    fn verify_signed(&self, token: &str) -> Result<(ServiceAccount, u64), Refusal> {
        let header = decode_header(token).map_err(|_| Refusal::Malformed)?;
        let candidates = self.keys.iter().filter(|(kid, alg, _)| {
            *alg == header.alg && (header.kid.is_none() || kid.is_none() || *kid == header.kid)
        });
        let mut outcome = Err(Refusal::UnknownSigningKey);
        for (_, alg, key) in candidates {
            let mut validation = Validation::new(*alg);
            validation.set_issuer(&[&self.issuer]);
            validation.set_audience(&self.audiences);
            validation.leeway = LEEWAY_SECONDS;
            validation.validate_nbf = true;
            match decode::<Claims>(token, key, &validation) {
                Ok(data) => return service_account(&data.claims).map(|a| (a, data.claims.exp)),
                Err(e) => {
                    outcome = Err(refusal(e.kind()));
                    if outcome != Err(Refusal::BadSignature) {
                        // The signature verified: another key would not change the verdict.
                        return outcome;
                    }
                }
            }
        }
        outcome
    }
}

fn refusal(kind: &jsonwebtoken::errors::ErrorKind) -> Refusal {
    use jsonwebtoken::errors::ErrorKind;
    match kind {
        ErrorKind::ExpiredSignature => Refusal::Expired,
        ErrorKind::ImmatureSignature => Refusal::NotYetValid,
        ErrorKind::InvalidAudience => Refusal::WrongAudience,
        ErrorKind::InvalidIssuer => Refusal::WrongIssuer,
        ErrorKind::InvalidSignature => Refusal::BadSignature,
        _ => Refusal::Malformed,
    }
}

/// The ServiceAccount of verified claims: the `kubernetes.io` claim, else the subject
/// `system:serviceaccount:<namespace>:<name>`.
fn service_account(claims: &Claims) -> Result<ServiceAccount, Refusal> {
    if let Some(k) = &claims.kubernetes {
        return Ok(ServiceAccount {
            namespace: k.namespace.clone(),
            name: k.serviceaccount.name.clone(),
        });
    }
    let rest = claims
        .sub
        .strip_prefix("system:serviceaccount:")
        .ok_or(Refusal::NotAServiceAccount)?;
    let (namespace, name) = rest.split_once(':').ok_or(Refusal::NotAServiceAccount)?;
    Ok(ServiceAccount {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}

/// Whether a presented credential has the shape of a JWT (three base64url parts), so that a
/// plain key is never parsed as one.
pub fn looks_like_jwt(presented: &str) -> bool {
    presented.len() > 20
        && presented.split('.').count() == 3
        && presented
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Which key a ServiceAccount's token stands for: an exact binding, else its namespace's `*`.
#[derive(Debug)]
pub struct Bindings<K> {
    by_account: HashMap<String, K>,
}

impl<K> Default for Bindings<K> {
    fn default() -> Self {
        Bindings {
            by_account: HashMap::new(),
        }
    }
}

impl<K: Clone> Bindings<K> {
    pub fn bind(&mut self, account: &str, key: K) {
        self.by_account.insert(account.to_string(), key);
    }

    pub fn lookup(&self, account: &ServiceAccount) -> Option<K> {
        self.by_account
            .get(&account.to_string())
            .or_else(|| self.by_account.get(&format!("{}/*", account.namespace)))
            .cloned()
    }

    pub fn is_empty(&self) -> bool {
        self.by_account.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    const KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDB5QL/wURjlQHE\ni4Aow7bxDli2e19wPecQgclADyJLvtXdCodkhRDlLua4YR+nduofWwTr3vKiF4FJ\n9ryiITWelS+BiY94eK4gRvloX+81FcugMVTc9srv269RXTrsDgbF49CBhbBJmwFz\nuinAOOSWpPhrXdYg6Sj/i/D6uRdzuPGXA7mvNElh6dVhHVjgzCOtuRPLAYeCVHNu\nPbbQyDcpKj4bZMx7trE0kQl4XiuaJAytVzEuQlQOo/LbPUN5jfanMIaUv8ADfHa+\nu/qWMTc/jqrWZY3zU2D+5lbhb49mEcB+YN4BXS9q03lXuhs96qLAt7V9wFSPpKK8\nn3IyIRTbAgMBAAECggEAFTwpF2yJumRD1Mw4ZX6FxyG8moOpgKfu6fJk4ZSmu2fz\nkSlJibs/DfKUhyXv6w3Nd1CnGdQJe7IaUUjqANGlRzBsiwHPSjDhVRygzQsQrh4s\ndmdgtXB76kgDi+Qrg1XH7R1VpRHIrE8DGjMNxoUUl+EKaevVezY97LrdUgA6bsxl\n8hrepVMdbR5jQg4MuQDNDtl9mnrAnhuSy/7ThN+Y1TJRMjiuWACb5GF1iv0kTveY\nfQD/IE165NCWE8gI2vYN1EZCfU+IMsr0/d0rWdhrdGpudWb3X+YBUAu++fmCSiBI\nAMH4AQuiqptQF2GlELeHfhEzazF8OrCQD8QiwfxESQKBgQD2H315fXP+3e3IoS0h\nmQ2pu3xV8NheuDbBU1u5aqb0gnOROuhNHtgVYWWlMaFFNBwLJKNPNf/nydY8qJsx\nMVhmwNWeqor6XIX/lWN4eOXrWrwToiZffTqYeZVpDRSvNGjCs7KsHvyg2eyNRERd\nfjN2vJ+VMawBdg0SFR990B032QKBgQDJrPXO6LIfUIGAmShGS09V8+4CI0P1qnRn\n2AVDlaJeGrcW3CzMGAQdxyxAHKBbFE3BIjbLOKuZEuf3a23HWIe18d9UAFGk6odD\nbtHAKBwCViQKbqwLkOMUPXHrkxpKjFdKnfkM81mF31o1b6aWzjFlNGFnkEvFkSfC\nAXZ78ulV0wKBgQC6O/2/zjPVaKyioYL650s1Yc6lYQb4NUAJbT/8vzzxyzwTapWY\ntXwgQYCeTT2QleuaavC/4UZwZ4OahqJXyNTxe3ypALcE1rn2OV35LNIdEp055fpP\nSvzpnyZ1RRaftHKI0VyjbRcPx5Z9Fmj8rZ/XesbuJ5XVzTP6uM0JcE6LkQKBgHIb\nAhjHX8CH9D2majsbcQ/Yq9lZyqG8h5AZkSDkELHdu6mbeV0gWXPftRGxIKlnm3ai\nvQ3OSoiZQdWjWsFnPaGb8Be+9nKwn0dv9A0cpHxN8KZWZ9FDcLeK7GG1ITL8pIb7\nSmYhaY1tCcUiHsdEcn4oXNQTuEtYDX6fBUKr9YkxAoGAVo8u9Hcl/L9EG5SLuiOB\nalkUOf5BaQDrjOLgEOTN0gVp8tRqf6inbQ/3ZEiIqr9rJ2TpJJu/qmrranIqhG71\ns7SrnSl5lXZMrBkR+Bnvne+Omv3IOhsFatmeBCF6FENKWcR1iG87dJ7T7jdm/2N3\nLin5cEHvCU3085scwjQJLV0=\n-----END PRIVATE KEY-----";
    const OTHER_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQDJyjROsLBa2ZwK\n+0Nlhvuax30wR8fwB2Owjse9g8OLRlQI0FOz3hEN4xUw2WMRpBXaurzSo+qo0BPT\no0/9hZX7MEZARKovwyogPDu8mbMBiIeh4VegdK+iFKUl5kWhXpL2Lf9B0uwKHxtg\nKvzJ1LvIxbC601HN5VTx2Rio2igjroK4mcz2ncDgFdHF2MJ2/KXENPkw+SE/qmXr\nhMooGij4BoWakTxIc5S3cSkEYu6Ry/9PfJv8bRY3rB5kviKjQUyII78DTZenUf1I\nCuNsTBTh9oSxQjbOgBNZh745qW8aPSE9oKul4SSql4bYX1o2DxNs4S37DZy4d4gD\nqcmd/VeJAgMBAAECggEADTbbNp9q6IOTmmfswakDQrquLXk4L35aGcDyLCxgf0Bg\nDZBG74cGdAYSDOW9M/WukLJTlOjXpNJrfoledaEjTPAJya+jKOKyGGG9+NuI+kUD\ncV4dPgxvR2WjR4861l/e096KG0rT2tSvO675jS8wVOwWZvx998YPbtp1hGAQWEgC\nn5okFwLaYubCSwNyt0Jq7kcwzj2i4EUZYFhuUjrpYmBi9No4mGBgofLpBX6TY2xN\noH9dIvzdwPnzXg0LmcSUrkzdVBxi29tDVU8BJ73KoacWVkdCZNiHV18rxyZSFSow\nAb8l9nTy/N1j2gphf/JOsBQZsloPxt3WCLHSP34tuQKBgQDxiSFO7HcK4vHLSiCG\nBgCEVGxbQdawozsVWB5xCnukia+Ievewl14N96SeEEFjAoSPYRKHtC3gDU23hdAJ\ni7qdy3avhL3QYDgzLnHM3jjRMzV8hgrT1TId+12zjTSQ+KkFlv8hXzXts3RX8t3L\nAF9wtiwLlbql0YI9B5ni8zXEZwKBgQDV37/8/bAT6MqdnYxMgS0VT9I3LtBuc8Ws\nuawh+hRf0HxnRwAtIv3G0+cWtu/y9V3nuoLUhWnTU5zpUP1wtiqxXDTuThMnmzMh\nGn+Hwotx75WomLTVK+I4P+8OXq8uzvS40tbeDEbh++dnyQfd+qTt0Lxsz9JrgTxX\nfxiJYbEOjwKBgQCaWhDQF+sHKPpt+EQKgeFor27DbrKdFOMYA8UIZjOXdWmYZUTO\nNB0l/eDUJf0zIZPG8LjfwfQjHz1QD5Jf10x9tF13UvPeKu8fPgn5avWSMxB2ME7R\nCohJgq5hpNY34sBY0yLdl7Ol4K1z2r+EEAvtwm0pRhkOCHIbQDVGRDhS9wKBgBb6\nSAUlOEKbUxFl+MnLYw2UGtCk7e2/8G/jLtQjqwa0PnlWDnXK+Zrf70bodpUSuXkI\n979fagQzSntioSf32lRdxK4Jo1MxAGhBEYyDYTnndJu9dEgmw9IpRES19XpA79ff\nhwgqJ39l8fGbjoXRxOBr+aJzHXdBVjtMQ1WXMk+PAoGBAJ/zidhVcQ5wVJnjNd52\nUia5u/pNbN7baKSiyA0/1qrKwtRRIr3Aq2KBQqdt7Kc8tl65uolp7YFsnF9B1BSq\nt2F++F+F6tZFwZ0PBtU3sJDrkMbVK1Uc+KjPNw3MxhD75GT/N8IoCV3qShjFcugW\nHFScxttXFHCHr9vYzKcBSRkQ\n-----END PRIVATE KEY-----";
    const N: &str = "weUC_8FEY5UBxIuAKMO28Q5YtntfcD3nEIHJQA8iS77V3QqHZIUQ5S7muGEfp3bqH1sE697yoheBSfa8oiE1npUvgYmPeHiuIEb5aF_vNRXLoDFU3PbK79uvUV067A4GxePQgYWwSZsBc7opwDjklqT4a13WIOko_4vw-rkXc7jxlwO5rzRJYenVYR1Y4MwjrbkTywGHglRzbj220Mg3KSo-G2TMe7axNJEJeF4rmiQMrVcxLkJUDqPy2z1DeY32pzCGlL_AA3x2vrv6ljE3P46q1mWN81Ng_uZW4W-PZhHAfmDeAV0vatN5V7obPeqiwLe1fcBUj6SivJ9yMiEU2w";

    fn verifier() -> TokenVerifier {
        TokenVerifier::new(&ServiceAccountTokens {
            issuer: "https://kubernetes.default.svc".into(),
            audiences: vec!["switchboard".into()],
            jwks: json!({"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": "k1", "n": N, "e": "AQAB"}]}),
        })
        .expect("a valid key set")
    }

    fn token(pem: &str, kid: &str, claims: serde_json::Value) -> String {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(kid.into());
        encode(
            &header,
            &claims,
            &EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap(),
        )
        .unwrap()
    }

    fn claims(aud: &str, exp_in: i64) -> serde_json::Value {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        json!({
            "iss": "https://kubernetes.default.svc", "aud": [aud], "exp": now + exp_in, "iat": now, "nbf": now,
            "sub": "system:serviceaccount:team-a:builder",
            "kubernetes.io": {"namespace": "team-a", "serviceaccount": {"name": "builder", "uid": "u"}}
        })
    }

    #[test]
    fn a_valid_token_names_its_service_account() {
        let v = verifier();
        let t = token(KEY_PEM, "k1", claims("switchboard", 600));
        assert!(looks_like_jwt(&t));
        assert_eq!(
            v.verify(&t),
            Ok(ServiceAccount {
                namespace: "team-a".into(),
                name: "builder".into()
            })
        );
    }

    #[test]
    fn refusals_say_why() {
        let v = verifier();
        assert_eq!(
            v.verify(&token(KEY_PEM, "k1", claims("switchboard", -600))),
            Err(Refusal::Expired)
        );
        assert_eq!(
            v.verify(&token(KEY_PEM, "k1", claims("kubernetes", 600))),
            Err(Refusal::WrongAudience)
        );
        assert_eq!(
            v.verify(&token(OTHER_PEM, "k1", claims("switchboard", 600))),
            Err(Refusal::BadSignature)
        );
        assert_eq!(
            v.verify(&token(OTHER_PEM, "k9", claims("switchboard", 600))),
            Err(Refusal::UnknownSigningKey)
        );
        let mut foreign = claims("switchboard", 600);
        foreign["iss"] = json!("https://other-cluster");
        assert_eq!(
            v.verify(&token(KEY_PEM, "k1", foreign)),
            Err(Refusal::WrongIssuer)
        );
        let mut user = claims("switchboard", 600);
        user["sub"] = json!("alice");
        user.as_object_mut().unwrap().remove("kubernetes.io");
        assert_eq!(
            v.verify(&token(KEY_PEM, "k1", user)),
            Err(Refusal::NotAServiceAccount)
        );
        assert_eq!(v.verify("a.b.c"), Err(Refusal::Malformed));
        assert!(!looks_like_jwt("sk-plain-key"));
    }

    #[test]
    fn exact_bindings_win_over_a_namespace() {
        let mut b = Bindings::default();
        b.bind("team-a/*", "namespace-key");
        b.bind("team-a/builder", "builder-key");
        let sa = |n: &str, s: &str| ServiceAccount {
            namespace: n.into(),
            name: s.into(),
        };
        assert_eq!(b.lookup(&sa("team-a", "builder")), Some("builder-key"));
        assert_eq!(b.lookup(&sa("team-a", "other")), Some("namespace-key"));
        assert_eq!(b.lookup(&sa("team-b", "builder")), None);
    }
}
