//! Arguments bound to the caller (docs/architecture.md, invariant 14): a key's argument rules
//! (`keys[].arguments`), checked on every tool call before any upstream I/O, on every face
//! (the upstream plane's one entry for calls asks [`crate::scope::Caller::bound_arguments`]).
//!
//! This module is the rules themselves (compiled, checked, bound); which grant's rules apply to
//! a caller is `caller_arguments`.
//!
//! A grant's rules for a tool are CEL expressions over `args` (the call's arguments, after
//! the bindings) and `caller` (`subject`, `namespace`, `key`, `kind`, `groups`, `claims`), all
//! of which must be true; its bindings set arguments from the caller, and a call that sets a
//! bound argument to anything else is refused (the model cannot choose it). Scope is the
//! union of a caller's grants, and so are rules: the call goes with the first grant (in key
//! order) that admits the tool and whose rules hold, with that grant's bindings; a grant with
//! no rule for the tool admits any arguments.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};
use switchboard_snapshot::ArgumentRule;
use switchboard_snapshot::arguments::{Piece, binding};

/// One rule of a key, compiled.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    tools: Vec<String>,
    /// The expression as written (what a refusal names) and its program.
    rule: Option<(String, Arc<cel::Program>)>,
    message: Option<String>,
    bind: Vec<(String, Vec<Piece>)>,
}

impl CompiledRule {
    /// The rule as the gateway runs it; `None` for what validation refused (never loaded).
    pub(crate) fn compile(rule: &ArgumentRule) -> Option<CompiledRule> {
        let program = match &rule.rule {
            Some(source) => Some((
                source.clone(),
                Arc::new(cel::Program::compile(source).ok()?),
            )),
            None => None,
        };
        let bind = rule
            .bind
            .iter()
            .map(|(name, template)| Some((name.clone(), binding(template).ok()?)))
            .collect::<Option<Vec<_>>>()?;
        Some(CompiledRule {
            tools: rule.tools.clone(),
            rule: program,
            message: rule.message.clone(),
            bind,
        })
    }

    pub(crate) fn covers(&self, tool: &str) -> bool {
        self.tools
            .iter()
            .any(|p| switchboard_snapshot::glob_match(p, tool))
    }

    /// The arguments this rule binds to the caller.
    pub(crate) fn bound_names(&self) -> impl Iterator<Item = &str> {
        self.bind.iter().map(|(name, _)| name.as_str())
    }
}

/// Whose rules refused a call: a key's (`keys[].arguments`) or a virtual server's
/// (`virtualServers[].arguments`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RulesOf {
    Key(String),
    VirtualServer(String),
}

impl std::fmt::Display for RulesOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RulesOf::Key(id) => write!(f, "key {id}"),
            RulesOf::VirtualServer(id) => write!(f, "virtual server {id}"),
        }
    }
}

/// Why a call's arguments were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentRefusal {
    /// A rule did not hold (its message, or the rule itself).
    #[error("{message} (argument rule `{rule}` of {by})")]
    Rule {
        by: RulesOf,
        rule: String,
        message: String,
    },
    /// The call set an argument the key (or virtual server) binds to the caller.
    #[error("argument {argument:?} is set from the caller by {by}; the call cannot set it")]
    Bound { by: RulesOf, argument: String },
    /// A binding names a claim the caller's token does not carry.
    #[error(
        "argument {argument:?} is bound to the claim {claim:?}, which the caller's token does not carry ({by})"
    )]
    MissingClaim {
        by: RulesOf,
        argument: String,
        claim: String,
    },
}

/// A tool call refused for its arguments: the tool (as the caller named it) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool {tool}: {refusal}")]
pub struct RefusedArguments {
    pub tool: String,
    pub refusal: ArgumentRefusal,
}

/// One grant's (or virtual server's) rules for a call: the bound arguments, or why not.
pub(crate) fn check(
    by: &RulesOf,
    rules: &[&CompiledRule],
    caller: &Map<String, Value>,
    arguments: Option<&Value>,
) -> Result<Option<Value>, ArgumentRefusal> {
    let mut args: Map<String, Value> = match arguments {
        Some(Value::Object(map)) => map.clone(),
        _ => Map::new(),
    };
    let mut bound: BTreeMap<&str, String> = BTreeMap::new();
    for rule in rules {
        for (argument, pieces) in &rule.bind {
            let value = render(by, argument, pieces, caller)?;
            if let Some(given) = args.get(argument.as_str())
                && given.as_str() != Some(value.as_str())
            {
                return Err(ArgumentRefusal::Bound {
                    by: by.clone(),
                    argument: argument.clone(),
                });
            }
            bound.insert(argument, value);
        }
    }
    for (argument, value) in &bound {
        args.insert((*argument).to_string(), Value::from(value.as_str()));
    }
    let args = Value::Object(args);
    for rule in rules {
        let Some((source, program)) = &rule.rule else {
            continue;
        };
        let holds = evaluate(program, &args, caller);
        if !holds {
            return Err(ArgumentRefusal::Rule {
                by: by.clone(),
                rule: source.clone(),
                message: rule
                    .message
                    .clone()
                    .unwrap_or_else(|| "the arguments are refused".into()),
            });
        }
    }
    Ok((!bound.is_empty()).then_some(args))
}

/// Whether a rule holds: true, and nothing else (an error, such as a missing argument, or a
/// value that is not a boolean, refuses).
fn evaluate(program: &cel::Program, args: &Value, caller: &Map<String, Value>) -> bool {
    // The standard functions, built once: `Context::default()` builds them on every call.
    static STDLIB: std::sync::LazyLock<Arc<cel::Env>> =
        std::sync::LazyLock::new(|| Arc::new(cel::Env::stdlib()));
    let mut context = cel::Context::with_env(STDLIB.clone());
    let (Ok(args), Ok(caller)) = (cel::to_value(args), cel::to_value(caller)) else {
        return false;
    };
    context.add_variable_from_value("args", args);
    context.add_variable_from_value("caller", caller);
    matches!(program.execute(&context), Ok(cel::Value::Bool(true)))
}

fn render(
    by: &RulesOf,
    argument: &str,
    pieces: &[Piece],
    caller: &Map<String, Value>,
) -> Result<String, ArgumentRefusal> {
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Caller(field) => {
                out.push_str(
                    caller
                        .get(*field)
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                );
            }
            Piece::Claim(claim) => {
                let value = caller
                    .get("claims")
                    .and_then(|c| c.get(claim))
                    .and_then(|v| match v {
                        Value::String(s) => Some(s.clone()),
                        Value::Number(n) => Some(n.to_string()),
                        Value::Bool(b) => Some(b.to_string()),
                        _ => None,
                    })
                    .ok_or_else(|| ArgumentRefusal::MissingClaim {
                        by: by.clone(),
                        argument: argument.to_string(),
                        claim: claim.clone(),
                    })?;
                out.push_str(&value);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compiled(yaml: Value) -> CompiledRule {
        let rule: ArgumentRule = serde_json::from_value(yaml).expect("a rule");
        CompiledRule::compile(&rule).expect("compiles")
    }

    fn k() -> RulesOf {
        RulesOf::Key("k".into())
    }

    fn caller() -> Map<String, Value> {
        json!({"kind": "person", "subject": "alice", "namespace": "team-a", "key": "team-a/people",
               "groups": ["team-a"], "claims": {"email": "alice@example.com"}})
        .as_object()
        .cloned()
        .unwrap_or_default()
    }

    #[test]
    fn a_rule_refuses_naming_itself_and_a_binding_cannot_be_set() {
        let repo = compiled(
            json!({"tools": ["gh__*"], "rule": "args.repo.startsWith(\"acme/\")", "message": "only acme repositories"}),
        );
        let ok = check(
            &k(),
            &[&repo],
            &caller(),
            Some(&json!({"repo": "acme/api"})),
        );
        assert_eq!(ok, Ok(None));
        let refused = check(
            &k(),
            &[&repo],
            &caller(),
            Some(&json!({"repo": "evil/api"})),
        );
        assert_eq!(
            refused.map_err(|e| e.to_string()),
            Err(
                "only acme repositories (argument rule `args.repo.startsWith(\"acme/\")` of key k)"
                    .to_string()
            )
        );
        // A missing argument is an error in the rule: refused, never let through.
        assert!(check(&k(), &[&repo], &caller(), None).is_err());

        let bind = compiled(
            json!({"tools": ["chat__post"], "bind": {"user": "${caller.subject}", "email": "mailto:${caller.claims.email}"}, "rule": "args.channel != 'general' && caller.groups.exists(g, g == 'team-a')"}),
        );
        let bound = check(&k(), &[&bind], &caller(), Some(&json!({"channel": "ops"})));
        assert_eq!(
            bound,
            Ok(Some(
                json!({"channel": "ops", "user": "alice", "email": "mailto:alice@example.com"})
            ))
        );
        let set = check(
            &k(),
            &[&bind],
            &caller(),
            Some(&json!({"channel": "ops", "user": "bob"})),
        );
        assert!(
            matches!(set, Err(ArgumentRefusal::Bound { ref argument, .. }) if argument == "user"),
            "{set:?}"
        );
        let same = check(
            &k(),
            &[&bind],
            &caller(),
            Some(&json!({"channel": "ops", "user": "alice"})),
        );
        assert!(
            same.is_ok(),
            "the bound value itself is no attempt to set another"
        );
        let mut anonymous = caller();
        anonymous.insert("claims".into(), json!({}));
        assert!(matches!(
            check(&k(), &[&bind], &anonymous, Some(&json!({"channel": "ops"}))),
            Err(ArgumentRefusal::MissingClaim { .. })
        ));
        assert!(
            check(
                &k(),
                &[&bind],
                &caller(),
                Some(&json!({"channel": "general"}))
            )
            .is_err()
        );
    }
}
