//! `switchboard-example-upstream`: a small, fast MCP server (Streamable HTTP, JSON-RPC over
//! POST) that speaks both protocol eras on one endpoint and can be told, by URL path, to
//! misbehave. It is the upstream for Switchboard's tests, demos and benchmarks. This comment
//! is the reference the tests are written against.
//!
//! # Running
//!
//! ```text
//! switchboard-example-upstream [--listen 127.0.0.1:8931] [--record 200] [--token-ttl 3600]
//! ```
//!
//! When ready it prints exactly one line to stdout, `listening on http://ADDR`, with the real
//! port (so `--listen 127.0.0.1:0` works). `--record N` sets how many recent requests
//! `/_requests` keeps (0 turns recording off; counters stay on). `--token-ttl SECS` is the
//! `expires_in` of tokens from `/oauth/token` (0 allowed). Nothing is logged per request, and
//! secrets are never printed.
//!
//! # Endpoints
//!
//! | path | what |
//! |---|---|
//! | `POST /mcp` | the normal server (both eras) |
//! | `POST /v/{opts}/mcp` | the same server with the options below |
//! | `POST /oauth/token` | the token endpoint (see *OAuth authorization server* below) |
//! | `GET /_stats` | `{"requests": N, "by_method": {"tools/call": N, ...}, "by_path": {"/mcp": N, ...}, "listening": N}` counting every POST to an MCP endpoint (an unparsable body counts as method `<invalid>`) and to `/oauth/token` (method `oauth/token:<grant_type>`, path `/oauth/token`); `listening` is how many `subscriptions/listen` streams are open now (not reset by `/_reset`) |
//! | `POST /_notify` | publishes one change to the open `subscriptions/listen` streams: body `{"uri": U}` sends `notifications/resources/updated` to the streams subscribed to U, `{"list": "tools"\|"prompts"\|"resources"}` sends `notifications/{list}/list_changed` to the streams that asked for it; an optional `"path": "/v/name=a/mcp"` limits it to streams opened on that endpoint path (as sent, still percent-encoded). Answers `{"listening": N}` (streams open), or 400 for another body |
//! | `GET /_requests` | the last `--record` POSTs, oldest first: `[{"path", "method", "tool", "headers": {lower-case name: value}, "session"}]` (`tool` only for `tools/call`, `session` is the `Mcp-Session-Id` the request carried; absent values are `null`). Token requests add `"form": {name: value}` (a repeated name holds an array; `client_secret` is `"<redacted>"`) |
//! | `POST /_reset` | clears counters and recorded requests (204); sessions and token counters stay |
//! | `GET /.well-known/oauth-protected-resource[/{path}]` | RFC 9728 metadata: `resource` (`http://HOST/mcp`, or `http://HOST/{path}`), `authorization_servers: ["http://HOST/oauth"]`, `scopes_supported: ["mcp"]` |
//! | `GET /.well-known/oauth-authorization-server[/oauth]` | RFC 8414 metadata: `issuer: "http://HOST/oauth"`, `token_endpoint: "http://HOST/oauth/token"`, `grant_types_supported`, `token_endpoint_auth_methods_supported: ["client_secret_post", "client_secret_basic"]`, `response_types_supported: []` (there is no authorization endpoint), `scopes_supported: ["mcp"]` |
//! | `GET /rest/add?a=A&b=B` | a REST endpoint (not MCP): `{"sum": A+B}` for integers A and B; a missing or non-integer one, or a sum out of `i64`, → 400 `{"error": "..."}` |
//! | `POST /rest/echo` | a REST endpoint: answers the JSON object of the body (the same members, re-serialized; `Content-Type: application/json`); a body that is not a JSON object → 400 `{"error": "..."}` |
//! | `GET /rest/openapi.json` | the OpenAPI 3.1 document of those two (operationIds `add` and `echo`, `servers: [{"url": "/rest"}]`, paths `/add` and `/echo`: an OpenAPI-backed server uses `url: http://HOST/rest`). The `/rest` endpoints are not counted in `/_stats` nor recorded in `/_requests` |
//!
//! Every request reaching an MCP endpoint or the token endpoint is counted and recorded
//! *before* any fault or check applies, so tests can see what reached a failing server (e.g.
//! which credentials).
//!
//! # Variant options: `/v/{opts}/mcp`
//!
//! `{opts}` is a comma-separated list of `key` or `key=value` items. The raw path segment is
//! split at `,` and each item at its first `=` *before* key and value are percent-decoded, so a
//! value can carry `%2C` (`,`), `%2F` (`/`), `%20` (space) and `%25` (`%`); a literal `,`
//! always separates options and a literal `/` ends the segment. `+` is not a space. Unknown or
//! malformed options (including a bad `%` escape) answer HTTP 400 with a message.
//!
//! | option | effect |
//! |---|---|
//! | `era=legacy` | handshake revisions only. 2026-style requests are treated like any sessionless request: 400 `{"code":-32600,"message":"Bad Request: Missing session ID"}` (no modern error code), or 400 "Unsupported protocol version" when a session is given with `MCP-Protocol-Version: 2026-07-28` |
//! | `era=2026` | 2026-07-28 only: `initialize` → HTTP 400 `-32022` with `data: {"supported": ["2026-07-28"], "requested": <its protocolVersion>}`; GET/DELETE → 405; `Mcp-Session-Id` is ignored |
//! | `era=dual` | the default |
//! | `sse` | answer requests with `text/event-stream`: one `event: message` carrying the response, preceded by a `notifications/progress` event and a `notifications/message` log line (2026-07-28: only when `_meta` asks for a `logLevel`) when the request has `_meta.progressToken` (sent before the work, e.g. before `slow` sleeps). 2026-07-28 errors without a prior progress event are sent as JSON with their HTTP status |
//! | `cut` | with `sse` and a progress token: after the progress event (and log line) the connection is reset mid-stream, before the response is sent (an upstream dying while it streams) |
//! | `tools=N` | serve generated tools `tool_0..tool_{N-1}` *instead of* the base tools (`tool_i` answers `"tool_i ok"` with structuredContent `{"tool", "arguments"}`) |
//! | `page=N` | `tools/list` pages of N with opaque cursors (`nextCursor` absent on the last page); a bad cursor → -32602 "Invalid cursor" |
//! | `cursor=repeat` | page 1 has `nextCursor` C; every page after it returns tools N..2N and `nextCursor` C again, forever |
//! | `cursor=endless` | every page has a new `nextCursor`; past the real tools come generated `tool_{i}` (callable) forever |
//! | `cursor=empty` | page 1 has `nextCursor: ""`; `cursor: ""` returns the rest with no `nextCursor` (the 2026-07-28 rule: `""` is a valid cursor) |
//! | | the `cursor=` modes use `page=2` unless `page=` is given; without `page=`/`cursor=` listings are one page and any cursor is invalid |
//! | `status=NNN` | every request (400..=599) gets that status with a JSON body. `401` adds `WWW-Authenticate: Bearer resource_metadata="http://HOST/.well-known/oauth-protected-resource", error="invalid_token"`; `403` adds the same with `error="insufficient_scope", scope="mcp:admin"` |
//! | `garbage` | 200, `Content-Type: application/json`, body `<<< this is not JSON >>>` |
//! | `hang` | accept every request and never answer (other requests are unaffected) |
//! | `hang=list` | hang only `tools/list` |
//! | `delay=MS` | every response is delayed by MS milliseconds (also before faults) |
//! | `require=HEADER:VALUE` | 401 (with the challenge above; `error="invalid_token"` only if the header was sent) unless HEADER (case-insensitive) has exactly VALUE (split at the first `:`). Repeat the option to require several headers, e.g. `require=authorization:Bearer%20good,require=x-team:blue`; `require=authorization:Bearer%20at-c1-2` accepts only the second token minted for client `c1` |
//! | `require-prefix=HEADER:PREFIX` | like `require=`, but HEADER's value must start with PREFIX, e.g. `require-prefix=authorization:Bearer%20at-c1-` accepts every token minted for `c1` (an empty PREFIX only requires the header). Repeatable; checked after all `require=` |
//! | `redirect=TARGET` | answer every request (after the checks above pass) `307 Temporary Redirect` with `Location: TARGET` and no body. TARGET is percent-encoded and decoded once: a path (`redirect=%2Fv%2Fname%3Db%2Fmcp` → `/v/name=b/mcp`) or an `http(s)://` URL (`redirect=http%3A%2F%2F127.0.0.1%3A9%2Fmcp` → `http://127.0.0.1:9/mcp`), visible ASCII only; a TARGET that itself has encoded characters is encoded twice (`%20` → `%2520`). A TARGET pointing at a redirecting path loops; stopping that is the client's job |
//! | `session-auth` | legacy sessions are bound to the `Authorization` value (or its absence) of the `initialize` that created them: a request or DELETE on that session with another `Authorization` gets 404 "Session not found" (as the reference SDK does per user) |
//! | `name=X` | `serverInfo.name` (default `example-upstream`); every tool, prompt and resource description mentions `(server X)` |
//! | `ttl=MS`, `cache=public\|private` | cache hints on 2026-07-28 cacheable results (default `ttlMs: 0`, `cacheScope: "private"`) |
//!
//! # OAuth authorization server (issuer `http://HOST/oauth`)
//!
//! `POST /oauth/token` takes `application/x-www-form-urlencoded` (any other Content-Type → 400
//! `invalid_request`); a parameter given twice → 400 `invalid_request`. Every answer is JSON
//! with `Cache-Control: no-store`; errors are `{"error", "error_description"}`.
//!
//! - **Client authentication** (required for every grant): `client_secret_post`
//!   (`client_id` and `client_secret` in the form) or `client_secret_basic`
//!   (`Authorization: Basic base64(id:secret)`, id and secret form-urlencoded first per RFC 6749
//!   §2.3.1; a form `client_id` may repeat the same id). Any `client_id` is accepted whose
//!   secret is exactly `secret-<client_id>` (client `c1` → `secret-c1`). Missing or wrong
//!   credentials → 401 `{"error": "invalid_client"}` (plus `WWW-Authenticate: Basic
//!   realm="oauth"` when Basic was tried); Basic *and* a form `client_secret`, or a form
//!   `client_id` other than the Basic one → 400 `invalid_request`.
//! - **`grant_type=client_credentials`** (optional `scope`, `audience`) → `{"access_token":
//!   "at-<client_id>-<n>", "token_type": "Bearer", "expires_in": E}` where n counts this
//!   client's tokens from 1 (so `at-c1-2` is the first refresh) and E is `--token-ttl`
//!   (default 3600).
//! - **`grant_type=urn:ietf:params:oauth:grant-type:token-exchange`** (RFC 8693; required
//!   `subject_token`, `subject_token_type`; optional `audience`, `scope`, `resource`,
//!   `requested_token_type`, all accepted as is) → `{"access_token": "xt-<subject_token>-<n>",
//!   "issued_token_type": "urn:ietf:params:oauth:token-type:access_token", "token_type":
//!   "Bearer", "expires_in": E}`, n counting per subject token from 1. A missing or empty
//!   `subject_token` or `subject_token_type` → 400 `invalid_request`.
//! - Both add `"scope"` (echoed) when the request had one. Missing `grant_type` → 400
//!   `invalid_request`; another grant → 400 `unsupported_grant_type`. Failed requests mint
//!   nothing; counters survive `/_reset` (they restart only with the process, or past 100 000
//!   distinct clients/subjects).
//!
//! # Catalog
//!
//! Tools (base set, in listing order): `add(a: int, b: int)` → text sum and structuredContent
//! `{"result": sum}` (has an outputSchema); `echo(text, tag?)` → the text (`tag` carries
//! `"x-mcp-header": "Tag"`: in 2026-07-28 a `Mcp-Param-Tag` header must mirror it, else
//! -32020); `request_headers()` → structuredContent and text JSON of every HTTP header received
//! (lower-case names, repeats joined by `, `); `slow(ms)` sleeps (max 600000) then answers;
//! `fail()` → `isError: true`; `confirm(message)` → 2026-07-28 multi-round-trip: the first call
//! returns `resultType: "input_required"` with an `elicitation/create` input request keyed
//! `confirm` and `requestState` (or -32021 if the client did not declare `elicitation`); the
//! retry with `inputResponses.confirm` and the same `requestState` answers "confirmed"/"declined"
//! (legacy era: a tool error). Bad arguments are tool errors (`isError: true`).
//! Unknown tool → -32602 `Unknown tool: NAME`; unknown method → -32601.
//!
//! Prompt `greet(name)` (`prompts/list`, `prompts/get`). Resources `example://readme`
//! (`resources/list`, `resources/read`) and the template `example://items/{id}`
//! (`resources/templates/list`; reading `example://items/42` works). An unknown resource is
//! -32002 in the legacy era and -32602 in 2026-07-28.
//!
//! # Legacy era (2025-03-26, 2025-06-18, 2025-11-25)
//!
//! `initialize` → InitializeResult echoing the client's `protocolVersion` when it is one of
//! those three (else `2025-11-25`) and an `Mcp-Session-Id` response header. Sessions belong to
//! the endpoint path that created them (and with `session-auth` to its `Authorization` value).
//! Later requests need the header: missing → 400, unknown (or another path's) → 404, both with
//! JSON-RPC error -32600. An `MCP-Protocol-Version` header
//! outside the three → 400. Notifications and posted responses → 202. `ping` → `{}`.
//! GET → 405. DELETE with a known session → 200 and the session is forgotten. JSON-RPC errors
//! are HTTP 200. `Accept` and `Content-Type` are not enforced.
//!
//! # 2026-07-28 era (stateless)
//!
//! On the default endpoint a POST is modern if its `params._meta` has
//! `io.modelcontextprotocol/protocolVersion`; otherwise `initialize` or an `Mcp-Session-Id` makes
//! it legacy, an `MCP-Protocol-Version` outside the handshake versions makes it modern, and
//! `server/discover` is modern. Modern requests are checked in this order, each failure a JSON
//! error with HTTP 400: duplicated `MCP-Protocol-Version`/`Mcp-Method`/`Mcp-Name` (-32020);
//! `_meta` lacking `protocolVersion` or `clientCapabilities` (-32602); `MCP-Protocol-Version`
//! missing or ≠ `_meta` version, `Mcp-Method` missing or ≠ method, `Mcp-Name` missing or ≠
//! `params.name` (`tools/call`, `prompts/get`) / `params.uri` (`resources/read`), after
//! `=?base64?…?=` decoding (-32020); version other than `2026-07-28` (-32022, `data:
//! {"supported": ["2026-07-28"], "requested"}`). Then: unknown method (including `ping`,
//! `initialize`) → 404 -32601; other JSON-RPC errors use 400 for -32602/-32021, else 200.
//! Every result has `resultType` (`"complete"` unless MRTR) and
//! `_meta["io.modelcontextprotocol/serverInfo"]`; `server/discover`, the four lists and
//! `resources/read` carry `ttlMs`/`cacheScope`. `server/discover` lists `supportedVersions`
//! (`2026-07-28` plus the legacy three on a dual endpoint), capabilities and instructions.
//! Notifications → 202 (400 -32022 if their `MCP-Protocol-Version` is not 2026-07-28).
//!
//! `subscriptions/listen` (2026-07-28 only; a legacy request gets -32601) answers, on every
//! variant whose checks pass, with `text/event-stream` whatever `sse` and `Accept` say: first
//! `notifications/subscriptions/acknowledged` with `params.notifications` the honored subset of
//! `params.notifications` (every flag asked `true` and every `resourceSubscriptions` URI;
//! false flags and an empty list left out), then nothing until `POST /_notify` publishes a
//! change the stream asked for. Every message carries the listen request's id as
//! `_meta["io.modelcontextprotocol/subscriptionId"]`. The stream stays open, idle (no
//! keep-alive comments, no timer), until the client goes away; a reader more than 64 events
//! behind misses the oldest. `capabilities` still say `listChanged: false`/`subscribe: false`:
//! nothing in the catalog ever changes by itself.

mod accounts;
mod catalog;
mod dispatch;
mod http;
mod listen;
mod oauth;
mod pagination;
mod percent;
mod protocol;
mod rest;
mod sessions;
mod stats;
mod variants;

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;

#[derive(Parser)]
#[command(
    version,
    about = "Example MCP upstream (both eras) with switchable faults"
)]
struct Cli {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8931")]
    listen: SocketAddr,
    /// How many recent requests `/_requests` keeps (0 disables recording).
    #[arg(long, default_value_t = 200)]
    record: usize,
    /// `expires_in` (seconds) of tokens minted by `POST /oauth/token`.
    #[arg(long, value_name = "SECS", default_value_t = oauth::DEFAULT_TTL_SECS)]
    token_ttl: u64,
    /// `expires_in` (seconds) of Example Accounts' access tokens (`/accounts`).
    #[arg(long, value_name = "SECS", default_value_t = accounts::DEFAULT_ACCESS_TTL_SECS)]
    account_token_ttl: u64,
    /// How long Example Accounts takes to answer a refresh (milliseconds).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    account_refresh_delay_ms: u64,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // One line saying why, never a backtrace (a port in use names --listen and the address).
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("--listen {}: {e}", cli.listen)))?;
    let listen = listener.local_addr()?;
    let app = Arc::new(http::App {
        stats: stats::Stats::new(cli.record),
        accounts: accounts::AccountServer::new(cli.account_token_ttl, cli.account_refresh_delay_ms),
        accounts_variant: Arc::new(variants::Variant {
            name: "accounts".into(),
            account: true,
            ..variants::Variant::default()
        }),
        sessions: sessions::Sessions::default(),
        oauth: oauth::Issuer::new(cli.token_ttl),
        listeners: listen::Listeners::default(),
        listen,
        default_variant: Arc::new(variants::Variant::default()),
    });
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on http://{listen}")?;
    out.flush()?;
    drop(out);
    // No graceful drain: `hang` variants hold requests forever, so a signal just exits.
    tokio::select! {
        served = axum::serve(listener, http::router(app)) => served,
        () = shutdown() => Ok(()),
    }
}

async fn shutdown() {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        return;
    }
    let _ = tokio::signal::ctrl_c().await;
}
