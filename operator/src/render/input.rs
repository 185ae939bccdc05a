//! What render reads besides the resources themselves.

use std::collections::{BTreeMap, HashMap};

use switchboard_crds::{IdentityProvider, McpKey, McpServer, McpVirtualServer, ModelRoute};

use crate::reservations::Reservations;
use crate::upstream_policy::UpstreamPolicy;
use switchboard_snapshot::{GatewaySettings, ServerAddressPolicy};

use super::verdict::*;

/// Secret data by `(namespace, name)`, values decoded.
pub(crate) type SecretData = HashMap<ObjectRef, BTreeMap<String, Vec<u8>>>;

/// Everything render needs besides the resources.
pub(crate) struct RenderInput<'a> {
    pub servers: &'a [McpServer],
    pub virtual_servers: &'a [McpVirtualServer],
    pub keys: &'a [McpKey],
    pub models: &'a [ModelRoute],
    pub identity_providers: &'a [IdentityProvider],
    pub secrets: &'a SecretData,
    /// ConfigMaps' data, by the same kind of reference (CA bundles may live in one).
    pub config_maps: &'a SecretData,
    pub settings: GatewaySettings,
    /// Which upstream addresses McpServers may use (admission; the gateway checks again).
    pub upstreams: &'a UpstreamPolicy,
    /// Namespaces with their own upstream policy (from their annotations), or the reason it
    /// does not parse.
    pub namespace_policies: &'a NamespacePolicies,
    /// Names an administrator reserved for some namespaces.
    pub reservations: &'a Reservations,
}

/// Namespace name → its upstream policy ([`crate::upstream_policy::namespace_policy`]).
pub(crate) type NamespacePolicies = BTreeMap<String, Result<ServerAddressPolicy, String>>;
