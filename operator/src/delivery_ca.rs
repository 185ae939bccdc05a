//! The certificate authority behind the snapshot stream's TLS when the operator manages it
//! (pure: no API server, no clock of its own; `delivery_tls` stores and serves what this
//! decides).
//!
//! - The CA (key and certificate) lives in a Secret in the operator's namespace; its
//!   certificate, and only that, is published as the trust bundle gateways mount (a ConfigMap).
//! - Every operator replica issues its own short-lived serving certificate from the CA, in
//!   memory, and issues a new one at half its life: no private key of a serving certificate is
//!   ever stored, and replicas never race to write one.
//! - The CA is replaced before it expires without breaking a gateway: a new CA is first added
//!   to the trust bundle (`Introduce`), and signs nothing until the bundle has had time to reach
//!   every gateway (`propagation`: the kubelet refreshes mounted ConfigMaps within about a
//!   minute); then it becomes the signing CA (`Promote`) while the old one stays trusted until
//!   it expires (`DropPrevious`), since replicas still serve certificates it signed.

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::OffsetDateTime;

/// A CA certificate with its key (the key only where this CA still signs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CaCert {
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: OffsetDateTime,
}

/// What the CA Secret holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CaState {
    /// Signs serving certificates.
    pub current: Option<CaCert>,
    /// Trusted, not signing yet; and since when it is in the trust bundle.
    pub next: Option<(CaCert, OffsetDateTime)>,
    /// Signed until the last promotion; trusted until it expires.
    pub previous: Option<CaCert>,
}

/// How long things live.
#[derive(Debug, Clone, Copy)]
pub struct CaPolicy {
    pub ca_validity: Duration,
    /// How long a CA is in the trust bundle before it signs.
    pub propagation: Duration,
}

/// The one change the CA Secret needs now, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Keep,
    /// No usable CA (first start, or expired while no operator ran): make one that signs at
    /// once. Gateways trusting nothing yet lose nothing.
    Create,
    /// The current CA has a third of its life left: add a successor to the trust bundle.
    Introduce,
    /// The successor has been trusted long enough: it signs from now on.
    Promote,
    /// The previous CA expired: nothing it signed is valid any more.
    DropPrevious,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CaError {
    #[error("{what}: {source}")]
    Certificate {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
}

fn failed(what: &'static str) -> impl FnOnce(rcgen::Error) -> CaError {
    move |source| CaError::Certificate { what, source }
}

/// Decides the next step; applying it and deciding again converges (each step is taken once).
pub(crate) fn next_step(state: &CaState, now: OffsetDateTime, policy: &CaPolicy) -> Step {
    let Some(current) = state.current.as_ref().filter(|ca| ca.not_after > now) else {
        return Step::Create;
    };
    if let Some((_, trusted_since)) = &state.next {
        if now >= *trusted_since + policy.propagation {
            return Step::Promote;
        }
    } else if current.not_after - now < policy.ca_validity / 3 {
        return Step::Introduce;
    }
    if state
        .previous
        .as_ref()
        .is_some_and(|ca| ca.not_after <= now)
    {
        return Step::DropPrevious;
    }
    Step::Keep
}

/// Applies `step` (the new CA, when there is one, is generated here).
pub(crate) fn apply(
    state: &CaState,
    step: Step,
    now: OffsetDateTime,
    policy: &CaPolicy,
) -> Result<CaState, CaError> {
    let mut state = state.clone();
    match step {
        Step::Keep => {}
        Step::Create => {
            state = CaState {
                current: Some(new_ca(now, policy.ca_validity)?),
                ..CaState::default()
            };
        }
        Step::Introduce => state.next = Some((new_ca(now, policy.ca_validity)?, now)),
        Step::Promote => {
            if let Some((next, _)) = state.next.take() {
                // The old CA signs nothing any more: its key is not kept.
                state.previous = state.current.replace(next).map(|old| CaCert {
                    key_pem: String::new(),
                    ..old
                });
            }
        }
        Step::DropPrevious => state.previous = None,
    }
    Ok(state)
}

/// The certificates gateways trust: every CA whose certificates an operator may serve.
pub(crate) fn trust_bundle(state: &CaState) -> String {
    let next = state.next.as_ref().map(|(ca, _)| ca);
    [state.current.as_ref(), next, state.previous.as_ref()]
        .into_iter()
        .flatten()
        .map(|ca| ca.cert_pem.as_str())
        .collect()
}

fn new_ca(now: OffsetDateTime, validity: Duration) -> Result<CaCert, CaError> {
    let key = KeyPair::generate().map_err(failed("generating the CA key"))?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "switchboard");
    // Unique per CA: two CAs in one bundle must not share a subject (a client picks the issuer
    // by name).
    name.push(
        DnType::CommonName,
        format!(
            "switchboard snapshot stream CA {:016x}",
            rand::random::<u64>()
        ),
    );
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    // A little slack for clocks behind ours.
    params.not_before = now - Duration::from_secs(300);
    params.not_after = now + validity;
    let cert = params
        .self_signed(&key)
        .map_err(failed("signing the CA certificate"))?;
    Ok(CaCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_after: params.not_after,
    })
}

/// Reads a stored CA back; its expiry comes from the certificate itself.
pub(crate) fn parse_ca(cert_pem: &str, key_pem: &str) -> Result<CaCert, CaError> {
    let key = KeyPair::from_pem(key_pem).map_err(failed("reading the stored CA key"))?;
    Issuer::from_ca_cert_pem(cert_pem, key).map_err(failed("reading the stored CA certificate"))?;
    Ok(CaCert {
        key_pem: key_pem.to_string(),
        ..parse_ca_cert(cert_pem)?
    })
}

/// Reads back a CA that no longer signs (no key).
pub(crate) fn parse_ca_cert(cert_pem: &str) -> Result<CaCert, CaError> {
    let unreadable = || CaError::Certificate {
        what: "reading the stored CA certificate",
        source: rcgen::Error::CouldNotParseCertificate,
    };
    let (_, pem) =
        x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).map_err(|_| unreadable())?;
    let cert = pem.parse_x509().map_err(|_| unreadable())?;
    Ok(CaCert {
        cert_pem: cert_pem.to_string(),
        key_pem: String::new(),
        not_after: cert.validity().not_after.to_datetime(),
    })
}

/// A serving certificate (DER chain: the leaf alone, gateways hold the CA) and its key (DER,
/// PKCS#8).
pub(crate) struct Leaf {
    pub chain: Vec<Vec<u8>>,
    pub key: Vec<u8>,
    pub not_after: OffsetDateTime,
}

/// Issues a serving certificate for `names` (DNS names or IP addresses).
pub(crate) fn issue_leaf(
    ca: &CaCert,
    names: &[String],
    now: OffsetDateTime,
    validity: Duration,
) -> Result<Leaf, CaError> {
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(failed("reading the CA key"))?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key)
        .map_err(failed("reading the CA certificate"))?;
    let mut params = CertificateParams::new(Vec::<String>::new())
        .map_err(failed("serving certificate names"))?;
    for name in names {
        let san = match name.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                name.clone()
                    .try_into()
                    .map_err(failed("serving certificate names"))?,
            ),
        };
        params.subject_alt_names.push(san);
    }
    let mut subject = DistinguishedName::new();
    subject.push(
        DnType::CommonName,
        names.first().cloned().unwrap_or_default(),
    );
    params.distinguished_name = subject;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = now - Duration::from_secs(300);
    params.not_after = now + validity;
    let key = KeyPair::generate().map_err(failed("generating a serving key"))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(failed("signing the serving certificate"))?;
    Ok(Leaf {
        chain: vec![cert.der().to_vec()],
        key: key.serialize_der(),
        not_after: params.not_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn policy() -> CaPolicy {
        CaPolicy {
            ca_validity: 300 * HOUR,
            propagation: HOUR,
        }
    }

    /// Runs the state machine from `state` for `hours`, one step per hour, recording steps.
    fn run(mut state: CaState, start: OffsetDateTime, hours: u32) -> (CaState, Vec<Step>) {
        let mut steps = Vec::new();
        for h in 0..hours {
            let now = start + HOUR * h;
            loop {
                let step = next_step(&state, now, &policy());
                if step == Step::Keep {
                    break;
                }
                steps.push(step);
                state = apply(&state, step, now, &policy()).expect("apply");
            }
        }
        (state, steps)
    }

    #[test]
    fn a_ca_is_created_then_replaced_in_three_steps_before_it_expires() {
        let start = OffsetDateTime::now_utc();
        let (state, steps) = run(CaState::default(), start, 250);
        // Created at 0; a third of 300 h left at 200 h: introduced, promoted an hour later.
        assert_eq!(steps, vec![Step::Create, Step::Introduce, Step::Promote]);
        let previous = state.previous.as_ref().expect("the old CA stays trusted");
        assert!(previous.not_after > start + HOUR * 250);
        let (state, steps) = run(state, start + HOUR * 250, 60);
        assert_eq!(steps, vec![Step::DropPrevious]);
        assert!(state.previous.is_none() && state.next.is_none());
    }

    #[test]
    fn a_new_ca_signs_only_after_the_bundle_had_time_to_spread() {
        let now = OffsetDateTime::now_utc();
        let created = apply(&CaState::default(), Step::Create, now, &policy()).unwrap();
        let later = now + HOUR * 201;
        assert_eq!(next_step(&created, later, &policy()), Step::Introduce);
        let introduced = apply(&created, Step::Introduce, later, &policy()).unwrap();
        assert_eq!(
            introduced.current, created.current,
            "still signing with the old CA"
        );
        let bundle = trust_bundle(&introduced);
        assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2);
        let just_before = later + policy().propagation - Duration::from_secs(1);
        assert_eq!(next_step(&introduced, just_before, &policy()), Step::Keep);
        assert_eq!(
            next_step(&introduced, later + policy().propagation, &policy()),
            Step::Promote
        );
    }

    #[test]
    fn an_expired_ca_is_replaced_at_once() {
        let long_ago = OffsetDateTime::now_utc() - HOUR * 1000;
        let old = apply(&CaState::default(), Step::Create, long_ago, &policy()).unwrap();
        assert_eq!(
            next_step(&old, OffsetDateTime::now_utc(), &policy()),
            Step::Create
        );
    }

    #[test]
    fn a_stored_ca_reads_back_and_issues_leaves_naming_dns_and_ip() {
        let now = OffsetDateTime::now_utc();
        let state = apply(&CaState::default(), Step::Create, now, &policy()).unwrap();
        let ca = state.current.unwrap();
        let read = parse_ca(&ca.cert_pem, &ca.key_pem).expect("parse");
        assert_eq!(
            read.not_after.unix_timestamp(),
            ca.not_after.unix_timestamp()
        );
        let names = vec!["op.ns.svc".to_string(), "10.1.2.3".to_string()];
        let leaf = issue_leaf(&read, &names, now, HOUR).expect("leaf");
        assert_eq!(leaf.chain.len(), 1);
        assert!(leaf.not_after > now);
        assert!(parse_ca("not pem", &ca.key_pem).is_err());
    }
}
