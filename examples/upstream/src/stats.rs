//! Request counters and a ring buffer of recent requests, for tests (`/_stats`,
//! `/_requests`, `/_reset`). One short mutex hold per POST; headers are kept as a cheap
//! `HeaderMap` clone and only turned into JSON when someone asks.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::protocol::{self, H_SESSION};

struct Entry {
    path: String,
    method: Option<String>,
    tool: Option<String>,
    headers: HeaderMap,
    /// Token requests only: the form parameters (`client_secret` redacted).
    form: Option<Value>,
}

#[derive(Default)]
struct Inner {
    requests: u64,
    by_method: HashMap<String, u64>,
    by_path: HashMap<String, u64>,
    recent: VecDeque<Entry>,
}

pub struct Stats {
    inner: Mutex<Inner>,
    capacity: usize,
}

fn bump(map: &mut HashMap<String, u64>, key: &str) {
    match map.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            map.insert(key.to_owned(), 1);
        }
    }
}

impl Stats {
    /// `capacity`: how many recent requests `/_requests` keeps (0 = none).
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::default(),
            capacity,
        }
    }

    /// Records one POST. `method` is the JSON-RPC method (`None` if the body did not parse).
    pub fn record(
        &self,
        path: &str,
        method: Option<&str>,
        tool: Option<&str>,
        headers: &HeaderMap,
    ) {
        self.record_with_form(path, method, tool, headers, None);
    }

    /// [`Stats::record`] plus the form parameters of a token request (shown as `form`).
    pub fn record_with_form(
        &self,
        path: &str,
        method: Option<&str>,
        tool: Option<&str>,
        headers: &HeaderMap,
        form: Option<Value>,
    ) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.requests += 1;
        bump(&mut inner.by_method, method.unwrap_or("<invalid>"));
        bump(&mut inner.by_path, path);
        if self.capacity == 0 {
            return;
        }
        if inner.recent.len() >= self.capacity {
            inner.recent.pop_front();
        }
        inner.recent.push_back(Entry {
            path: path.to_owned(),
            method: method.map(str::to_owned),
            tool: tool.map(str::to_owned),
            headers: headers.clone(),
            form,
        });
    }

    pub fn summary(&self) -> Value {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        json!({ "requests": inner.requests, "by_method": inner.by_method, "by_path": inner.by_path })
    }

    /// Recent requests, oldest first.
    pub fn recent(&self) -> Value {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner
            .recent
            .iter()
            .map(|e| {
                let mut entry = json!({
                    "path": e.path,
                    "method": e.method,
                    "tool": e.tool,
                    "headers": protocol::headers_json(&e.headers),
                    "session": protocol::header_str(&e.headers, H_SESSION),
                });
                if let Some(form) = &e.form {
                    entry["form"] = form.clone();
                }
                entry
            })
            .collect()
    }

    pub fn reset(&self) {
        *self.inner.lock().unwrap_or_else(PoisonError::into_inner) = Inner::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_ring() {
        let s = Stats::new(2);
        let h = HeaderMap::new();
        s.record("/mcp", Some("tools/call"), Some("add"), &h);
        s.record("/mcp", Some("tools/list"), None, &h);
        s.record("/v/sse/mcp", None, None, &h);
        let sum = s.summary();
        assert_eq!(sum["requests"], 3);
        assert_eq!(sum["by_method"]["<invalid>"], 1);
        assert_eq!(sum["by_path"]["/mcp"], 2);
        let recent = s.recent();
        assert_eq!(recent.as_array().map(Vec::len), Some(2));
        assert_eq!(recent[0]["method"], "tools/list");
        s.reset();
        assert_eq!(s.summary()["requests"], 0);
        assert_eq!(s.recent(), json!([]));
    }
}
