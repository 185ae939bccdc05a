//! Starts the real binary on port 0 and talks HTTP/1.1 to it over loopback.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Upstream {
    child: Child,
    addr: String,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Upstream {
    start_with(&[])
}

fn start_with(args: &[&str]) -> Upstream {
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard-example-upstream"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn upstream");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read line");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .expect("ready line")
        .to_owned();
    Upstream { child, addr }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
    /// The body ended properly (a chunked body with its last chunk), not by a reset.
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
    /// The `data:` payloads of an SSE body.
    fn events(&self) -> Vec<Value> {
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).expect("event json"))
            .collect()
    }
}

impl Upstream {
    async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        let mut stream = TcpStream::connect(&self.addr).await.expect("connect");
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n",
            self.addr
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        {
            req.push_str("content-type: application/json\r\n");
        }
        req.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
        stream.write_all(req.as_bytes()).await.expect("write");
        let mut raw = Vec::new();
        // (a `cut` stream may end in a reset: what arrived before it is kept)
        if let Err(e) = stream.read_to_end(&mut raw).await {
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "read: {e}");
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

    /// `POST /oauth/token` with a form body (already encoded) and extra headers.
    async fn token(&self, headers: &[(&str, &str)], form: &str) -> Reply {
        let mut all = vec![("content-type", "application/x-www-form-urlencoded")];
        all.extend_from_slice(headers);
        self.request("POST", "/oauth/token", &all, form).await
    }

    /// A 2026-07-28 request with the `_meta` envelope and routing headers.
    async fn modern(&self, path: &str, method: &str, mut params: Value) -> Reply {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut headers = vec![
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", method),
        ];
        if !name.is_empty() {
            headers.push(("mcp-name", &name));
        }
        self.post(
            path,
            &headers,
            json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params }),
        )
        .await
    }
}

/// The chunks' payload, and whether the last (empty) chunk arrived.
fn dechunk(mut body: &str) -> (String, bool) {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if n == 0 {
            return (out, true);
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    (out, false)
}

fn rpc(id: u64, method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

fn initialize() -> Value {
    rpc(
        1,
        "initialize",
        json!({ "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": { "name": "t", "version": "0" } }),
    )
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

#[tokio::test]
async fn legacy_session_lifecycle() {
    let up = start();
    let init = up
        .post(
            "/mcp",
            &[],
            rpc(
                1,
                "initialize",
                json!({ "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": { "name": "t", "version": "0" } }),
            ),
        )
        .await;
    assert_eq!(init.status, 200);
    assert_eq!(init.json()["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(
        init.json()["result"]["serverInfo"]["name"],
        "example-upstream"
    );
    let sid = init
        .header("mcp-session-id")
        .expect("session id")
        .to_owned();
    let with_sid = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];

    let note = up
        .post(
            "/mcp",
            &with_sid,
            json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
        )
        .await;
    assert_eq!((note.status, note.body.as_str()), (202, ""));
    let call = up
        .post(
            "/mcp",
            &with_sid,
            rpc(
                2,
                "tools/call",
                json!({ "name": "add", "arguments": { "a": 2, "b": 3 } }),
            ),
        )
        .await;
    assert_eq!(call.status, 200);
    assert_eq!(call.json()["result"]["content"][0]["text"], "5");
    assert_eq!(
        call.json()["result"]["structuredContent"],
        json!({ "result": 5 })
    );
    assert!(call.json()["result"].get("resultType").is_none());

    let unknown = up
        .post(
            "/mcp",
            &with_sid,
            rpc(3, "tools/call", json!({ "name": "nope" })),
        )
        .await;
    assert_eq!(unknown.json()["error"]["code"], -32602);
    assert!(
        unknown.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nope")
    );
    assert_eq!(
        up.post("/mcp", &with_sid, rpc(4, "bogus/method", json!({})))
            .await
            .json()["error"]["code"],
        -32601
    );

    assert_eq!(
        up.post("/mcp", &[], rpc(5, "tools/list", json!({})))
            .await
            .status,
        400
    );
    assert_eq!(
        up.post(
            "/mcp",
            &[("mcp-session-id", "deadbeef")],
            rpc(6, "tools/list", json!({}))
        )
        .await
        .status,
        404
    );
    assert_eq!(
        up.post("/v/sse/mcp", &with_sid, rpc(6, "tools/list", json!({})))
            .await
            .status,
        404,
        "sessions are per path"
    );
    assert_eq!(up.request("GET", "/mcp", &[], "").await.status, 405);
    assert_eq!(
        up.request("DELETE", "/mcp", &with_sid, "").await.status,
        200
    );
    assert_eq!(
        up.post("/mcp", &with_sid, rpc(7, "ping", json!({})))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn modern_stateless_requests() {
    let up = start();
    let call = up
        .modern(
            "/mcp",
            "tools/call",
            json!({ "name": "add", "arguments": { "a": 40, "b": 2 } }),
        )
        .await;
    assert_eq!(call.status, 200, "{}", call.body);
    assert!(call.header("mcp-session-id").is_none());
    let result = &call.json()["result"];
    assert_eq!(result["structuredContent"]["result"], 42);
    assert_eq!(result["resultType"], "complete");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "example-upstream"
    );

    let discover = up.modern("/mcp", "server/discover", json!({})).await.json();
    assert!(
        discover["result"]["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28"))
    );
    assert_eq!(discover["result"]["cacheScope"], "private");

    // routing header disagrees with the body
    let body = rpc(
        8,
        "tools/call",
        json!({ "name": "add", "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } }),
    );
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ];
    let mismatch = up.post("/mcp", &headers, body).await;
    assert_eq!(
        (mismatch.status, mismatch.json()["error"]["code"].clone()),
        (400, json!(-32020))
    );

    let not_found = up.modern("/mcp", "ping", json!({})).await;
    assert_eq!(
        (not_found.status, not_found.json()["error"]["code"].clone()),
        (404, json!(-32601))
    );

    // a 2026-only server refuses the handshake naming its versions; a legacy-only one has no modern errors
    let init = rpc(
        1,
        "initialize",
        json!({ "protocolVersion": "2025-11-25", "capabilities": {} }),
    );
    let refused = up.post("/v/era=2026/mcp", &[], init).await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json()["error"]["code"], -32022);
    assert_eq!(
        refused.json()["error"]["data"]["supported"],
        json!(["2026-07-28"])
    );
    let legacy_only = up
        .modern("/v/era=legacy/mcp", "server/discover", json!({}))
        .await;
    assert_eq!(
        (
            legacy_only.status,
            legacy_only.json()["error"]["code"].clone()
        ),
        (400, json!(-32600))
    );

    // SSE with a progress token: progress event first, then the response
    let mut params = json!({ "name": "slow", "arguments": { "ms": 20 } });
    params["_meta"] = json!({ "progressToken": "p1", "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {} });
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "slow"),
    ];
    let sse = up
        .post("/v/sse/mcp", &headers, rpc(9, "tools/call", params))
        .await;
    assert_eq!(sse.header("content-type"), Some("text/event-stream"));
    let events = sse.events();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["method"], "notifications/progress");
    assert_eq!(events[1]["result"]["content"][0]["text"], "slept 20 ms");
    assert!(sse.complete);

    // `cut`: the progress event, then a reset instead of the response
    let mut params = json!({ "name": "slow", "arguments": { "ms": 20 } });
    params["_meta"] = json!({ "progressToken": "p2", "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {} });
    let cut = up
        .post("/v/sse,cut/mcp", &headers, rpc(10, "tools/call", params))
        .await;
    let events = cut.events();
    assert_eq!(events.len(), 1, "{}", cut.body);
    assert_eq!(events[0]["method"], "notifications/progress");
    assert!(!cut.complete, "the stream must break off, not end");
}

#[tokio::test]
async fn paged_listing_walk() {
    let up = start();
    for (path, pages) in [("/v/page=2/mcp", 3), ("/v/cursor=empty,page=4/mcp", 2)] {
        let mut names = Vec::new();
        let mut cursor: Option<Value> = None;
        let mut seen = 0;
        loop {
            let params = cursor
                .as_ref()
                .map_or(json!({}), |c| json!({ "cursor": c }));
            let page = up.modern(path, "tools/list", params).await.json();
            let result = &page["result"];
            names.extend(
                result["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t["name"].clone()),
            );
            seen += 1;
            match result.get("nextCursor") {
                Some(c) => cursor = Some(c.clone()),
                None => break,
            }
            assert!(seen < 10, "walk did not end");
        }
        assert_eq!(seen, pages, "{path}");
        assert_eq!(
            names,
            json!(["add", "echo", "request_headers", "slow", "fail", "confirm"])
                .as_array()
                .unwrap()
                .clone()
        );
    }
    let bad = up
        .modern(
            "/v/page=2/mcp",
            "tools/list",
            json!({ "cursor": "garbage" }),
        )
        .await;
    assert_eq!(
        (bad.status, bad.json()["error"]["code"].clone()),
        (400, json!(-32602))
    );
}

#[tokio::test]
async fn auth_faults_and_headers() {
    let up = start();
    let denied = up
        .modern("/v/status=401/mcp", "tools/list", json!({}))
        .await;
    assert_eq!(denied.status, 401);
    let www = denied.header("www-authenticate").expect("challenge");
    assert_eq!(
        www,
        format!(
            "Bearer resource_metadata=\"http://{}/.well-known/oauth-protected-resource\", error=\"invalid_token\"",
            up.addr
        )
    );
    let prm = up
        .request("GET", "/.well-known/oauth-protected-resource", &[], "")
        .await
        .json();
    assert!(!prm["authorization_servers"].as_array().unwrap().is_empty());

    let gated = "/v/require=authorization:Bearer%20good/mcp";
    assert_eq!(up.modern(gated, "tools/list", json!({})).await.status, 401);
    let params = json!({ "name": "request_headers", "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } });
    let headers = [
        ("authorization", "Bearer good"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "request_headers"),
    ];
    let seen = up.post(gated, &headers, rpc(1, "tools/call", params)).await;
    assert_eq!(seen.status, 200, "{}", seen.body);
    assert_eq!(
        seen.json()["result"]["structuredContent"]["authorization"],
        "Bearer good"
    );
}

#[tokio::test]
async fn stats_count_and_hang_does_not_block() {
    let up = start();
    let hung = {
        let addr = up.addr.clone();
        tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let body = rpc(1, "tools/list", json!({})).to_string();
            let req = format!(
                "POST /v/hang/mcp HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(req.as_bytes()).await.unwrap();
            let mut buf = [0u8; 16];
            tokio::time::timeout(Duration::from_millis(300), s.read(&mut buf))
                .await
                .is_err()
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(up.request("POST", "/_reset", &[], "").await.status, 204);
    up.modern("/mcp", "tools/list", json!({})).await;
    up.modern(
        "/mcp",
        "tools/call",
        json!({ "name": "add", "arguments": { "a": 1, "b": 1 } }),
    )
    .await;
    up.modern("/v/name=beta/mcp", "tools/list", json!({})).await;
    up.request("POST", "/mcp", &[], "not json").await;
    let stats = up.request("GET", "/_stats", &[], "").await.json();
    assert_eq!(stats["requests"], 4);
    assert_eq!(
        stats["by_method"],
        json!({ "tools/list": 2, "tools/call": 1, "<invalid>": 1 })
    );
    assert_eq!(
        stats["by_path"],
        json!({ "/mcp": 3, "/v/name=beta/mcp": 1 })
    );
    let recent = up.request("GET", "/_requests", &[], "").await.json();
    assert_eq!(recent[1]["tool"], "add");
    assert_eq!(recent[1]["headers"]["mcp-method"], "tools/call");
    assert!(hung.await.unwrap(), "the hung request must stay unanswered");
}

#[tokio::test]
async fn redirect_answers_307_with_the_decoded_target() {
    let up = start();
    let absolute = "/v/redirect=http%3A%2F%2F127.0.0.1%3A9%2Fv%2Fname%3Db%2Csse%2Fmcp/mcp";
    let moved = up.post(absolute, &[], initialize()).await;
    assert_eq!(moved.status, 307);
    assert_eq!(
        moved.header("location"),
        Some("http://127.0.0.1:9/v/name=b,sse/mcp")
    );
    let relative = up
        .post(
            "/v/redirect=%2Fv%2Fname%3Db%2Fmcp/mcp",
            &[("authorization", "Bearer a")],
            rpc(2, "tools/list", json!({})),
        )
        .await;
    assert_eq!(
        (relative.status, relative.header("location")),
        (307, Some("/v/name=b/mcp"))
    );
    // require= is checked first: the redirect is only for authorized callers
    let gated = "/v/require=authorization:Bearer%20ok,redirect=%2Fmcp/mcp";
    assert_eq!(up.post(gated, &[], initialize()).await.status, 401);
    let passed = up
        .post(gated, &[("authorization", "Bearer ok")], initialize())
        .await;
    assert_eq!(
        (passed.status, passed.header("location")),
        (307, Some("/mcp"))
    );
    assert_eq!(
        up.post("/v/redirect=example.com/mcp", &[], initialize())
            .await
            .status,
        400
    );
    // every redirected POST was recorded, with its credentials
    let recent = up.request("GET", "/_requests", &[], "").await.json();
    assert_eq!(recent[0]["path"], absolute);
    assert_eq!(recent[1]["headers"]["authorization"], "Bearer a");
    assert_eq!(recent[1]["method"], "tools/list");
}

#[tokio::test]
async fn oauth_client_credentials() {
    let up = start();
    let meta = up
        .request(
            "GET",
            "/.well-known/oauth-authorization-server/oauth",
            &[],
            "",
        )
        .await
        .json();
    assert_eq!(meta["issuer"], format!("http://{}/oauth", up.addr));
    assert_eq!(
        meta["token_endpoint"],
        format!("http://{}/oauth/token", up.addr)
    );

    let post = up
        .token(
            &[],
            "grant_type=client_credentials&client_id=c1&client_secret=secret-c1&scope=mcp&audience=api",
        )
        .await;
    assert_eq!(post.status, 200, "{}", post.body);
    assert_eq!(post.header("cache-control"), Some("no-store"));
    assert_eq!(
        post.json(),
        json!({ "access_token": "at-c1-1", "token_type": "Bearer", "expires_in": 3600, "scope": "mcp" })
    );
    let by_basic = up
        .token(
            &[("authorization", &basic("c1", "secret-c1"))],
            "grant_type=client_credentials",
        )
        .await;
    assert_eq!(
        by_basic.json()["access_token"],
        "at-c1-2",
        "the counter shows a refresh"
    );
    let other = up
        .token(
            &[("authorization", &basic("c2", "secret-c2"))],
            "grant_type=client_credentials",
        )
        .await;
    assert_eq!(other.json()["access_token"], "at-c2-1");

    let wrong = up
        .token(
            &[],
            "grant_type=client_credentials&client_id=c1&client_secret=nope",
        )
        .await;
    assert_eq!(
        (wrong.status, wrong.json()["error"].clone()),
        (401, json!("invalid_client"))
    );
    let wrong_basic = up
        .token(
            &[("authorization", &basic("c1", "nope"))],
            "grant_type=client_credentials",
        )
        .await;
    assert_eq!(wrong_basic.status, 401);
    assert_eq!(
        wrong_basic.header("www-authenticate"),
        Some("Basic realm=\"oauth\"")
    );
    let not_a_form = up
        .request(
            "POST",
            "/oauth/token",
            &[],
            r#"{"grant_type":"client_credentials"}"#,
        )
        .await;
    assert_eq!(
        (not_a_form.status, not_a_form.json()["error"].clone()),
        (400, json!("invalid_request"))
    );

    let stats = up.request("GET", "/_stats", &[], "").await.json();
    assert_eq!(stats["by_method"]["oauth/token:client_credentials"], 5);
    assert_eq!(stats["by_path"]["/oauth/token"], 6);
    let recent = up.request("GET", "/_requests", &[], "").await.json();
    assert_eq!(recent[0]["method"], "oauth/token:client_credentials");
    assert_eq!(recent[0]["form"]["client_secret"], "<redacted>");
    assert_eq!(recent[0]["form"]["audience"], "api");
    assert_eq!(
        recent[1]["headers"]["authorization"],
        basic("c1", "secret-c1")
    );
    for entry in recent.as_array().unwrap() {
        assert!(
            !entry["form"].to_string().contains("secret-"),
            "recorded forms never hold the secret: {entry}"
        );
    }
    assert!(!post.body.contains("secret-c1") && !wrong.body.contains("nope"));
}

#[tokio::test]
async fn oauth_token_exchange() {
    let up = start();
    let form = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange\
                &subject_token=user-a&subject_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token\
                &audience=mcp&resource=http%3A%2F%2Fx%2Fmcp&client_id=gw&client_secret=secret-gw";
    let first = up.token(&[], form).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        first.json(),
        json!({ "access_token": "xt-user-a-1",
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "token_type": "Bearer", "expires_in": 3600 })
    );
    assert_eq!(
        up.token(&[], form).await.json()["access_token"],
        "xt-user-a-2"
    );
    let missing = up
        .token(
            &[("authorization", &basic("gw", "secret-gw"))],
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange\
             &subject_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token",
        )
        .await;
    assert_eq!(
        (missing.status, missing.json()["error"].clone()),
        (400, json!("invalid_request"))
    );
    let stats = up.request("GET", "/_stats", &[], "").await.json();
    assert_eq!(
        stats["by_method"]["oauth/token:urn:ietf:params:oauth:grant-type:token-exchange"],
        3
    );

    let short = start_with(&["--token-ttl", "5"]);
    let minted = short.token(&[], form).await.json();
    assert_eq!(
        (minted["access_token"].clone(), minted["expires_in"].clone()),
        (json!("xt-user-a-1"), json!(5))
    );
}

#[tokio::test]
async fn minted_tokens_pass_require_and_require_prefix() {
    let up = start();
    let mint = || async {
        let r = up
            .token(
                &[],
                "grant_type=client_credentials&client_id=c1&client_secret=secret-c1",
            )
            .await;
        format!("Bearer {}", r.json()["access_token"].as_str().unwrap())
    };
    let first = mint().await;
    let refreshed = mint().await;
    assert_eq!(
        (first.as_str(), refreshed.as_str()),
        ("Bearer at-c1-1", "Bearer at-c1-2")
    );

    // exact: only the refreshed token passes
    let exact = "/v/require=authorization:Bearer%20at-c1-2/mcp";
    let denied = up
        .post(exact, &[("authorization", &first)], initialize())
        .await;
    assert_eq!(denied.status, 401);
    assert!(
        denied
            .header("www-authenticate")
            .unwrap()
            .contains("error=\"invalid_token\"")
    );
    assert_eq!(
        up.post(exact, &[("authorization", &refreshed)], initialize())
            .await
            .status,
        200
    );

    // prefix: any token minted for c1
    let prefix = "/v/require-prefix=authorization:Bearer%20at-c1-/mcp";
    for token in [&first, &refreshed] {
        assert_eq!(
            up.post(prefix, &[("authorization", token)], initialize())
                .await
                .status,
            200
        );
    }
    let foreign = up
        .post(prefix, &[("authorization", "Bearer at-c2-1")], initialize())
        .await;
    assert_eq!(foreign.status, 401);
    let www = foreign.header("www-authenticate").expect("challenge");
    assert!(www.starts_with("Bearer resource_metadata=") && www.contains("invalid_token"));
    let anonymous = up.post(prefix, &[], initialize()).await;
    assert_eq!(anonymous.status, 401);
    assert!(
        !anonymous
            .header("www-authenticate")
            .unwrap()
            .contains("error=")
    );
}

#[tokio::test]
async fn session_auth_binds_sessions_to_the_authorization() {
    let up = start();
    for (path, bound) in [("/v/session-auth/mcp", true), ("/mcp", false)] {
        let init = up
            .post(path, &[("authorization", "Bearer alice")], initialize())
            .await;
        let sid = init.header("mcp-session-id").expect("session").to_owned();
        let other = if bound { 404 } else { 200 };
        for (auth, want) in [
            (Some("Bearer alice"), 200),
            (Some("Bearer bob"), other),
            (None, other),
        ] {
            let mut headers = vec![("mcp-session-id", sid.as_str())];
            headers.extend(auth.map(|a| ("authorization", a)));
            let list = up
                .post(path, &headers, rpc(2, "tools/list", json!({})))
                .await;
            assert_eq!(list.status, want, "{path} {auth:?}");
        }
        if bound {
            for (auth, want) in [("Bearer bob", 404), ("Bearer alice", 200)] {
                let headers = [("mcp-session-id", sid.as_str()), ("authorization", auth)];
                let deleted = up.request("DELETE", path, &headers, "").await;
                assert_eq!(deleted.status, want, "DELETE as {auth}");
            }
        }
    }
}

/// Reads from `stream` until `buf` holds `needle` (at most 5 s).
async fn read_until(stream: &mut TcpStream, buf: &mut String, needle: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !buf.contains(needle) {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline, stream.read(&mut chunk))
            .await
            .unwrap_or_else(|_| panic!("no {needle:?} within 5 s; got {buf:?}"))
            .expect("read");
        assert!(n > 0, "the stream ended before {needle:?}: {buf:?}");
        buf.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
}

#[tokio::test]
async fn listen_acknowledges_stays_open_and_carries_notified_changes() {
    let up = start();
    let listening =
        || async { up.request("GET", "/_stats", &[], "").await.json()["listening"].clone() };
    let body = json!({ "jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen",
        "params": { "notifications": { "toolsListChanged": true, "promptsListChanged": false,
                                       "resourceSubscriptions": ["example://readme"] },
                    "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                               "io.modelcontextprotocol/clientCapabilities": {} } } })
    .to_string();
    let mut stream = TcpStream::connect(&up.addr).await.expect("connect");
    let req = format!(
        "POST /v/name=a/mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         mcp-protocol-version: 2026-07-28\r\nmcp-method: subscriptions/listen\r\n\
         content-length: {}\r\n\r\n{body}",
        up.addr,
        body.len()
    );
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut got = String::new();
    read_until(&mut stream, &mut got, "acknowledged").await;
    read_until(&mut stream, &mut got, "\n\n").await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains("content-type: text/event-stream"), "{got}");
    let ack: Value = got
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).expect("json"))
        .expect("ack event");
    assert_eq!(
        ack["params"],
        json!({ "_meta": { "io.modelcontextprotocol/subscriptionId": "sub-1" },
                "notifications": { "toolsListChanged": true,
                                   "resourceSubscriptions": ["example://readme"] } })
    );
    assert_eq!(listening().await, json!(1));

    // nothing it did not ask for, nothing for another endpoint; then its update
    for notify in [
        json!({ "list": "prompts" }),
        json!({ "uri": "example://items/1" }),
        json!({ "uri": "example://readme", "path": "/mcp" }),
        json!({ "uri": "example://readme", "path": "/v/name=a/mcp" }),
    ] {
        let r = up.post("/_notify", &[], notify).await;
        assert_eq!((r.status, r.json()), (200, json!({ "listening": 1 })));
    }
    got.clear();
    read_until(&mut stream, &mut got, "\n\n").await;
    let update: Value = got
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).expect("json"))
        .expect("update event");
    assert_eq!(
        update,
        json!({ "jsonrpc": "2.0", "method": "notifications/resources/updated",
                "params": { "uri": "example://readme",
                            "_meta": { "io.modelcontextprotocol/subscriptionId": "sub-1" } } })
    );
    let bad = up.post("/_notify", &[], json!({ "list": "nope" })).await;
    assert_eq!(bad.status, 400);

    // the client goes away: the stream is dropped
    drop(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while listening().await != json!(0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream outlived its client"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // legacy clients have no subscriptions/listen
    let init = up.post("/mcp", &[], initialize()).await;
    let sid = init.header("mcp-session-id").expect("session").to_owned();
    let legacy = up
        .post(
            "/mcp",
            &[("mcp-session-id", &sid)],
            rpc(2, "subscriptions/listen", json!({})),
        )
        .await;
    assert_eq!(legacy.json()["error"]["code"], -32601);
}

#[tokio::test]
async fn rest_api_and_its_openapi_document() {
    let up = start();
    let sum = up.request("GET", "/rest/add?a=40&b=2", &[], "").await;
    assert_eq!(sum.status, 200);
    assert_eq!(sum.header("content-type"), Some("application/json"));
    assert_eq!(sum.json(), json!({"sum": 42}));
    let bad = up.request("GET", "/rest/add?a=1&b=x", &[], "").await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.json(),
        json!({"error": "query parameter b is not an integer: \"x\""})
    );
    let echo = up
        .post("/rest/echo", &[], json!({"text": "hi", "tag": "t"}))
        .await;
    assert_eq!(
        (echo.status, echo.json()),
        (200, json!({"text": "hi", "tag": "t"}))
    );
    assert_eq!(
        up.request("POST", "/rest/echo", &[], "[]").await.status,
        400
    );
    assert_eq!(up.request("POST", "/rest/add", &[], "").await.status, 405);
    let doc = up.request("GET", "/rest/openapi.json", &[], "").await;
    assert_eq!(doc.status, 200);
    let doc = doc.json();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["paths"]["/add"]["get"]["operationId"], "add");
    // The REST endpoints are not MCP requests: nothing counted.
    let stats = up.request("GET", "/_stats", &[], "").await.json();
    assert_eq!(stats["requests"], 0);
}
