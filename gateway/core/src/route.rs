//! Aggregate names are `<prefix>__<tool>`. Prefixes are DNS-1123 labels and cannot contain `_`,
//! so the first `__` ends the prefix: routing is a parse, never a search of listings.

use serde_json::Value;

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
    let (prefix, rest) = name.split_once(SEPARATOR)?;
    (!prefix.is_empty() && !rest.is_empty()).then_some((prefix, rest))
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
        assert_eq!(prefixed_name("w", "get"), "w__get");
    }
}
