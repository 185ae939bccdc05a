//! Reading an upstream's HTTP answer: a JSON body or an SSE stream, into the one JSON-RPC
//! response that answers our request.

use serde_json::Value;

/// The JSON-RPC response in a body, whichever way the upstream framed it.
pub fn response_from_body(content_type: &str, body: &[u8], id: &Value) -> Option<Value> {
    if content_type.starts_with("text/event-stream") {
        sse_messages(body)
            .into_iter()
            .find(|m| is_response_to(m, id))
    } else {
        let v: Value = serde_json::from_slice(body).ok()?;
        match v {
            Value::Array(items) => items.into_iter().find(|m| is_response_to(m, id)),
            v if v.is_object() => Some(v),
            _ => None,
        }
    }
}

fn is_response_to(message: &Value, id: &Value) -> bool {
    message.get("id") == Some(id)
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// Every `data:` payload of an SSE body that parses as JSON, in order. Multi-line data fields
/// are joined with `\n` as the SSE specification says; comments and other fields are skipped.
pub fn sse_messages(body: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(body);
    let mut out = Vec::new();
    let mut data = String::new();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            flush(&mut data, &mut out);
        } else if let Some(rest) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        }
    }
    flush(&mut data, &mut out);
    out
}

fn flush(data: &mut String, out: &mut Vec<Value>) {
    if !data.is_empty() {
        if let Ok(v) = serde_json::from_str(data) {
            out.push(v);
        }
        data.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_the_response_among_notifications() {
        let body = b"event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\n: keepalive\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"ok\":true}}\n\n";
        let r = response_from_body("text/event-stream", body, &json!(7)).unwrap();
        assert_eq!(r["result"]["ok"], true);
        assert!(response_from_body("text/event-stream", body, &json!(8)).is_none());
    }

    #[test]
    fn json_bodies() {
        let r = response_from_body(
            "application/json",
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            &json!(1),
        );
        assert!(r.is_some());
        assert!(response_from_body("application/json", b"<html>", &json!(1)).is_none());
    }
}
