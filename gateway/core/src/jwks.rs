//! A JSON Web Key Set, parsed into keys `jsonwebtoken` verifies with: the ServiceAccount
//! issuer's (`workload_identity`) and identity providers' (`people`) alike.

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Header};

/// Most keys one set may hold: a provider publishes a handful (current, next, previous).
pub(crate) const MAX_KEYS: usize = 64;

/// Signing keys by key id (keys without one are tried in turn).
#[derive(Clone)]
pub struct SigningKeys {
    keys: Vec<(Option<String>, Algorithm, DecodingKey)>,
}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<_> = self.keys.iter().map(|(kid, alg, _)| (kid, alg)).collect();
        f.debug_struct("SigningKeys").field("keys", &ids).finish()
    }
}

/// Why a JSON Web Key Set gives no signing keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySetError {
    #[error("not a JSON Web Key Set: {0}")]
    NotAKeySet(String),
    #[error("more than {MAX_KEYS} keys")]
    TooMany,
    /// (strict parsing) The key at this index is one the gateway cannot verify with.
    #[error("keys[{0}]: a key this gateway cannot verify with")]
    Unusable(usize),
}

impl SigningKeys {
    /// Every usable signing key of a set. `strict`: a key this gateway cannot use is an error
    /// (a set written into the config); otherwise it is skipped (a provider's published set
    /// may hold encryption keys and algorithms the gateway does not accept).
    pub fn parse(set: &serde_json::Value, strict: bool) -> Result<SigningKeys, KeySetError> {
        let set: JwkSet = serde_json::from_value(set.clone())
            .map_err(|e| KeySetError::NotAKeySet(e.to_string()))?;
        if set.keys.len() > MAX_KEYS {
            return Err(KeySetError::TooMany);
        }
        let mut keys = Vec::new();
        for (i, jwk) in set.keys.iter().enumerate() {
            // Encryption keys are not signing keys.
            if matches!(
                jwk.common.public_key_use,
                Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
            ) {
                continue;
            }
            let algorithm = match (&jwk.common.key_algorithm, &jwk.algorithm) {
                (Some(alg), _) => alg.to_string().parse::<Algorithm>().ok(),
                (None, AlgorithmParameters::RSA(_)) => Some(Algorithm::RS256),
                (None, AlgorithmParameters::EllipticCurve(ec)) => match ec.curve {
                    EllipticCurve::P256 => Some(Algorithm::ES256),
                    EllipticCurve::P384 => Some(Algorithm::ES384),
                    _ => None,
                },
                (None, AlgorithmParameters::OctetKeyPair(_)) => Some(Algorithm::EdDSA),
                _ => None,
            };
            let decoded = algorithm.and_then(|a| DecodingKey::from_jwk(jwk).ok().map(|k| (a, k)));
            match decoded {
                Some((algorithm, key)) => keys.push((jwk.common.key_id.clone(), algorithm, key)),
                None if strict => {
                    return Err(KeySetError::Unusable(i));
                }
                None => {}
            }
        }
        Ok(SigningKeys { keys })
    }

    /// The keys a token's header may have been signed with: its algorithm, and its key id
    /// when both name one.
    pub fn candidates<'a>(
        &'a self,
        header: &'a Header,
    ) -> impl Iterator<Item = (Algorithm, &'a DecodingKey)> + 'a {
        self.keys
            .iter()
            .filter(move |(kid, alg, _)| {
                *alg == header.alg && (header.kid.is_none() || kid.is_none() || *kid == header.kid)
            })
            .map(|(_, alg, key)| (*alg, key))
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// An RSA key pair for tests that sign tokens (`KEY_PEM`, whose public modulus is `N`), and
/// another (`OTHER_PEM`) for signatures that must not verify.
#[cfg(test)]
pub(crate) mod test_keys {
    /// An RS256 token over `claims`, signed with `pem` under key id `kid`.
    pub fn token(pem: &str, kid: &str, claims: serde_json::Value) -> String {
        typed_token(pem, kid, "JWT", claims)
    }

    /// [`token`] with the header's `typ`.
    pub fn typed_token(pem: &str, kid: &str, typ: &str, claims: serde_json::Value) -> String {
        use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
        let mut header = Header::new(Algorithm::RS256);
        header.typ = Some(typ.into());
        header.kid = Some(kid.into());
        let key = EncodingKey::from_rsa_pem(pem.as_bytes()).expect("a test key");
        encode(&header, &claims, &key).expect("a signed token")
    }

    pub const KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDB5QL/wURjlQHE\ni4Aow7bxDli2e19wPecQgclADyJLvtXdCodkhRDlLua4YR+nduofWwTr3vKiF4FJ\n9ryiITWelS+BiY94eK4gRvloX+81FcugMVTc9srv269RXTrsDgbF49CBhbBJmwFz\nuinAOOSWpPhrXdYg6Sj/i/D6uRdzuPGXA7mvNElh6dVhHVjgzCOtuRPLAYeCVHNu\nPbbQyDcpKj4bZMx7trE0kQl4XiuaJAytVzEuQlQOo/LbPUN5jfanMIaUv8ADfHa+\nu/qWMTc/jqrWZY3zU2D+5lbhb49mEcB+YN4BXS9q03lXuhs96qLAt7V9wFSPpKK8\nn3IyIRTbAgMBAAECggEAFTwpF2yJumRD1Mw4ZX6FxyG8moOpgKfu6fJk4ZSmu2fz\nkSlJibs/DfKUhyXv6w3Nd1CnGdQJe7IaUUjqANGlRzBsiwHPSjDhVRygzQsQrh4s\ndmdgtXB76kgDi+Qrg1XH7R1VpRHIrE8DGjMNxoUUl+EKaevVezY97LrdUgA6bsxl\n8hrepVMdbR5jQg4MuQDNDtl9mnrAnhuSy/7ThN+Y1TJRMjiuWACb5GF1iv0kTveY\nfQD/IE165NCWE8gI2vYN1EZCfU+IMsr0/d0rWdhrdGpudWb3X+YBUAu++fmCSiBI\nAMH4AQuiqptQF2GlELeHfhEzazF8OrCQD8QiwfxESQKBgQD2H315fXP+3e3IoS0h\nmQ2pu3xV8NheuDbBU1u5aqb0gnOROuhNHtgVYWWlMaFFNBwLJKNPNf/nydY8qJsx\nMVhmwNWeqor6XIX/lWN4eOXrWrwToiZffTqYeZVpDRSvNGjCs7KsHvyg2eyNRERd\nfjN2vJ+VMawBdg0SFR990B032QKBgQDJrPXO6LIfUIGAmShGS09V8+4CI0P1qnRn\n2AVDlaJeGrcW3CzMGAQdxyxAHKBbFE3BIjbLOKuZEuf3a23HWIe18d9UAFGk6odD\nbtHAKBwCViQKbqwLkOMUPXHrkxpKjFdKnfkM81mF31o1b6aWzjFlNGFnkEvFkSfC\nAXZ78ulV0wKBgQC6O/2/zjPVaKyioYL650s1Yc6lYQb4NUAJbT/8vzzxyzwTapWY\ntXwgQYCeTT2QleuaavC/4UZwZ4OahqJXyNTxe3ypALcE1rn2OV35LNIdEp055fpP\nSvzpnyZ1RRaftHKI0VyjbRcPx5Z9Fmj8rZ/XesbuJ5XVzTP6uM0JcE6LkQKBgHIb\nAhjHX8CH9D2majsbcQ/Yq9lZyqG8h5AZkSDkELHdu6mbeV0gWXPftRGxIKlnm3ai\nvQ3OSoiZQdWjWsFnPaGb8Be+9nKwn0dv9A0cpHxN8KZWZ9FDcLeK7GG1ITL8pIb7\nSmYhaY1tCcUiHsdEcn4oXNQTuEtYDX6fBUKr9YkxAoGAVo8u9Hcl/L9EG5SLuiOB\nalkUOf5BaQDrjOLgEOTN0gVp8tRqf6inbQ/3ZEiIqr9rJ2TpJJu/qmrranIqhG71\ns7SrnSl5lXZMrBkR+Bnvne+Omv3IOhsFatmeBCF6FENKWcR1iG87dJ7T7jdm/2N3\nLin5cEHvCU3085scwjQJLV0=\n-----END PRIVATE KEY-----";
    pub const OTHER_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQDJyjROsLBa2ZwK\n+0Nlhvuax30wR8fwB2Owjse9g8OLRlQI0FOz3hEN4xUw2WMRpBXaurzSo+qo0BPT\no0/9hZX7MEZARKovwyogPDu8mbMBiIeh4VegdK+iFKUl5kWhXpL2Lf9B0uwKHxtg\nKvzJ1LvIxbC601HN5VTx2Rio2igjroK4mcz2ncDgFdHF2MJ2/KXENPkw+SE/qmXr\nhMooGij4BoWakTxIc5S3cSkEYu6Ry/9PfJv8bRY3rB5kviKjQUyII78DTZenUf1I\nCuNsTBTh9oSxQjbOgBNZh745qW8aPSE9oKul4SSql4bYX1o2DxNs4S37DZy4d4gD\nqcmd/VeJAgMBAAECggEADTbbNp9q6IOTmmfswakDQrquLXk4L35aGcDyLCxgf0Bg\nDZBG74cGdAYSDOW9M/WukLJTlOjXpNJrfoledaEjTPAJya+jKOKyGGG9+NuI+kUD\ncV4dPgxvR2WjR4861l/e096KG0rT2tSvO675jS8wVOwWZvx998YPbtp1hGAQWEgC\nn5okFwLaYubCSwNyt0Jq7kcwzj2i4EUZYFhuUjrpYmBi9No4mGBgofLpBX6TY2xN\noH9dIvzdwPnzXg0LmcSUrkzdVBxi29tDVU8BJ73KoacWVkdCZNiHV18rxyZSFSow\nAb8l9nTy/N1j2gphf/JOsBQZsloPxt3WCLHSP34tuQKBgQDxiSFO7HcK4vHLSiCG\nBgCEVGxbQdawozsVWB5xCnukia+Ievewl14N96SeEEFjAoSPYRKHtC3gDU23hdAJ\ni7qdy3avhL3QYDgzLnHM3jjRMzV8hgrT1TId+12zjTSQ+KkFlv8hXzXts3RX8t3L\nAF9wtiwLlbql0YI9B5ni8zXEZwKBgQDV37/8/bAT6MqdnYxMgS0VT9I3LtBuc8Ws\nuawh+hRf0HxnRwAtIv3G0+cWtu/y9V3nuoLUhWnTU5zpUP1wtiqxXDTuThMnmzMh\nGn+Hwotx75WomLTVK+I4P+8OXq8uzvS40tbeDEbh++dnyQfd+qTt0Lxsz9JrgTxX\nfxiJYbEOjwKBgQCaWhDQF+sHKPpt+EQKgeFor27DbrKdFOMYA8UIZjOXdWmYZUTO\nNB0l/eDUJf0zIZPG8LjfwfQjHz1QD5Jf10x9tF13UvPeKu8fPgn5avWSMxB2ME7R\nCohJgq5hpNY34sBY0yLdl7Ol4K1z2r+EEAvtwm0pRhkOCHIbQDVGRDhS9wKBgBb6\nSAUlOEKbUxFl+MnLYw2UGtCk7e2/8G/jLtQjqwa0PnlWDnXK+Zrf70bodpUSuXkI\n979fagQzSntioSf32lRdxK4Jo1MxAGhBEYyDYTnndJu9dEgmw9IpRES19XpA79ff\nhwgqJ39l8fGbjoXRxOBr+aJzHXdBVjtMQ1WXMk+PAoGBAJ/zidhVcQ5wVJnjNd52\nUia5u/pNbN7baKSiyA0/1qrKwtRRIr3Aq2KBQqdt7Kc8tl65uolp7YFsnF9B1BSq\nt2F++F+F6tZFwZ0PBtU3sJDrkMbVK1Uc+KjPNw3MxhD75GT/N8IoCV3qShjFcugW\nHFScxttXFHCHr9vYzKcBSRkQ\n-----END PRIVATE KEY-----";
    pub const N: &str = "weUC_8FEY5UBxIuAKMO28Q5YtntfcD3nEIHJQA8iS77V3QqHZIUQ5S7muGEfp3bqH1sE697yoheBSfa8oiE1npUvgYmPeHiuIEb5aF_vNRXLoDFU3PbK79uvUV067A4GxePQgYWwSZsBc7opwDjklqT4a13WIOko_4vw-rkXc7jxlwO5rzRJYenVYR1Y4MwjrbkTywGHglRzbj220Mg3KSo-G2TMe7axNJEJeF4rmiQMrVcxLkJUDqPy2z1DeY32pzCGlL_AA3x2vrv6ljE3P46q1mWN81Ng_uZW4W-PZhHAfmDeAV0vatN5V7obPeqiwLe1fcBUj6SivJ9yMiEU2w";
}
