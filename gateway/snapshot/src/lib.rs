//! The Switchboard snapshot: one versioned schema, shared by the operator (which renders it from
//! Kubernetes resources) and the gateway (which serves it). A standalone config file is the same
//! schema with secrets given inline, from the environment or from files.

pub mod delivery;
mod errors;
mod identity;
pub mod key_hash;
pub mod load;
mod model;
mod names;
pub mod networks;
pub mod openapi;
mod schema;
mod secret;
pub mod tls;

pub mod arguments;
pub use identity::{
    Brokered, IdentityAssertions, IdentityClaims, IdentityProviderSpec, PeopleBinding,
    default_access_ttl, default_algorithms, default_brokered_scopes, default_clock_skew,
    default_refresh_ttl,
};
pub use load::{FieldError, SnapshotError, load, parse, resolve_secrets, resolved_value, validate};
pub use model::*;
pub use names::is_tool_name;
pub use networks::{Denied, NetworkPolicy, ScopedPolicy, ServerAddressPolicy, UpstreamNetworks};
pub use openapi::{OpenApiSpec, OperationOverride, OperationSelector};
pub use secret::{SecretLookup, SecretSource, SystemLookup};
pub use tls::{ClientCertificate, GatewayTls, TlsMaterial, UpstreamTls};
