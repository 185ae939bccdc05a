//! Which of a caller's grants judge a tool call's arguments (see [`crate::arguments`] for the
//! rules themselves), and the caller as rules, bindings and the policy hook see it.

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::arguments::{CompiledRule, RefusedArguments, RulesOf, check};
use crate::scope::Caller;
use crate::table::Server;
use crate::virtual_server::{CallRefused, VirtualServer, hide_parameters, upstream_arguments};
use switchboard_snapshot::ToolOverride;

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
            match check(&RulesOf::Key(key.id.clone()), &rules, caller, arguments) {
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

    /// The arguments a call of `vs`'s presented tool `name` goes upstream with: the
    /// override's fixed values set and narrowed ones checked ([`upstream_arguments`]), then the
    /// virtual server's rules and bindings for this caller (the caller's grants' own rules are
    /// [`Caller::bound_arguments`]'s, asked by the upstream plane on every face).
    pub fn virtual_arguments(
        &self,
        vs: &VirtualServer,
        name: &str,
        o: Option<&ToolOverride>,
        arguments: Option<Value>,
    ) -> Result<Option<Value>, CallRefused> {
        let arguments = upstream_arguments(arguments, o).map_err(CallRefused::Presentation)?;
        let rules: Vec<&CompiledRule> = vs.rules_for(name).collect();
        if rules.is_empty() {
            return Ok(arguments);
        }
        let by = RulesOf::VirtualServer(vs.id().to_string());
        match check(&by, &rules, &self.described(), arguments.as_ref()) {
            Ok(Some(bound)) => Ok(Some(bound)),
            Ok(None) => Ok(arguments),
            Err(refusal) => Err(CallRefused::Rule(RefusedArguments {
                tool: name.to_string(),
                refusal,
            })),
        }
    }

    /// The arguments a grant of this caller sets for `tool` (the upstream's name) of `server`:
    /// the bindings of the grant a call goes with first (the first that admits the tool).
    /// Listings leave them out of the schemas this caller sees (the model never sees what it
    /// cannot set, the shape SEP-3221's secure parameters give them). Empty for most callers.
    pub fn bound_parameters(&self, server: &Server, tool: &str) -> Vec<&str> {
        if !self.has_argument_rules() {
            return Vec::new();
        }
        let Some(key) = self
            .all_grants()
            .find(|k| k.reaches(&server.spec) && k.admits_tool(&server.spec, tool))
        else {
            return Vec::new();
        };
        let shown = crate::route::prefixed_name(server.prefix(), tool);
        key.arguments
            .iter()
            .filter(|r| r.covers(&shown))
            .flat_map(CompiledRule::bound_names)
            .collect()
    }

    /// A listed tool (its JSON object; `tool`: the upstream's name) without the parameters this
    /// caller's grant binds ([`Caller::bound_parameters`]); untouched for most callers. Whether
    /// it binds any: the listing is then this caller's own (`cacheScope: private`).
    pub fn hide_bound_parameters(
        &self,
        server: &Server,
        tool: &str,
        listed: &mut Map<String, Value>,
    ) -> bool {
        let bound = self.bound_parameters(server, tool);
        hide_parameters(listed, &bound);
        !bound.is_empty()
    }

    /// Whether any of this caller's grants has argument rules (most have none).
    pub fn has_argument_rules(&self) -> bool {
        self.grants_with_rules().next().is_some()
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
