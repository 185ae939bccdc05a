//! Shadowing on the aggregate endpoint: a server's tool whose name is another server's tool's
//! name, or looks like it (the same confusable skeleton, UTS #39: `send_emаil` with a Cyrillic
//! `а`, `turn_on` and `tum_on`), or whose description is another server's tool's description
//! under another name.

use std::collections::HashMap;

use unicode_security::confusable_detection::skeleton;

use crate::inspect::{Finding, FindingKind};

/// What shadowing compares of one tool, computed once per listing: its name, its name's
/// confusable skeleton, and its description's (whitespace left out), when long enough to tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowKey {
    pub name: String,
    skeleton: String,
    description: Option<String>,
}

impl ShadowKey {
    pub fn of(name: &str, description: Option<&str>) -> ShadowKey {
        ShadowKey {
            name: name.to_string(),
            skeleton: skeleton(&name.to_lowercase()).collect(),
            description: description
                .filter(|d| d.chars().count() >= COPIED_DESCRIPTION_CHARS)
                .map(|d| {
                    skeleton(&d.to_lowercase())
                        .filter(|c| !c.is_whitespace())
                        .collect()
                }),
        }
    }
}

/// One tool on the aggregate endpoint: the server that lists it (an index the caller
/// chooses) and its key.
#[derive(Debug, Clone, Copy)]
pub struct Listed<'a> {
    pub server: usize,
    pub key: &'a ShadowKey,
}

/// The shadowing findings among `tools`: for each index into `tools`, its findings, naming the
/// other server's tool by `server_name(server)` and its name. A name equal to another
/// server's is flagged on both (neither can be told to be the original); a confusable one only
/// on the tools whose name is not plain ASCII, unless both are (then both); a copied
/// description (of at least [`COPIED_DESCRIPTION_CHARS`] characters) on both.
pub fn shadowing(
    tools: &[Listed<'_>],
    server_name: impl Fn(usize) -> String,
) -> Vec<(usize, Finding)> {
    let mut by_skeleton: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut by_description: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, tool) in tools.iter().enumerate() {
        by_skeleton.entry(&tool.key.skeleton).or_default().push(i);
        if let Some(d) = &tool.key.description {
            by_description.entry(d).or_default().push(i);
        }
    }
    let mut out = Vec::new();
    for group in by_skeleton.values().filter(|g| g.len() > 1) {
        for &i in group {
            let me = tools[i].key;
            for &j in group {
                let other = tools[j].key;
                if tools[j].server == tools[i].server {
                    continue;
                }
                let (detail, flag) = if other.name == me.name {
                    ("the same name as", true)
                } else {
                    // A look-alike: the one that is not plain ASCII imitates; two ASCII names
                    // (`rn` and `m`) both stand flagged.
                    (
                        "a name confusable with",
                        !me.name.is_ascii() || other.name.is_ascii(),
                    )
                };
                if flag {
                    out.push((
                        i,
                        Finding {
                            kind: FindingKind::Shadowing,
                            at: "name".into(),
                            detail: format!(
                                "{detail} {}'s {}",
                                server_name(tools[j].server),
                                other.name
                            ),
                        },
                    ));
                    break;
                }
            }
        }
    }
    for group in by_description.values().filter(|g| g.len() > 1) {
        for &i in group {
            let me = tools[i].key;
            if let Some(other) = group
                .iter()
                .map(|&j| tools[j])
                .find(|o| o.server != tools[i].server && o.key.name != me.name)
            {
                out.push((
                    i,
                    Finding {
                        kind: FindingKind::Shadowing,
                        at: "description".into(),
                        detail: format!(
                            "the description of {}'s {}",
                            server_name(other.server),
                            other.key.name
                        ),
                    },
                ));
            }
        }
    }
    out.sort_by_key(|(i, _)| *i);
    out
}

/// Descriptions shorter than this are too plain to be told copied ("Lists items.").
pub const COPIED_DESCRIPTION_CHARS: usize = 40;

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(server: usize, name: &str) -> (usize, ShadowKey) {
        (server, ShadowKey::of(name, None))
    }

    fn flagged(tools: &[(usize, ShadowKey)]) -> Vec<(usize, String)> {
        let listed: Vec<Listed<'_>> = tools
            .iter()
            .map(|(server, key)| Listed {
                server: *server,
                key,
            })
            .collect();
        shadowing(&listed, |s| format!("s{s}"))
            .into_iter()
            .map(|(i, f)| (i, f.detail))
            .collect()
    }

    #[test]
    fn the_same_name_on_two_servers_is_flagged_on_both_and_within_one_server_not() {
        let tools = [
            listed(0, "send_email"),
            listed(1, "send_email"),
            listed(1, "other"),
        ];
        assert_eq!(
            flagged(&tools),
            vec![
                (0, "the same name as s1's send_email".to_string()),
                (1, "the same name as s0's send_email".to_string()),
            ]
        );
        assert!(flagged(&[listed(0, "a"), listed(0, "a")]).is_empty());
    }

    #[test]
    fn a_look_alike_is_flagged_on_the_imitator() {
        let tools = [listed(0, "send_email"), listed(1, "send_em\u{0430}il")];
        assert_eq!(
            flagged(&tools),
            vec![(1, "a name confusable with s0's send_email".to_string())]
        );
        // Case alone imitates too; ASCII look-alikes both stand flagged.
        let tools = [listed(0, "turn_on"), listed(1, "tum_on")];
        assert_eq!(flagged(&tools).len(), 2, "{:?}", flagged(&tools));
        assert!(flagged(&[listed(0, "get_issue"), listed(1, "get_issues")]).is_empty());
    }

    #[test]
    fn a_copied_description_under_another_name_is_flagged() {
        let d = "Send an email to the given recipients with a subject and a body.";
        let tools = [
            (0, ShadowKey::of("send_email", Some(d))),
            (1, ShadowKey::of("mail_send", Some(d))),
            (2, ShadowKey::of("list", Some("Lists items."))),
            (3, ShadowKey::of("list2", Some("Lists items."))),
        ];
        let f = flagged(&tools);
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(f[1], (1, "the description of s0's send_email".to_string()));
    }
}
