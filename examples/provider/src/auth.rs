//! The `--api-key` checks: Anthropic clients send `x-api-key: KEY`, OpenAI clients
//! `Authorization: Bearer KEY`.

use axum::http::{HeaderMap, header};

pub fn anthropic_ok(headers: &HeaderMap, key: &str) -> bool {
    headers
        .get("x-api-key")
        .is_some_and(|v| v.as_bytes() == key.as_bytes())
}

pub fn openai_ok(headers: &HeaderMap, key: &str) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .is_some_and(|(scheme, token)| scheme.eq_ignore_ascii_case("bearer") && token == key)
}

/// Whether a request looks like it comes from an Anthropic client (for `GET /v1/models`,
/// which both kinds of client ask, to pick the refusal's shape).
pub fn looks_anthropic(headers: &HeaderMap) -> bool {
    headers.contains_key("x-api-key") || headers.contains_key("anthropic-version")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn keys() {
        let mut h = HeaderMap::new();
        assert!(!anthropic_ok(&h, "k") && !openai_ok(&h, "k"));
        h.insert("x-api-key", HeaderValue::from_static("k"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer k"));
        assert!(anthropic_ok(&h, "k") && openai_ok(&h, "k"));
        assert!(!anthropic_ok(&h, "kk") && !openai_ok(&h, "kk"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic k"));
        assert!(!openai_ok(&h, "k"));
    }
}
