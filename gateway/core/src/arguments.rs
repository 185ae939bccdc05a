//! Arguments bound to the caller (docs/architecture.md, invariant 15): a key's argument rules
//! (`keys[].arguments`), checked on every tool call before any upstream I/O, on every face
//! (the upstream plane's one entry for calls asks [`Caller::bound_arguments`]).
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

use base64::Engine as _;
use serde_json::{Map, Value};
use switchboard_snapshot::ArgumentRule;
use switchboard_snapshot::arguments::{Piece, binding};

use crate::scope::Caller;
use crate::table::Server;

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

    fn covers(&self, tool: &str) -> bool {
        self.tools
            .iter()
            .any(|p| switchboard_snapshot::glob_match(p, tool))
    }
}

/// Why a call's arguments were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentRefusal {
    /// A rule did not hold (its message, or the rule itself).
    #[error("{message} (argument rule `{rule}` of key {key})")]
    Rule {
        key: String,
        rule: String,
        message: String,
    },
    /// The call set an argument the key binds to the caller.
    #[error("argument {argument:?} is set from the caller by key {key}; the call cannot set it")]
    Bound { key: String, argument: String },
    /// A binding names a claim the caller's token does not carry.
    #[error(
        "argument {argument:?} is bound to the claim {claim:?}, which the caller's token does not carry (key {key})"
    )]
    MissingClaim {
        key: String,
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

impl Caller {
    /// The arguments a call of `tool` (the upstream's name) of `server` goes upstream with:
    /// `Ok(None)` to send them as they are, `Ok(Some(args))` with the caller's bindings set,
    /// or the refusal of the first grant that admits the tool (when none admits the call).
    pub fn bound_arguments(
        &self,
        server: &Server,
        tool: &str,
        arguments: Option<&Value>,
    ) -> Result<Option<Value>, RefusedArguments> {
        // The common case, on every call: no grant has rules at all.
        if self.grants_with_rules().next().is_none() {
            return Ok(None);
        }
        let shown = crate::route::prefixed_name(server.prefix(), tool);
        let mut refusal = None;
        let mut caller = None;
        for key in self
            .all_grants()
            .filter(|k| k.reaches(&server.spec) && k.admits_tool(&server.spec, tool))
        {
            let rules: Vec<&CompiledRule> =
                key.arguments.iter().filter(|r| r.covers(&shown)).collect();
            if rules.is_empty() {
                return Ok(None);
            }
            let caller = caller.get_or_insert_with(|| self.described());
            match check(&key.id, &rules, caller, arguments) {
                Ok(bound) => return Ok(bound),
                Err(e) => {
                    refusal.get_or_insert(e);
                }
            }
        }
        match refusal {
            Some(refusal) => Err(RefusedArguments {
                tool: shown,
                refusal,
            }),
            // No grant admits the tool: scope answers that, not this.
            None => Ok(None),
        }
    }

    fn grants_with_rules(&self) -> impl Iterator<Item = &Arc<crate::key::Key>> {
        self.all_grants().filter(|k| !k.arguments.is_empty())
    }

    /// The caller as argument rules, bindings and the policy hook see it: `kind` (`person`,
    /// `workload`, `key`), `subject`, `namespace`, `key`, `groups`, `claims` (never a token).
    pub fn described(&self) -> Map<String, Value> {
        let mut out = Map::new();
        let (kind, subject, namespace) = match (&self.person, &self.service_account) {
            (Some(person), _) => ("person", person.subject.clone(), self.key.namespace.clone()),
            (None, Some(sa)) => (
                "workload",
                format!("system:serviceaccount:{}:{}", sa.namespace, sa.name),
                sa.namespace.clone(),
            ),
            (None, None) => ("key", self.key.id.clone(), self.key.namespace.clone()),
        };
        out.insert("kind".into(), kind.into());
        out.insert("subject".into(), subject.into());
        out.insert("namespace".into(), namespace.into());
        out.insert("key".into(), self.key.id.clone().into());
        let groups = self
            .person
            .as_ref()
            .map(|p| p.groups.clone())
            .unwrap_or_default();
        out.insert("groups".into(), groups.into());
        out.insert("claims".into(), Value::Object(self.claims()));
        out
    }

    /// A signed-in person's token claims: the token the gateway holds for them (brokered),
    /// or the one they presented (verified before this caller existed). Empty for keys.
    fn claims(&self) -> Map<String, Value> {
        let Some(person) = &self.person else {
            return Map::new();
        };
        let presented = self
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' ').map(|(_, t)| t.trim()));
        let token = person.provider_token.as_deref().or(presented);
        token
            .and_then(|t| t.split('.').nth(1))
            .and_then(|payload| {
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(payload.trim_end_matches('='))
                    .ok()
            })
            .and_then(|bytes| serde_json::from_slice::<Map<String, Value>>(&bytes).ok())
            .unwrap_or_default()
    }
}

/// One grant's rules for a call: the bound arguments, or why not.
fn check(
    key: &str,
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
            let value = render(key, argument, pieces, caller)?;
            if let Some(given) = args.get(argument.as_str())
                && given.as_str() != Some(value.as_str())
            {
                return Err(ArgumentRefusal::Bound {
                    key: key.to_string(),
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
                key: key.to_string(),
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
    let mut context = cel::Context::default();
    let (Ok(args), Ok(caller)) = (cel::to_value(args), cel::to_value(caller)) else {
        return false;
    };
    context.add_variable_from_value("args", args);
    context.add_variable_from_value("caller", caller);
    matches!(program.execute(&context), Ok(cel::Value::Bool(true)))
}

fn render(
    key: &str,
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
                        key: key.to_string(),
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
        let ok = check("k", &[&repo], &caller(), Some(&json!({"repo": "acme/api"})));
        assert_eq!(ok, Ok(None));
        let refused = check("k", &[&repo], &caller(), Some(&json!({"repo": "evil/api"})));
        assert_eq!(
            refused.map_err(|e| e.to_string()),
            Err(
                "only acme repositories (argument rule `args.repo.startsWith(\"acme/\")` of key k)"
                    .to_string()
            )
        );
        // A missing argument is an error in the rule: refused, never let through.
        assert!(check("k", &[&repo], &caller(), None).is_err());

        let bind = compiled(
            json!({"tools": ["chat__post"], "bind": {"user": "${caller.subject}", "email": "mailto:${caller.claims.email}"}, "rule": "args.channel != 'general' && caller.groups.exists(g, g == 'team-a')"}),
        );
        let bound = check("k", &[&bind], &caller(), Some(&json!({"channel": "ops"})));
        assert_eq!(
            bound,
            Ok(Some(
                json!({"channel": "ops", "user": "alice", "email": "mailto:alice@example.com"})
            ))
        );
        let set = check(
            "k",
            &[&bind],
            &caller(),
            Some(&json!({"channel": "ops", "user": "bob"})),
        );
        assert!(
            matches!(set, Err(ArgumentRefusal::Bound { ref argument, .. }) if argument == "user"),
            "{set:?}"
        );
        let same = check(
            "k",
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
            check("k", &[&bind], &anonymous, Some(&json!({"channel": "ops"}))),
            Err(ArgumentRefusal::MissingClaim { .. })
        ));
        assert!(
            check(
                "k",
                &[&bind],
                &caller(),
                Some(&json!({"channel": "general"}))
            )
            .is_err()
        );
    }
}
