//! One child process speaking MCP over stdio (newline-delimited JSON-RPC), shared by the
//! requests in flight on it.
//!
//! Request ids are the bridge's own on the process (clients' ids may collide: several clients
//! share a pooled process over its life) and are mapped back on the answer. What the process
//! sends besides answers goes to a request in flight: a notification with a `progressToken` to
//! the request that named it, anything else to the newest request. A server-to-client request
//! is relayed likewise on a session's process (the client's reply comes back through
//! [`Process::send`]); a pooled process gets an error for it (a 2026-07-28 request has no session
//! to answer on).
//!
//! When the process exits, every request in flight gets a JSON-RPC error at once (never a hang)
//! and [`Process::exited`] says so; stderr goes to the bridge's stderr line by line, each line
//! prefixed with the process's label.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::{mpsc, watch};

/// A line longer than this from the process ends it: it is not speaking MCP (or is flooding).
const MAX_LINE: usize = 32 * 1024 * 1024;
/// After stdin closes, how long a process gets to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// The error code of an answer the bridge gives for the process (JSON-RPC internal error).
pub use switchboard_protocol::codes::INTERNAL_ERROR;

/// What starts a process: the program and its arguments, the environment added to the bridge's.
#[derive(Clone, Debug)]
pub struct Launch {
    pub program: String,
    pub args: Vec<String>,
}

pub struct Process {
    pub id: u64,
    /// `<replica>/<id>`: in the bridge's log and, as `SWITCHBOARD_BRIDGE_PROCESS`, in the
    /// process's environment (so a test can ask a server which process answered).
    pub label: String,
    /// A pooled process serves 2026-07-28 requests; else it is one legacy session's.
    pub pooled: bool,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    inner: Mutex<Inner>,
    next_id: AtomicU64,
    in_flight: AtomicUsize,
    last_used: Mutex<Instant>,
    exited: watch::Receiver<Option<String>>,
    stop: watch::Sender<bool>,
    /// The last line the process wrote to stderr (why it exited, usually).
    last_stderr: Arc<Mutex<String>>,
}

#[derive(Default)]
struct Inner {
    pending: HashMap<u64, Pending>,
    /// Progress tokens of requests in flight → their ids on the process.
    tokens: HashMap<String, u64>,
    /// The `initialize` result, once the process answered it.
    init: Option<Value>,
}

struct Pending {
    tx: mpsc::UnboundedSender<Value>,
    client_id: Value,
    token: Option<String>,
}

/// The process exited (or could not be written to); the text says how.
#[derive(Debug)]
pub struct Gone(pub String);

impl std::fmt::Display for Gone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server process {}", self.0)
    }
}

impl Process {
    /// Starts the process; it is not initialized yet.
    pub fn spawn(
        launch: &Launch,
        id: u64,
        label: String,
        pooled: bool,
    ) -> Result<Arc<Process>, Gone> {
        let mut child = Command::new(&launch.program)
            .args(&launch.args)
            .env("SWITCHBOARD_BRIDGE_PROCESS", &label)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Gone(format!("could not be started ({}): {e}", launch.program)))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(Gone("has no stdio pipes".into()));
        };
        let (exited_tx, exited) = watch::channel(None);
        let (stop, mut stop_rx) = watch::channel(false);
        let process = Arc::new(Process {
            id,
            label,
            pooled,
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            inner: Mutex::new(Inner::default()),
            next_id: AtomicU64::new(1),
            in_flight: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
            exited,
            stop,
            last_stderr: Arc::default(),
        });
        // stdout: the process's messages.
        let reader = Arc::downgrade(&process);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match (&mut lines)
                    .take(MAX_LINE as u64 + 1)
                    .read_until(b'\n', &mut line)
                    .await
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line.len() > MAX_LINE => {
                        if let Some(p) = reader.upgrade() {
                            tracing::warn!(process = %p.label, "a line over {MAX_LINE} bytes: stopping the process");
                            p.kill();
                        }
                        break;
                    }
                    Ok(_) => {}
                }
                let Some(process) = reader.upgrade() else {
                    break;
                };
                let text = line.trim_ascii();
                if text.is_empty() {
                    continue;
                }
                match serde_json::from_slice::<Value>(text) {
                    Ok(message) => process.received(message).await,
                    // Not JSON on stdout: a server printing its banner there. Logged, skipped.
                    Err(_) => eprintln!(
                        "{} (stdout, not JSON) | {}",
                        process.label,
                        String::from_utf8_lossy(text)
                    ),
                }
            }
        });
        // stderr: the pod's log, one line at a time, labelled.
        let label = process.label.clone();
        let last = process.last_stderr.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("{label} | {line}");
                if !line.trim().is_empty() {
                    let mut kept = line.trim().to_string();
                    kept.truncate(kept.floor_char_boundary(300));
                    *last.lock().unwrap_or_else(|p| p.into_inner()) = kept;
                }
            }
        });
        // The exit: every request in flight is answered with an error.
        let watcher = Arc::downgrade(&process);
        let label = process.label.clone();
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                _ = async { stop_rx.wait_for(|stop| *stop).await.map(|_| ()) } => {
                    // Close stdin first (the stdio transport's shutdown), then kill.
                    if let Some(p) = watcher.upgrade() {
                        p.stdin.lock().await.take();
                    }
                    match tokio::time::timeout(STOP_GRACE, child.wait()).await {
                        Ok(status) => status,
                        Err(_) => {
                            let _ = child.start_kill();
                            child.wait().await
                        }
                    }
                }
            };
            let how = match status {
                Ok(s) => match s.code() {
                    Some(code) => format!("exited with code {code}"),
                    None => format!("was killed ({s})"),
                },
                Err(e) => format!("could not be waited for: {e}"),
            };
            tracing::info!(process = %label, "{how}");
            // The exit is known before the requests in flight hear of it: whoever they wake
            // (a lease given back, a session looked up) must see a process that is gone.
            let _ = exited_tx.send(Some(how.clone()));
            if let Some(p) = watcher.upgrade() {
                p.fail_all(&how);
            }
        });
        Ok(process)
    }

    /// How the process ended, once it has.
    pub fn exit(&self) -> Option<String> {
        self.exited.borrow().clone()
    }

    /// Resolves when the process has exited.
    pub async fn exited(&self) {
        let mut rx = self.exited.clone();
        let _ = rx.wait_for(Option::is_some).await;
    }

    /// The last line of its stderr, if any.
    pub fn last_stderr(&self) -> String {
        self.last_stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Asks the process to stop: stdin closed, killed if it lingers.
    pub fn kill(&self) {
        let _ = self.stop.send(true);
    }

    pub fn init(&self) -> Option<Value> {
        self.lock().init.clone()
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes one message (a notification, or a client's reply to a server request).
    pub async fn send(&self, message: &Value) -> Result<(), Gone> {
        if let Some(how) = self.exit() {
            return Err(Gone(how));
        }
        let mut line = serde_json::to_vec(message).map_err(|e| Gone(format!("message: {e}")))?;
        line.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        let Some(stdin) = stdin.as_mut() else {
            return Err(Gone("is stopping".into()));
        };
        stdin
            .write_all(&line)
            .await
            .map_err(|e| Gone(format!("stopped reading its input ({e})")))?;
        stdin
            .flush()
            .await
            .map_err(|e| Gone(format!("stopped reading its input ({e})")))?;
        self.touch();
        Ok(())
    }

    /// Sends a request; its answer (with `client_id` back as its id) and whatever the process
    /// sends for it arrive on the returned [`Call`].
    pub async fn request(
        self: &Arc<Self>,
        method: &str,
        params: Option<Value>,
        client_id: Value,
    ) -> Result<Call, Gone> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let token = params
            .as_ref()
            .and_then(|p| p.pointer("/_meta/progressToken"))
            .map(|t| t.to_string());
        let (tx, rx) = mpsc::unbounded_channel();
        {
            let mut inner = self.lock();
            if let Some(t) = &token {
                inner.tokens.insert(t.clone(), id);
            }
            inner.pending.insert(
                id,
                Pending {
                    tx,
                    client_id,
                    token,
                },
            );
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let call = Call {
            process: self.clone(),
            id,
            rx,
            answered: false,
        };
        let mut message = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(params) = params {
            message["params"] = params;
        }
        self.send(&message).await?;
        Ok(call)
    }

    /// Initializes a pooled process (the bridge is its client) and keeps the result.
    pub async fn initialize(self: &Arc<Self>, timeout: Duration) -> Result<Value, Gone> {
        let params = json!({
            "protocolVersion": switchboard_protocol::LATEST_LEGACY_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "switchboard-stdio-bridge", "version": env!("CARGO_PKG_VERSION")},
        });
        let mut call = self.request("initialize", Some(params), json!(0)).await?;
        let answer = tokio::time::timeout(timeout, call.answer())
            .await
            .map_err(|_| {
                Gone(format!(
                    "did not answer initialize within {}",
                    humantime::format_duration(timeout)
                ))
            })??;
        let Some(result) = answer.get("result").cloned() else {
            let said = self.last_stderr();
            let said = if said.is_empty() {
                String::new()
            } else {
                format!("; its stderr last said: {said}")
            };
            let error = answer["error"]["message"]
                .as_str()
                .unwrap_or("an error")
                .to_string();
            return Err(Gone(format!("did not initialize: {error}{said}")));
        };
        self.lock().init = Some(result.clone());
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(result)
    }

    /// Keeps the `initialize` result a session's client got (its own handshake).
    pub fn remember_init(&self, result: Value) {
        self.lock().init = Some(result);
    }

    /// The process's id for a client's request id in flight (to forward its cancellation).
    pub fn id_of(&self, client_id: &Value) -> Option<u64> {
        self.lock()
            .pending
            .iter()
            .find(|(_, p)| &p.client_id == client_id)
            .map(|(id, _)| *id)
    }

    async fn received(self: &Arc<Self>, mut message: Value) {
        let is_answer = message.get("method").is_none()
            && (message.get("result").is_some() || message.get("error").is_some());
        if is_answer {
            let Some(id) = message.get("id").and_then(Value::as_u64) else {
                return;
            };
            let pending = {
                let mut inner = self.lock();
                let pending = inner.pending.remove(&id);
                if let Some(t) = pending.as_ref().and_then(|p| p.token.as_ref()) {
                    inner.tokens.remove(t);
                }
                pending
            };
            if let Some(p) = pending {
                message["id"] = p.client_id;
                let _ = p.tx.send(message);
            }
            return;
        }
        let is_request = message.get("id").is_some();
        if is_request && self.pooled {
            // A 2026-07-28 request has no session to carry a server request back on.
            let refusal = json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601,
                "message": "the client of this request cannot be asked (a 2026-07-28 request through the stdio bridge)"}});
            let _ = self.send(&refusal).await;
            return;
        }
        let target = {
            let inner = self.lock();
            let by_token = message
                .pointer("/params/progressToken")
                .map(|t| t.to_string())
                .and_then(|t| inner.tokens.get(&t).copied());
            by_token
                .or_else(|| inner.pending.keys().max().copied())
                .and_then(|id| inner.pending.get(&id).map(|p| p.tx.clone()))
        };
        match target {
            Some(tx) => {
                let _ = tx.send(message);
            }
            None if is_request => {
                let refusal = json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": INTERNAL_ERROR,
                    "message": "no client request is open to carry this request"}});
                let _ = self.send(&refusal).await;
            }
            // A notification with no request open: no stream to put it on (the bridge serves
            // no standalone GET stream).
            None => {
                tracing::debug!(process = %self.label, method = message["method"].as_str().unwrap_or(""), "notification dropped: no request open")
            }
        }
    }

    fn fail_all(&self, how: &str) {
        let pending: Vec<Pending> = {
            let mut inner = self.lock();
            inner.tokens.clear();
            inner.pending.drain().map(|(_, p)| p).collect()
        };
        for p in pending {
            let _ = p.tx.send(json!({"jsonrpc": "2.0", "id": p.client_id, "error": {
                "code": INTERNAL_ERROR, "message": format!("the server process {how} before answering")}}));
        }
    }

    /// Forgets a request that will not be read any more; tells the process when it was still
    /// running.
    fn abandon(self: &Arc<Self>, id: u64) {
        let was_pending = {
            let mut inner = self.lock();
            let p = inner.pending.remove(&id);
            if let Some(t) = p.as_ref().and_then(|p| p.token.as_ref()) {
                inner.tokens.remove(t);
            }
            p.is_some()
        };
        if was_pending && self.exit().is_none() {
            let process = self.clone();
            tokio::spawn(async move {
                let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": id, "reason": "the client went away"}});
                let _ = process.send(&cancel).await;
            });
        }
    }
}

/// A request in flight on a process. Dropped before its answer arrived, it is cancelled on the
/// process (`notifications/cancelled`).
pub struct Call {
    process: Arc<Process>,
    id: u64,
    rx: mpsc::UnboundedReceiver<Value>,
    answered: bool,
}

impl Call {
    /// The next message for this request: a notification or server request, then its answer
    /// (the last); `None` after the answer.
    pub async fn next(&mut self) -> Option<Value> {
        if self.answered {
            return None;
        }
        let message = self.rx.recv().await?;
        if is_answer(&message) {
            self.answered = true;
        }
        Some(message)
    }

    /// Waits for the answer, dropping what comes before it.
    pub async fn answer(&mut self) -> Result<Value, Gone> {
        while let Some(message) = self.next().await {
            if self.answered {
                return Ok(message);
            }
        }
        Err(Gone(
            self.process.exit().unwrap_or_else(|| "stopped".into()),
        ))
    }

    pub fn process(&self) -> &Arc<Process> {
        &self.process
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.process.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.process.touch();
        if !self.answered {
            self.process.abandon(self.id);
        }
    }
}

pub fn is_answer(message: &Value) -> bool {
    message.get("method").is_none()
        && (message.get("result").is_some() || message.get("error").is_some())
}
