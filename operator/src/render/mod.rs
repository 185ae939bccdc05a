//! Rendering: McpServers, McpVirtualServers, McpKeys, ModelRoutes, IdentityProviders and the
//! Secrets and ConfigMaps they reference → one gateway snapshot, plus a verdict per resource
//! saying what happened to it. Pure: no API server, no clock, no I/O, so every rule here is
//! tested over plain values.
//!
//! One file per kind (`servers`, `virtual_servers`, `models`, `identity_providers`, `keys`),
//! what they share beside them: the verdict (`verdict`), what render reads (`input`), the
//! lookups of what a resource references (`references`), and the one rule for a name two
//! resources want (`contested`: the older keeps it).
//!
//! A resource that cannot be rendered (missing Secret, prefix or model name taken, a tool server
//! that is not in the snapshot, invalid after resolution) is left out of the snapshot with a
//! verdict that says why; nothing else is affected (docs/architecture.md, invariant 9).

mod contested;
mod identity_providers;
mod input;
mod keys;
mod models;
mod references;
mod servers;
mod verdict;
mod virtual_servers;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use switchboard_snapshot::{SCHEMA_VERSION, Snapshot};

use identity_providers::render_identity_providers;
pub(crate) use input::{NamespacePolicies, RenderInput, SecretData};
pub(crate) use keys::KEY_FIELD;
use keys::render_keys;
pub(crate) use models::model_names;
use models::render_models;
use servers::render_servers;
#[cfg(test)]
pub(crate) use verdict::Reason;
pub(crate) use verdict::{KeyOutcome, ObjectRef, Verdict, object_ref};
use virtual_servers::render_virtual_servers;

#[derive(Debug)]
pub struct Rendered {
    pub snapshot: Snapshot,
    pub servers: BTreeMap<ObjectRef, Verdict>,
    pub keys: BTreeMap<ObjectRef, KeyOutcome>,
    pub models: BTreeMap<ObjectRef, Verdict>,
    pub identity_providers: BTreeMap<ObjectRef, Verdict>,
    pub virtual_servers: BTreeMap<ObjectRef, Verdict>,
}

impl Rendered {
    /// With `--secret-selector`, a Secret that "does not exist" may only be unlabelled: say so
    /// where the user looks (the condition).
    pub fn note_secret_selector(&mut self, selector: &str) {
        let verdicts = self
            .servers
            .values_mut()
            .chain(self.models.values_mut())
            .chain(self.identity_providers.values_mut())
            .chain(self.virtual_servers.values_mut())
            .chain(self.keys.values_mut().map(|k| &mut k.verdict));
        for verdict in verdicts {
            if verdict.secret_missing {
                verdict.message.push_str(&format!(
                    " (the operator only sees Secrets labelled {selector})"
                ));
            }
        }
    }
}

/// The resources → one snapshot and a verdict per resource. Servers first (virtual servers and
/// ModelRoutes attach them), identity providers before the keys that name them.
pub fn render(input: RenderInput<'_>) -> Rendered {
    let (verdicts, specs) = render_servers(&input);
    let (virtual_servers, virtual_specs) = render_virtual_servers(&input, &specs);
    let (models, model_specs) = render_models(&input, &specs, &virtual_specs);
    let (identity_providers, provider_specs) = render_identity_providers(&input);
    let (keys, key_specs) = render_keys(&input, &provider_specs);
    Rendered {
        snapshot: Snapshot {
            version: SCHEMA_VERSION,
            generation: 0,
            gateway: input.settings,
            servers: specs,
            keys: key_specs,
            models: model_specs,
            identity_providers: provider_specs,
            virtual_servers: virtual_specs,
        },
        servers: verdicts,
        keys,
        models,
        identity_providers,
        virtual_servers,
    }
}
