//! Fault variants: the `{opts}` segment of `/v/{opts}/mcp`, parsed into a [`Variant`].
//!
//! The syntax is documented in the crate docs (`main.rs`); this module only parses it.

use crate::percent;

/// Default `serverInfo.name` when no `name=` option is given.
pub const DEFAULT_NAME: &str = "example-upstream";

/// Page size used by the `cursor=` modes when `page=` is not given.
const DEFAULT_CURSOR_PAGE: usize = 2;

/// Which protocol eras a variant serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Era {
    /// Both: legacy handshake and 2026-07-28 stateless on the same endpoint.
    #[default]
    Dual,
    /// Handshake revisions only (`era=legacy`).
    Legacy,
    /// 2026-07-28 only (`era=2026`).
    Modern,
}

/// How `tools/list` cursors behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CursorMode {
    #[default]
    Normal,
    /// The second page returns the same `nextCursor` forever.
    Repeat,
    /// Every page has a new `nextCursor`; generated tools keep coming.
    Endless,
    /// Page one returns `nextCursor: ""`; the cursor `""` returns the rest.
    Empty,
}

/// When the server accepts a request and never answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hang {
    #[default]
    Never,
    All,
    /// Only `tools/list`.
    List,
}

/// One "server" served by this process, selected by the URL path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    pub era: Era,
    pub sse: bool,
    /// `cut`: a streamed answer (`sse` with a progress token) breaks off after its progress
    /// event: the connection is reset before the result is sent.
    pub cut: bool,
    /// `tools=N`: serve `tool_0..tool_{N-1}` instead of the base tools.
    pub tools: Option<usize>,
    pub page: Option<usize>,
    pub cursor: CursorMode,
    /// `status=NNN`: every request to the endpoint gets this HTTP status.
    pub status: Option<u16>,
    pub garbage: bool,
    pub hang: Hang,
    pub delay_ms: u64,
    /// `require=HEADER:VALUE` (repeatable): lower-case header name and exact value.
    pub require: Vec<(String, String)>,
    /// `require-prefix=HEADER:PREFIX` (repeatable): lower-case header name and value prefix.
    pub require_prefix: Vec<(String, String)>,
    /// `redirect=TARGET`: answer every request `307` with `Location: TARGET` (decoded).
    pub redirect: Option<String>,
    /// `session-auth`: a legacy session only serves the `Authorization` value that created it.
    pub session_auth: bool,
    pub name: String,
    /// Cache hints on 2026-07-28 cacheable results.
    pub ttl_ms: u64,
    pub public: bool,
    /// `schemas=verbose`: `add` publishes its input schema the way generated schemas often
    /// look (`$schema`, `definitions` with `$ref`s, a `oneOf`), for schema sanitizing tests.
    pub verbose_schemas: bool,
    /// The Example Accounts endpoint (`accounts.rs`): a `whoami` tool besides the base tools,
    /// answering with the account the caller's token belongs to.
    pub account: bool,
}

impl Default for Variant {
    fn default() -> Self {
        Self {
            era: Era::Dual,
            sse: false,
            cut: false,
            tools: None,
            page: None,
            cursor: CursorMode::Normal,
            status: None,
            garbage: false,
            hang: Hang::Never,
            delay_ms: 0,
            require: Vec::new(),
            require_prefix: Vec::new(),
            redirect: None,
            session_auth: false,
            name: DEFAULT_NAME.to_owned(),
            ttl_ms: 0,
            public: false,
            verbose_schemas: false,
            account: false,
        }
    }
}

impl Variant {
    /// The `tools/list` page size, if listings are paginated at all.
    pub fn page_size(&self) -> Option<usize> {
        match (self.page, self.cursor) {
            (Some(n), _) => Some(n),
            (None, CursorMode::Normal) => None,
            (None, _) => Some(DEFAULT_CURSOR_PAGE),
        }
    }
}

/// Parses the raw (still percent-encoded) `{opts}` path segment: split at `,`, each item split
/// at its first `=`, then key and value percent-decoded, so `%2C`, `%2F` and `%3D` can appear
/// in values.
pub fn parse(opts: &str) -> Result<Variant, String> {
    let mut v = Variant::default();
    for item in opts.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let decode = |raw: &str| {
            percent::decode(raw, false)
                .ok_or_else(|| format!("variant option `{item}` has a bad percent-encoding"))
        };
        let (key, value) = match item.split_once('=') {
            Some((k, val)) => (decode(k)?, Some(decode(val)?)),
            None => (decode(item)?, None),
        };
        match (key.as_str(), value.as_deref()) {
            ("era", Some("legacy")) => v.era = Era::Legacy,
            ("era", Some("2026" | "2026-07-28")) => v.era = Era::Modern,
            ("era", Some("dual")) => v.era = Era::Dual,
            ("sse", None) => v.sse = true,
            ("cut", None) => v.cut = true,
            ("tools", Some(n)) => v.tools = Some(number(&key, n, 0, 1_000_000)?),
            ("page", Some(n)) => v.page = Some(number(&key, n, 1, 1_000_000)?),
            ("cursor", Some("repeat")) => v.cursor = CursorMode::Repeat,
            ("cursor", Some("endless")) => v.cursor = CursorMode::Endless,
            ("cursor", Some("empty")) => v.cursor = CursorMode::Empty,
            ("status", Some(n)) => v.status = Some(number(&key, n, 400, 599)?),
            ("garbage", None) => v.garbage = true,
            ("hang", None) => v.hang = Hang::All,
            ("hang", Some("list")) => v.hang = Hang::List,
            ("delay", Some(n)) => v.delay_ms = number(&key, n, 0, 600_000)?,
            ("require", Some(spec)) => v.require.push(requirement(&key, spec)?),
            ("require-prefix", Some(spec)) => v.require_prefix.push(requirement(&key, spec)?),
            ("redirect", Some(target)) => v.redirect = Some(redirect_target(target)?),
            ("session-auth", None) => v.session_auth = true,
            ("name", Some(n)) if !n.is_empty() => v.name = n.to_owned(),
            ("ttl", Some(n)) => v.ttl_ms = number(&key, n, 0, u64::from(u32::MAX))?,
            ("cache", Some("public")) => v.public = true,
            ("cache", Some("private")) => v.public = false,
            ("schemas", Some("verbose")) => v.verbose_schemas = true,
            _ => return Err(format!("unknown or malformed variant option `{item}`")),
        }
    }
    Ok(v)
}

fn number<T: TryFrom<u64>>(key: &str, raw: &str, min: u64, max: u64) -> Result<T, String> {
    let n: u64 = raw
        .parse()
        .map_err(|_| format!("option `{key}` needs a number, got `{raw}`"))?;
    if !(min..=max).contains(&n) {
        return Err(format!("option `{key}` must be in {min}..={max}, got {n}"));
    }
    T::try_from(n).map_err(|_| format!("option `{key}` is out of range"))
}

fn requirement(key: &str, spec: &str) -> Result<(String, String), String> {
    let (name, value) = spec
        .split_once(':')
        .ok_or_else(|| format!("option `{key}` needs HEADER:VALUE, got `{spec}`"))?;
    let name = name.trim().to_ascii_lowercase();
    if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(format!("option `{key}` names an invalid header `{name}`"));
    }
    Ok((name, value.to_owned()))
}

/// A `Location` value: a path (`/…`) or an `http(s)://` URL, visible ASCII only.
fn redirect_target(target: &str) -> Result<String, String> {
    let shaped =
        target.starts_with('/') || target.starts_with("http://") || target.starts_with("https://");
    if !shaped || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "option `redirect` needs a percent-encoded path or http(s) URL without spaces, got `{target}`"
        ));
    }
    Ok(target.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_default() {
        assert_eq!(parse("").unwrap(), Variant::default());
        assert_eq!(parse(",,").unwrap(), Variant::default());
    }

    #[test]
    fn parses_every_option() {
        let v = parse(
            "era=legacy,sse,tools=7,page=3,cursor=repeat,status=401,garbage,hang=list,delay=25,\
             require=Authorization:Bearer a:b,require=X-Key:k,name=alpha,ttl=500,cache=public",
        )
        .unwrap();
        assert_eq!(v.era, Era::Legacy);
        assert!(v.sse && v.garbage && v.public);
        assert_eq!(v.tools, Some(7));
        assert_eq!(v.page, Some(3));
        assert_eq!(v.cursor, CursorMode::Repeat);
        assert_eq!(v.status, Some(401));
        assert_eq!(v.hang, Hang::List);
        assert_eq!(v.delay_ms, 25);
        assert_eq!(
            v.require,
            vec![
                ("authorization".to_owned(), "Bearer a:b".to_owned()),
                ("x-key".to_owned(), "k".to_owned())
            ]
        );
        assert_eq!(v.name, "alpha");
        assert_eq!(v.ttl_ms, 500);
        assert_eq!(parse("era=2026").unwrap().era, Era::Modern);
        assert_eq!(parse("hang").unwrap().hang, Hang::All);
    }

    #[test]
    fn rejects_bad_options() {
        for bad in [
            "bogus",
            "era=1999",
            "tools=x",
            "page=0",
            "status=200",
            "status=600",
            "require=novalue",
            "require=bad header:x",
            "cursor=sideways",
            "sse=1",
            "name=",
            "delay=-1",
            "require-prefix=nocolon",
            "redirect=",
            "redirect=example.com",
            "redirect=%2Fa%20b",
            "redirect",
            "session-auth=1",
            "name=%zz",
            "name=%FF",
        ] {
            assert!(parse(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn cursor_modes_imply_a_page_size() {
        assert_eq!(parse("").unwrap().page_size(), None);
        assert_eq!(parse("cursor=endless").unwrap().page_size(), Some(2));
        assert_eq!(parse("cursor=empty,page=5").unwrap().page_size(), Some(5));
        assert_eq!(parse("page=4").unwrap().page_size(), Some(4));
    }

    #[test]
    fn values_are_decoded_after_splitting() {
        let v = parse(
            "redirect=http%3A%2F%2F127.0.0.1%3A9%2Fv%2Fname%3Db%2Csse%2Fmcp,\
             require=authorization:Bearer%20at-c1-2,require=x-list:a%2Cb,\
             require-prefix=Authorization:Bearer%20at-c1-,session-auth,name=a%3Db",
        )
        .unwrap();
        assert_eq!(
            v.redirect.as_deref(),
            Some("http://127.0.0.1:9/v/name=b,sse/mcp"),
            "an encoded comma stays in the value"
        );
        assert_eq!(
            v.require,
            vec![
                ("authorization".to_owned(), "Bearer at-c1-2".to_owned()),
                ("x-list".to_owned(), "a,b".to_owned())
            ]
        );
        assert_eq!(
            v.require_prefix,
            vec![("authorization".to_owned(), "Bearer at-c1-".to_owned())]
        );
        assert!(v.session_auth);
        assert_eq!(v.name, "a=b");
        assert_eq!(
            parse("redirect=%2Fv%2Fname%3Db%2Fmcp")
                .unwrap()
                .redirect
                .as_deref(),
            Some("/v/name=b/mcp")
        );
        // a target that itself carries an encoded value is encoded twice
        assert_eq!(
            parse("redirect=%2Fv%2Frequire%3Dx%3Aa%2520b%2Fmcp")
                .unwrap()
                .redirect
                .as_deref(),
            Some("/v/require=x:a%20b/mcp")
        );
        assert_eq!(
            parse("require-prefix=x-any:").unwrap().require_prefix,
            vec![("x-any".to_owned(), String::new())]
        );
        assert!(parse("%73se").unwrap().sse);
    }
}
