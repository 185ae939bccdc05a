//! Starts the real binary on port 0 and talks HTTP/1.1 to it over loopback.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Provider {
    child: Child,
    addr: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(args: &[&str]) -> Provider {
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard-scripted-provider"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn provider");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read line");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .expect("ready line")
        .to_owned();
    Provider { child, addr }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
    /// Whether a chunked body ended with its final (empty) chunk.
    complete: bool,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// SSE events as `(event name, data)`; a `[DONE]` data line is kept as the string.
    fn events(&self) -> Vec<(Option<String>, Value)> {
        self.body
            .split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let mut name = None;
                let mut data = Value::Null;
                for line in e.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = Some(n.to_owned());
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data = serde_json::from_str(d).unwrap_or_else(|_| json!(d));
                    }
                }
                (name, data)
            })
            .collect()
    }
}

impl Provider {
    async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        let mut stream = TcpStream::connect(&self.addr).await.expect("connect");
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\
             content-type: application/json\r\n",
            self.addr
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
        stream.write_all(req.as_bytes()).await.expect("write");
        // Read until EOF or an error (a deliberately broken stream may end either way).
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
            raw.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8(raw).expect("utf8");
        let (head, body) = text.split_once("\r\n\r\n").expect("head");
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .expect("status");
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
            .collect();
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v == "chunked");
        let (body, complete) = if chunked {
            dechunk(body)
        } else {
            (body.to_owned(), true)
        };
        Reply {
            status,
            headers,
            body,
            complete,
        }
    }

    async fn post(&self, path: &str, headers: &[(&str, &str)], body: Value) -> Reply {
        self.request("POST", path, headers, &body.to_string()).await
    }

    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.request("GET", path, headers, "").await
    }

    async fn script(&self, rules: Value) {
        let r = self.post("/_script", &[], json!({ "rules": rules })).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }

    async fn requests(&self) -> Vec<Value> {
        match self.get("/_requests", &[]).await.json() {
            Value::Array(entries) => entries,
            other => panic!("not an array: {other}"),
        }
    }
}

/// The body of a chunked transfer and whether it ended with the final chunk.
fn dechunk(mut body: &str) -> (String, bool) {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 {
            return (out, true);
        }
        if rest.len() < n + 2 {
            out.push_str(rest);
            break;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    (out, false)
}

/// Appends the string `piece` to the string field `key` of `block`.
fn append(block: &mut Value, key: &str, piece: &Value) {
    let joined = format!(
        "{}{}",
        block[key].as_str().unwrap_or_default(),
        piece.as_str().unwrap_or_default()
    );
    block[key] = json!(joined);
}

/// A two-round Anthropic conversation: the user asks, the assistant calls `Read`, the user
/// answers with the tool result.
fn anthropic_tool_round(stream: bool) -> Value {
    json!({
        "model": "claude-test", "max_tokens": 100, "stream": stream,
        "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "read the file"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "a"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "file body"}]},
            ]},
        ],
    })
}

fn tool_then_text_rules() -> Value {
    json!([
        {"when": {"no_tool_results": true, "last_user_text_contains": "read the file"},
         "respond": {"content": [
             {"type": "thinking", "thinking": "I should look at it first", "signature": "sig-1"},
             {"type": "text", "text": "Let me read that file for you now."},
             {"type": "tool_use", "name": "Read", "input": {"file_path": "notes/a.txt", "limit": 10}},
         ]}},
        {"when": {"last_tool_result_for": "Read", "has_tool": "Read"},
         "respond": {"content": [
             {"type": "text", "text": "It says: {{tool_result:Read}} ({{messages}} messages)"},
         ]}},
    ])
}

#[tokio::test]
async fn rules_match_and_requests_are_recorded() {
    let p = start(&[]);
    p.script(tool_then_text_rules()).await;

    let r = p
        .post(
            "/v1/messages?beta=true",
            &[("anthropic-version", "2023-06-01")],
            anthropic_tool_round(false),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let m = r.json();
    assert_eq!(m["type"], "message");
    assert_eq!(m["role"], "assistant");
    assert_eq!(m["model"], "claude-test");
    assert_eq!(m["stop_reason"], "end_turn");
    assert_eq!(m["stop_sequence"], Value::Null);
    assert!(m["id"].as_str().is_some_and(|id| id.starts_with("msg_")));
    assert_eq!(
        m["content"],
        json!([{"type": "text", "text": "It says: file body (3 messages)"}])
    );
    assert_eq!(m["usage"]["output_tokens"], 7);
    assert_eq!(m["usage"]["cache_read_input_tokens"], 0);

    // No rule matches: the default answer.
    let r = p
        .post(
            "/v1/messages",
            &[],
            json!({"model": "m", "messages": [{"role": "user", "content": "hello"}]}),
        )
        .await;
    assert_eq!(r.json()["content"][0]["text"], "scripted default answer");

    let models = p.get("/v1/models", &[]).await;
    assert_eq!(models.json()["data"][0]["id"], "scripted-model");
    let count = p
        .post("/v1/messages/count_tokens", &[], json!({"messages": []}))
        .await;
    assert_eq!(count.json(), json!({"input_tokens": 4}));

    let rec = p.requests().await;
    assert_eq!(rec.len(), 4);
    assert_eq!(rec[0]["path"], "/v1/messages");
    assert_eq!(rec[0]["query"], "beta=true");
    assert_eq!(rec[0]["headers"]["anthropic-version"], "2023-06-01");
    assert_eq!(rec[0]["body"], anthropic_tool_round(false));
    assert_eq!(rec[1]["query"], Value::Null);
    assert_eq!(rec[2]["path"], "/v1/models");
    assert_eq!(rec[2]["body"], Value::Null);
    assert_eq!(rec[3]["path"], "/v1/messages/count_tokens");

    let reset = p.post("/_reset", &[], json!({})).await;
    assert_eq!(reset.status, 204);
    assert!(p.requests().await.is_empty());
    let r = p
        .post("/v1/messages", &[], anthropic_tool_round(false))
        .await;
    assert_eq!(r.json()["content"][0]["text"], "scripted default answer");
}

#[tokio::test]
async fn anthropic_tool_use_non_stream_and_stream() {
    let p = start(&[]);
    p.script(tool_then_text_rules()).await;
    let ask = json!({"model": "claude-test", "max_tokens": 10,
                     "messages": [{"role": "user", "content": "please read the file"}]});

    let m = p.post("/v1/messages", &[], ask.clone()).await.json();
    assert_eq!(m["stop_reason"], "tool_use");
    let kinds: Vec<&str> = m["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["type"].as_str())
        .collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use"]);
    assert_eq!(m["content"][0]["signature"], "sig-1");
    let id = m["content"][2]["id"].as_str().unwrap_or_default();
    assert!(id.starts_with("toolu_") && id.len() == 30, "{id}");
    assert_eq!(
        m["content"][2]["input"],
        json!({"file_path": "notes/a.txt", "limit": 10})
    );

    let mut ask = ask;
    ask["stream"] = json!(true);
    let r = p.post("/v1/messages", &[], ask).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert!(r.complete);
    let events = r.events();
    for (name, data) in &events {
        assert_eq!(name.as_deref(), data["type"].as_str(), "event name = type");
    }
    let names: Vec<&str> = events.iter().filter_map(|(n, _)| n.as_deref()).collect();
    assert_eq!(names[..2], ["message_start", "ping"]);
    assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"]);
    let start = &events[0].1["message"];
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["usage"]["output_tokens"], 1);

    // Rebuild the blocks from the deltas.
    let mut blocks: Vec<Value> = Vec::new();
    let mut json_parts: Vec<String> = Vec::new();
    for (_, e) in &events {
        match e["type"].as_str() {
            Some("content_block_start") => {
                blocks.push(e["content_block"].clone());
                json_parts.push(String::new());
            }
            Some("content_block_delta") => {
                let i = e["index"].as_u64().and_then(|i| usize::try_from(i).ok());
                let i = i.expect("index");
                let d = &e["delta"];
                match d["type"].as_str() {
                    Some("text_delta") => append(&mut blocks[i], "text", &d["text"]),
                    Some("thinking_delta") => append(&mut blocks[i], "thinking", &d["thinking"]),
                    Some("signature_delta") => blocks[i]["signature"] = d["signature"].clone(),
                    Some("input_json_delta") => {
                        json_parts[i].push_str(d["partial_json"].as_str().unwrap_or_default());
                    }
                    other => panic!("unexpected delta {other:?}"),
                }
            }
            _ => {}
        }
    }
    assert_eq!(blocks.len(), 3);
    assert_eq!(blocks[0]["thinking"], "I should look at it first");
    assert_eq!(blocks[0]["signature"], "sig-1");
    assert_eq!(blocks[1]["text"], "Let me read that file for you now.");
    assert_eq!(blocks[2]["input"], json!({}));
    assert_eq!(blocks[2]["name"], "Read");
    let input: Value = serde_json::from_str(&json_parts[2]).expect("tool input json");
    assert_eq!(input, json!({"file_path": "notes/a.txt", "limit": 10}));
    let text_deltas = events
        .iter()
        .filter(|(_, e)| e["delta"]["type"] == "text_delta")
        .count();
    let json_deltas = events
        .iter()
        .filter(|(_, e)| e["delta"]["type"] == "input_json_delta")
        .count();
    assert!(text_deltas >= 2 && json_deltas >= 2);
    let delta = &events[events.len() - 2].1;
    assert_eq!(
        delta["delta"],
        json!({"stop_reason": "tool_use", "stop_sequence": null})
    );
    assert_eq!(delta["usage"]["output_tokens"], 21);
}

#[tokio::test]
async fn openai_non_stream_and_stream() {
    let p = start(&[]);
    p.script(json!([
        {"when": {"path": "/v1/chat/completions", "no_tool_results": true},
         "respond": {"content": [
             {"type": "thinking", "thinking": "skipped", "signature": "s"},
             {"type": "text", "text": "Calling the tool right now, ok?"},
             {"type": "tool_use", "name": "Read", "input": {"file_path": "notes/a.txt"}},
         ], "usage": {"input_tokens": 11, "output_tokens": 5}}},
        {"when": {"last_tool_result_for": "Read"},
         "respond": {"content": [{"type": "text", "text": "got {{tool_result:Read}}"}]}},
    ]))
    .await;
    let ask = json!({"model": "gpt-test",
                     "tools": [{"type": "function", "function": {"name": "Read", "parameters": {}}}],
                     "messages": [{"role": "user", "content": "hi"}]});

    let c = p
        .post("/v1/chat/completions", &[], ask.clone())
        .await
        .json();
    assert_eq!(c["object"], "chat.completion");
    assert!(c["id"].as_str().is_some_and(|i| i.starts_with("chatcmpl-")));
    assert_eq!(c["model"], "gpt-test");
    let choice = &c["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(
        choice["message"]["content"],
        "Calling the tool right now, ok?"
    );
    let call = &choice["message"]["tool_calls"][0];
    assert!(call["id"].as_str().is_some_and(|i| i.starts_with("call_")));
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "Read");
    assert_eq!(
        call["function"]["arguments"],
        r#"{"file_path":"notes/a.txt"}"#
    );
    assert_eq!(
        c["usage"],
        json!({"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16})
    );

    // The tool answer round, not streamed: no tool_calls key at all.
    let mut round = ask.clone();
    round["messages"] = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [call.clone()]},
        {"role": "tool", "tool_call_id": call["id"].clone(), "content": "the file"},
    ]);
    let c = p.post("/v1/chat/completions", &[], round).await.json();
    assert_eq!(c["choices"][0]["message"]["content"], "got the file");
    assert_eq!(c["choices"][0]["finish_reason"], "stop");
    assert!(c["choices"][0]["message"].get("tool_calls").is_none());

    // Streamed, with and without the usage chunk.
    for include_usage in [true, false] {
        let mut ask = ask.clone();
        ask["stream"] = json!(true);
        ask["stream_options"] = json!({"include_usage": include_usage});
        let r = p.post("/v1/chat/completions", &[], ask).await;
        assert_eq!(r.header("content-type"), Some("text/event-stream"));
        assert!(r.complete);
        let events = r.events();
        assert!(events.iter().all(|(name, _)| name.is_none()));
        assert_eq!(events.last().map(|(_, d)| d.clone()), Some(json!("[DONE]")));
        let chunks: Vec<&Value> = events[..events.len() - 1].iter().map(|(_, d)| d).collect();
        assert!(
            chunks
                .iter()
                .all(|c| c["object"] == "chat.completion.chunk")
        );
        assert_eq!(
            chunks[0]["choices"][0]["delta"],
            json!({"role": "assistant", "content": ""})
        );
        let mut text = String::new();
        let mut args = String::new();
        let mut finish = None;
        for c in &chunks {
            let Some(choice) = c["choices"].get(0) else {
                continue;
            };
            text.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
            if let Some(tc) = choice["delta"]["tool_calls"].get(0) {
                assert_eq!(tc["index"], 0);
                if tc.get("id").is_some() {
                    assert_eq!(tc["function"]["name"], "Read");
                    assert_eq!(tc["function"]["arguments"], "");
                } else {
                    args.push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
                }
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                assert_eq!(choice["delta"], json!({}));
                finish = Some(f.to_owned());
            }
        }
        assert_eq!(text, "Calling the tool right now, ok?");
        assert_eq!(args, r#"{"file_path":"notes/a.txt"}"#);
        assert_eq!(finish.as_deref(), Some("tool_calls"));
        let last = chunks[chunks.len() - 1];
        if include_usage {
            assert_eq!(last["choices"], json!([]));
            assert_eq!(last["usage"]["total_tokens"], 16);
        } else {
            assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
            assert!(chunks.iter().all(|c| c.get("usage").is_none()));
        }
    }
}

#[tokio::test]
async fn error_rule_delay_and_broken_stream() {
    let p = start(&[]);
    p.script(json!([
        {"when": {"model": "limited"},
         "respond": {"error": {"status": 429, "headers": {"retry-after": "3"},
                               "body": {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}}}},
        {"when": {"model": "plain-error"}, "respond": {"error": {"status": 529}}},
        {"when": {"stream": true}, "respond": {"break_stream_after": 3, "delay_ms": 50}},
    ]))
    .await;

    let r = p
        .post(
            "/v1/messages",
            &[],
            json!({"model": "limited", "stream": true, "messages": []}),
        )
        .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("3"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json()["error"]["message"], "slow down");

    let r = p
        .post(
            "/v1/messages",
            &[],
            json!({"model": "plain-error", "messages": []}),
        )
        .await;
    assert_eq!(r.status, 529);
    assert_eq!(r.json()["error"]["type"], "overloaded_error");
    let r = p
        .post(
            "/v1/chat/completions",
            &[],
            json!({"model": "plain-error", "messages": []}),
        )
        .await;
    assert_eq!(r.status, 529);
    assert!(r.json()["error"]["message"].is_string());

    let started = std::time::Instant::now();
    let r = p
        .post(
            "/v1/messages",
            &[],
            json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
    assert!(started.elapsed() >= std::time::Duration::from_millis(50));
    assert_eq!(r.status, 200);
    assert!(!r.complete, "a broken stream must not end cleanly");
    let names: Vec<String> = r.events().into_iter().filter_map(|(n, _)| n).collect();
    assert_eq!(names, ["message_start", "ping", "content_block_start"]);

    let r = p
        .post(
            "/v1/chat/completions",
            &[],
            json!({"model": "m", "stream": true, "messages": []}),
        )
        .await;
    assert!(!r.complete);
    assert_eq!(r.events().len(), 3);
}

#[tokio::test]
async fn api_key_and_bad_requests_are_refused_in_the_provider_shape() {
    let p = start(&["--api-key", "sk-test"]);
    let ask = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});

    let r = p.post("/v1/messages", &[], ask.clone()).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.json(),
        json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}})
    );
    let wrong = p
        .post(
            "/v1/messages",
            &[("authorization", "Bearer sk-test")],
            ask.clone(),
        )
        .await;
    assert_eq!(wrong.status, 401);
    let ok = p
        .post("/v1/messages", &[("x-api-key", "sk-test")], ask.clone())
        .await;
    assert_eq!(ok.status, 200);

    let r = p
        .post(
            "/v1/chat/completions",
            &[("x-api-key", "sk-test")],
            ask.clone(),
        )
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.json(),
        json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                         "param": null, "code": "invalid_api_key"}})
    );
    let ok = p
        .post(
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-test")],
            ask.clone(),
        )
        .await;
    assert_eq!(ok.status, 200);

    assert_eq!(p.get("/v1/models", &[]).await.status, 401);
    let m = p.get("/v1/models", &[("x-api-key", "sk-test")]).await;
    assert_eq!(m.status, 200);
    let m = p
        .get("/v1/models", &[("authorization", "Bearer sk-test")])
        .await;
    assert_eq!(m.status, 200);

    // Malformed JSON: 400 in each shape.
    let r = p
        .request("POST", "/v1/messages", &[("x-api-key", "sk-test")], "{nope")
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = p
        .request(
            "POST",
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-test")],
            "[1,",
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");

    // Every provider request was recorded, refused ones too; a bad body as null.
    let rec = p.requests().await;
    assert_eq!(rec.len(), 10);
    assert_eq!(rec[0]["body"], ask);
    assert_eq!(rec[8]["body"], Value::Null);
    assert_eq!(rec[9]["body"], Value::Null);

    // A bad script is refused and says where.
    let r = p
        .post(
            "/_script",
            &[],
            json!({"rules": [{"when": {"paht": "/v1/messages"}}]}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("rules[0].when"))
    );
}
