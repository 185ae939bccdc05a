//! Syntax rules for names that end up on the wire or in routing.

/// The namespace a server or key belongs to when the file does not say (standalone mode).
const DEFAULT_NAMESPACE: &str = "default";

/// Serde's default for a `namespace` field (here, beside the name, so that the model and the
/// identity types both use it without using each other).
pub(crate) fn default_namespace() -> String {
    DEFAULT_NAMESPACE.to_string()
}

/// An HTTP header name must be an RFC 7230 `token`: visible ASCII without separators.
pub(crate) fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        })
}

/// A header value may not carry CR, LF or NUL (they would split or end the header).
pub(crate) fn is_header_value(value: &str) -> bool {
    !value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0))
}

/// A DNS-1123 label: lower-case alphanumerics and `-`, starting and ending alphanumeric, at most
/// 63 characters. Prefixes are labels, so they cannot contain `_` and the first `__` of an
/// aggregate name always ends the prefix.
pub fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// A DNS-1123 subdomain (what Kubernetes object names such as ServiceAccounts are): dot-separated
/// labels, at most 253 characters.
pub(crate) fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

/// Names clients may send as tool names: what both LLM providers and MCP clients accept
/// (1 to 64 of `a-z A-Z 0-9 _ - .`).
pub fn is_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_are_tokens() {
        assert!(is_header_name("X-API-Key"));
        assert!(is_header_name("authorization"));
        assert!(!is_header_name("X Token"));
        assert!(!is_header_name("X:Token"));
        assert!(!is_header_name(""));
        assert!(!is_header_name("Ünicode"));
    }

    #[test]
    fn header_values_have_no_line_breaks() {
        assert!(is_header_value("Bearer abc"));
        assert!(!is_header_value("abc\r\nX-Evil: 1"));
    }

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("weather"));
        assert!(is_dns_label("a-1"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label("a_b"));
        assert!(!is_dns_label("Weather"));
        assert!(!is_dns_label(&"a".repeat(64)));
    }
}
