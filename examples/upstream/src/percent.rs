//! Percent-decoding for variant options (path segments) and
//! `application/x-www-form-urlencoded` bodies.

/// Decodes `%XX` escapes (and `+` as a space when `plus_is_space`, the form rule).
/// `None` on a malformed escape or when the result is not UTF-8.
pub fn decode(raw: &str, plus_is_space: bool) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Parses an `application/x-www-form-urlencoded` body into (name, value) pairs, in order.
/// `None` if the body is not UTF-8 or has a malformed escape.
pub fn form(body: &[u8]) -> Option<Vec<(String, String)>> {
    let text = std::str::from_utf8(body).ok()?;
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            Some((decode(name, true)?, decode(value, true)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_escapes() {
        assert_eq!(
            decode(
                "http%3A%2F%2F127.0.0.1%3A9%2Fv%2Fname%3Db%2Csse%2Fmcp",
                false
            )
            .as_deref(),
            Some("http://127.0.0.1:9/v/name=b,sse/mcp")
        );
        assert_eq!(decode("a+b%20c", false).as_deref(), Some("a+b c"));
        assert_eq!(decode("a+b%20c", true).as_deref(), Some("a b c"));
        assert_eq!(decode("%C3%A9", false).as_deref(), Some("é"));
        for bad in ["%", "%2", "%zz", "%FF", "a%+1"] {
            assert_eq!(decode(bad, false), None, "{bad}");
        }
    }

    #[test]
    fn parses_forms() {
        let f = form(b"grant_type=client_credentials&scope=a+b&x=%26%3D&flag&&empty=").unwrap();
        let want = [
            ("grant_type", "client_credentials"),
            ("scope", "a b"),
            ("x", "&="),
            ("flag", ""),
            ("empty", ""),
        ];
        assert_eq!(f, want.map(|(k, v)| (k.to_owned(), v.to_owned())).to_vec());
        assert_eq!(form(b""), Some(vec![]));
        assert_eq!(form(b"a=%zz"), None);
        assert_eq!(form(b"\xff=1"), None);
    }
}
