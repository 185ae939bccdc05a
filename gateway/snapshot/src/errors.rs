//! What is wrong with a snapshot: each problem with the path of the field that holds it.

use std::fmt;

/// One problem in one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Everything wrong with a snapshot; the caller keeps its previous good one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SnapshotError {
    pub errors: Vec<FieldError>,
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.errors.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join("; "))
    }
}
