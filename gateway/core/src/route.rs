//! Aggregate names are `<prefix>__<tool>`. Prefixes are DNS-1123 labels and cannot contain `_`,
//! so the first `__` ends the prefix: routing is a parse, never a search of listings.
//!
//! Resource URIs are prefixed the same way, except an MCP Apps UI resource's
//! (`io.modelcontextprotocol/ui`): a host takes a tool's `_meta.ui.resourceUri` only when it
//! starts with `ui://`, so `ui://weather/view.html` of server `alpha` is
//! `ui://alpha__weather/view.html` on `/mcp`, everywhere the aggregate names it (resource
//! listings, the tools that link to it, `resources/read` and what it answers, subscriptions).

use std::borrow::Cow;

use serde_json::{Map, Value};

/// Separator between a server's prefix and the upstream's own name.
const SEPARATOR: &str = "__";

pub fn prefixed_name(prefix: &str, name: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + SEPARATOR.len() + name.len());
    out.push_str(prefix);
    out.push_str(SEPARATOR);
    out.push_str(name);
    out
}

/// Splits `<prefix>__<rest>`; `None` for a name with no separator (an unprefixed name). The rest
/// goes upstream unchanged, even if it contains `__` itself.
pub fn split_prefixed(name: &str) -> Option<(&str, &str)> {
    // The separator's first place, found a byte at a time: a name is short, and `split_once`
    // sets up a substring search on every call (about 200 instructions on a routed call).
    let at = name
        .as_bytes()
        .windows(SEPARATOR.len())
        .position(|w| w == SEPARATOR.as_bytes())?;
    let (prefix, rest) = (name.get(..at)?, name.get(at + SEPARATOR.len()..)?);
    (!prefix.is_empty() && !rest.is_empty()).then_some((prefix, rest))
}

/// The scheme of MCP Apps UI resources (matched without regard to case, kept as written).
const UI_SCHEME: &str = "ui://";

/// `uri`'s scheme when it is a UI resource's (`ui://`, in the case it was written).
fn ui_scheme(uri: &str) -> Option<&str> {
    uri.get(..UI_SCHEME.len())
        .filter(|scheme| scheme.eq_ignore_ascii_case(UI_SCHEME))
}

/// Whether `uri` is an MCP Apps UI resource's (`ui://`).
pub fn is_ui_uri(uri: &str) -> bool {
    ui_scheme(uri).is_some()
}

/// A resource URI (or URI template) as the aggregate names it: `ui://<prefix>__<rest>` for a
/// UI resource's `ui://<rest>`, else `<prefix>__<uri>`.
pub fn prefixed_uri(prefix: &str, uri: &str) -> String {
    match ui_scheme(uri) {
        Some(scheme) => {
            let rest = &uri[scheme.len()..];
            let mut out = String::with_capacity(uri.len() + prefix.len() + SEPARATOR.len());
            out.push_str(scheme);
            out.push_str(prefix);
            out.push_str(SEPARATOR);
            out.push_str(rest);
            out
        }
        None => prefixed_name(prefix, uri),
    }
}

/// Splits an aggregate resource URI into its server's prefix and the upstream's URI (the
/// inverse of [`prefixed_uri`]); `None` for a URI with no prefix.
pub fn split_prefixed_uri(uri: &str) -> Option<(&str, Cow<'_, str>)> {
    if let Some(scheme) = ui_scheme(uri)
        && let Some((prefix, rest)) = split_prefixed(&uri[scheme.len()..])
    {
        return Some((prefix, Cow::Owned(format!("{scheme}{rest}"))));
    }
    split_prefixed(uri).map(|(prefix, rest)| (prefix, Cow::Borrowed(rest)))
}

/// The links of a listed tool to its UI resource (`_meta.ui.resourceUri`, and the flat
/// `_meta["ui/resourceUri"]` hosts read before the nested one existed) as the aggregate names
/// the resource. Whether any changed.
pub fn prefix_ui_links(tool: &mut Map<String, Value>, prefix: &str) -> bool {
    let Some(Value::Object(meta)) = tool.get_mut("_meta") else {
        return false;
    };
    let mut changed = false;
    let mut prefix_one = |link: Option<&mut Value>| {
        if let Some(Value::String(uri)) = link
            && ui_scheme(uri).is_some()
        {
            *uri = prefixed_uri(prefix, uri);
            changed = true;
        }
    };
    prefix_one(meta.get_mut("ui").and_then(|ui| ui.get_mut("resourceUri")));
    prefix_one(meta.get_mut("ui/resourceUri"));
    changed
}

/// A `resources/read` result's UI contents (`contents[].uri`, which a host matches against the
/// URI it read) as the aggregate names them. Other contents keep the upstream's URIs.
pub fn prefix_ui_contents(result: &mut Value, prefix: &str) {
    let Some(Value::Array(contents)) = result.get_mut("contents") else {
        return;
    };
    for content in contents {
        if let Some(Value::String(uri)) = content.get_mut("uri")
            && ui_scheme(uri).is_some()
        {
            *uri = prefixed_uri(prefix, uri);
        }
    }
}

/// Gives the task id in a result the server's prefix (aggregate endpoint): a created task
/// (`resultType: "task"`) and the task a `tasks/*` method answers about.
pub fn prefix_task_id(result: &mut Value, prefix: &str) {
    if let Some(Value::String(id)) = result.get_mut("taskId") {
        *id = prefixed_name(prefix, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_separator_ends_the_prefix() {
        assert_eq!(split_prefixed("w__get"), Some(("w", "get")));
        assert_eq!(split_prefixed("w__get__all"), Some(("w", "get__all")));
        assert_eq!(split_prefixed("get_all"), None);
        assert_eq!(split_prefixed("__x"), None);
        assert_eq!(split_prefixed("w__"), None);
        // As `split_once` splits (the oracle), on names around the separator's rules.
        fn by_split_once(name: &str) -> Option<(&str, &str)> {
            let (prefix, rest) = name.split_once(SEPARATOR)?;
            (!prefix.is_empty() && !rest.is_empty()).then_some((prefix, rest))
        }
        for name in [
            "",
            "_",
            "__",
            "___",
            "a___b",
            "a____b",
            "é__ü",
            "ü_é__b_",
            "a_b__c",
            "ab",
            "a__",
            "__a",
            "a__b__",
            "_a__b",
        ] {
            assert_eq!(split_prefixed(name), by_split_once(name), "{name}");
        }
        assert_eq!(prefixed_name("w", "get"), "w__get");
    }

    #[test]
    fn a_ui_resource_keeps_its_scheme_in_front_and_routes_back() {
        for (upstream, aggregate) in [
            ("ui://weather/view.html", "ui://alpha__weather/view.html"),
            ("UI://weather/view.html", "UI://alpha__weather/view.html"),
            ("ui://my__app/x", "ui://alpha__my__app/x"),
            ("ui:///view.html", "ui://alpha__/view.html"),
            ("file:///a", "alpha__file:///a"),
            ("ui:", "alpha__ui:"),
        ] {
            assert_eq!(prefixed_uri("alpha", upstream), aggregate);
            let (prefix, back) = split_prefixed_uri(aggregate).unwrap();
            assert_eq!((prefix, back.as_ref()), ("alpha", upstream), "{aggregate}");
        }
        // An unprefixed UI URI routes nowhere; the older `<prefix>__ui://...` form still does.
        assert_eq!(split_prefixed_uri("ui://weather/view.html"), None);
        let (prefix, back) = split_prefixed_uri("alpha__ui://weather/view.html").unwrap();
        assert_eq!((prefix, back.as_ref()), ("alpha", "ui://weather/view.html"));
    }

    #[test]
    fn ui_links_and_contents_are_named_as_the_aggregate_names_the_resource() {
        let mut tool = serde_json::json!({"name": "show", "_meta": {
            "ui": {"resourceUri": "ui://w/v.html", "visibility": ["model", "app"]},
            "ui/resourceUri": "ui://w/v.html", "other": "ui://w/v.html"}});
        assert!(prefix_ui_links(tool.as_object_mut().unwrap(), "alpha"));
        assert_eq!(tool["_meta"]["ui"]["resourceUri"], "ui://alpha__w/v.html");
        assert_eq!(tool["_meta"]["ui/resourceUri"], "ui://alpha__w/v.html");
        assert_eq!(tool["_meta"]["other"], "ui://w/v.html", "only the links");
        let mut plain =
            serde_json::json!({"name": "t", "_meta": {"ui": {"resourceUri": "https://x"}}});
        assert!(!prefix_ui_links(plain.as_object_mut().unwrap(), "alpha"));
        let mut read = serde_json::json!({"contents": [
            {"uri": "ui://w/v.html", "mimeType": "text/html;profile=mcp-app", "text": "<p>"},
            {"uri": "file:///a", "text": "a"}]});
        prefix_ui_contents(&mut read, "alpha");
        assert_eq!(read["contents"][0]["uri"], "ui://alpha__w/v.html");
        assert_eq!(read["contents"][1]["uri"], "file:///a");
    }
}
