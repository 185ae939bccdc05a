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
use std::sync::Arc;

use jsonwebtoken::{Validation, decode, decode_header};
use serde::Deserialize;
use switchboard_snapshot::ServiceAccountTokens;

use crate::jwks::{KeySetError, SigningKeys};
use crate::remembered_tokens::RememberedTokens;

/// A verified token's ServiceAccount, and the pod the token was bound to, if any (a projected
/// token in a pod is: `kubernetes.io.pod.name`). Only the account binds a key; the pod tells
/// the audit record which workload called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceAccount {
    pub namespace: String,
    pub name: String,
    pub pod: Option<String>,
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
pub(crate) struct TokenVerifier {
    issuer: String,
    audiences: Vec<String>,
    keys: SigningKeys,
    /// Tokens verified lately, with their ServiceAccount (`remembered_tokens.rs`).
    verified: RememberedTokens<Arc<ServiceAccount>>,
}

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
    /// The pod a token is bound to (a projected token, or `kubectl create token
    /// --bound-object-kind Pod`).
    #[serde(default)]
    pod: Option<NamedClaim>,
}

#[derive(Deserialize)]
struct NamedClaim {
    name: String,
}

/// Clock skew allowed between the issuer and this replica.
const LEEWAY_SECONDS: u64 = 30;

impl TokenVerifier {
    /// The verifier of a snapshot's settings; an error names the key set's problem.
    pub fn new(settings: &ServiceAccountTokens) -> Result<TokenVerifier, KeySetError> {
        let keys = SigningKeys::parse(&settings.jwks, true)?;
        Ok(TokenVerifier {
            issuer: settings.issuer.clone(),
            audiences: settings.audiences.clone(),
            keys,
            verified: RememberedTokens::default(),
        })
    }

    /// The issuer whose tokens this verifier takes.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The ServiceAccount a token proves, or why it proves none.
    pub(crate) fn verify(&self, token: &str) -> Result<Arc<ServiceAccount>, Refusal> {
        if let Some(account) = self.verified.get(token) {
            return Ok(account);
        }
        let (account, exp) = self.verify_signed(token)?;
        let account = Arc::new(account);
        self.verified.insert(token, account.clone(), exp);
        Ok(account)
    }

    fn verify_signed(&self, token: &str) -> Result<(ServiceAccount, u64), Refusal> {
        let header = decode_header(token).map_err(|_| Refusal::Malformed)?;
        let mut outcome = Err(Refusal::UnknownSigningKey);
        for (alg, key) in self.keys.candidates(&header) {
            let mut validation = Validation::new(alg);
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
            pod: k.pod.as_ref().map(|p| p.name.clone()),
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
        pod: None,
    })
}

/// Whether a presented credential has the shape of a JWT (three base64url parts), so that a
/// plain key is never parsed as one.
pub(crate) fn looks_like_jwt(presented: &str) -> bool {
    presented.len() > 20
        && presented.split('.').count() == 3
        && presented
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Which key a ServiceAccount's token stands for: an exact binding, else its namespace's `*`.
#[derive(Debug)]
pub(crate) struct Bindings<K> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::jwks::test_keys::{KEY_PEM, N, OTHER_PEM, token};

    fn verifier() -> TokenVerifier {
        TokenVerifier::new(&ServiceAccountTokens {
            issuer: "https://kubernetes.default.svc".into(),
            audiences: vec!["switchboard".into()],
            jwks: json!({"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": "k1", "n": N, "e": "AQAB"}]}),
        })
        .expect("a valid key set")
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
            v.verify(&t).as_deref(),
            Ok(&ServiceAccount {
                namespace: "team-a".into(),
                name: "builder".into(),
                pod: None,
            })
        );
        // A token bound to a pod names it too (the same ServiceAccount, so the same key).
        let mut bound = claims("switchboard", 600);
        bound["kubernetes.io"]["pod"] = json!({"name": "builder-7d9c-x2k4f", "uid": "p"});
        let account = v.verify(&token(KEY_PEM, "k1", bound)).unwrap();
        assert_eq!(account.pod.as_deref(), Some("builder-7d9c-x2k4f"));
        assert_eq!(account.to_string(), "team-a/builder");
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
            pod: Some("any-pod".into()),
        };
        assert_eq!(b.lookup(&sa("team-a", "builder")), Some("builder-key"));
        assert_eq!(b.lookup(&sa("team-a", "other")), Some("namespace-key"));
        assert_eq!(b.lookup(&sa("team-b", "builder")), None);
    }
}
