//! Where a secret value comes from. The operator always writes `value`; a person writing a file
//! may keep secrets out of it with `env` or `file`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A secret: a plain string, or `{value: ...}`, `{env: NAME}`, `{file: PATH}`.
#[derive(Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum SecretSource {
    Plain(String),
    Value { value: String },
    Env { env: String },
    File { file: String },
}

/// Secrets never print: `Debug` shows where a secret comes from, never what it is.
impl fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::Plain(_) | SecretSource::Value { .. } => f.write_str("<inline secret>"),
            SecretSource::Env { env } => write!(f, "<env {env}>"),
            SecretSource::File { file } => write!(f, "<file {file}>"),
        }
    }
}

/// How secrets from the environment and files are looked up; a trait so tests need neither.
pub trait SecretLookup {
    fn env(&self, name: &str) -> Option<String>;
    fn file(&self, path: &str) -> std::io::Result<String>;
}

/// The process environment and the real file system.
pub struct SystemLookup;

impl SecretLookup for SystemLookup {
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn file(&self, path: &str) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
}

impl SecretSource {
    /// The secret's value. A file's trailing newline is dropped (editors and `echo` add one).
    pub fn resolve(&self, lookup: &dyn SecretLookup) -> Result<String, String> {
        match self {
            SecretSource::Plain(v) | SecretSource::Value { value: v } => Ok(v.clone()),
            SecretSource::Env { env } => lookup
                .env(env)
                .ok_or_else(|| format!("environment variable {env} is not set")),
            SecretSource::File { file } => lookup
                .file(file)
                .map(|s| s.trim_end_matches(['\r', '\n']).to_string())
                .map_err(|e| format!("cannot read secret file {file}: {e}")),
        }
    }
}

/// The resolved value of a secret (after `load::resolve_secrets`); `None` before resolution.
pub fn resolved_value(source: &SecretSource) -> Option<&str> {
    match source {
        SecretSource::Plain(v) | SecretSource::Value { value: v } => Some(v),
        SecretSource::Env { .. } | SecretSource::File { .. } => None,
    }
}
