//! Where snapshots come from: a config file (standalone mode) or the operator's snapshot stream
//! (with its TLS). Either feeds a [`switchboard_core::live::SnapshotSink`]; neither knows what
//! serves the table.

pub mod config_file;
pub mod operator_source;
pub mod operator_tls;
