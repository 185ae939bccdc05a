//! The recording of provider requests that `GET /_requests` returns: path, query, headers
//! and parsed body, oldest first, up to a capacity (the oldest are dropped past it).

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use axum::http::HeaderMap;
use serde_json::{Map, Value, json};

pub struct Recorder {
    entries: Mutex<VecDeque<Value>>,
    capacity: usize,
}

impl Recorder {
    /// `capacity`: how many requests to keep (0 records nothing).
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::default(),
            capacity,
        }
    }

    pub fn record(
        &self,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
        body: Option<Value>,
    ) {
        if self.capacity == 0 {
            return;
        }
        let entry = json!({
            "path": path,
            "query": query,
            "headers": headers_json(headers),
            "body": body,
        });
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= self.capacity {
            entries.pop_front();
        }
        entries.push_back(entry);
    }

    pub fn all(&self) -> Value {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        Value::Array(entries.iter().cloned().collect())
    }

    pub fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

/// Headers as `{lower-case name: value}`; a repeated header's values are joined with `, `.
fn headers_json(headers: &HeaderMap) -> Value {
    let mut out = Map::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        match out.get_mut(name.as_str()) {
            Some(Value::String(prev)) => {
                prev.push_str(", ");
                prev.push_str(&value);
            }
            _ => {
                out.insert(name.as_str().to_owned(), Value::String(value.into_owned()));
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn records_in_order_up_to_capacity() {
        let r = Recorder::new(2);
        let mut h = HeaderMap::new();
        h.append("x-a", HeaderValue::from_static("1"));
        h.append("x-a", HeaderValue::from_static("2"));
        r.record("/a", None, &h, None);
        r.record("/b", Some("beta=true"), &h, Some(json!({"k": 1})));
        r.record("/c", None, &HeaderMap::new(), None);
        let all = r.all();
        assert_eq!(all[0]["path"], "/b");
        assert_eq!(all[0]["query"], "beta=true");
        assert_eq!(all[0]["headers"]["x-a"], "1, 2");
        assert_eq!(all[0]["body"]["k"], 1);
        assert_eq!(all[1]["body"], Value::Null);
        r.clear();
        assert_eq!(r.all(), json!([]));
    }
}
