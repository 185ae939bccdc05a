//! One child process speaking MCP over stdio (newline-delimited JSON-RPC), shared by the
//! requests in flight on it.
//!
//! Request ids are the bridge's own on the process (clients' ids may collide: several clients
//! share a pooled process over its life) and are mapped back on the answer. What the process
//! sends besides answers goes to a request in flight: a notification with a `progressToken` to
//! the request that named it, anything else to the newest request. A server-to-client request
//! is relayed likewise on a session's process (the client's reply comes back through
//! `Process::send`); a pooled process gets an error for it (a 2026-07-28 request has no session
//! to answer on).
//!
//! When the process exits, every request in flight gets a JSON-RPC error at once (never a hang)
//! and `Process::exited` says so; stderr goes to the bridge's stderr line by line, each line
//! prefixed with the process's label. The exit is told only once what the process wrote before
//! it was read to the end (bounded): an answer it wrote just before exiting reaches its
//! request, and its last stderr line is in the `Exit` every report of the exit carries.

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
/// After the exit, how long the readers get to reach the end of stdout and stderr (a child of
/// the process may hold the pipes open past its exit).
const OUTPUT_DRAIN: Duration = Duration::from_secs(1);

/// The error code of an answer the bridge gives for the process (JSON-RPC internal error).
pub use switchboard_protocol::codes::INTERNAL_ERROR;

/// What starts a process: the program and its arguments, the environment added to the bridge's.
#[derive(Clone, Debug)]
pub struct Launch {
    pub program: String,
    pub args: Vec<String>,
}

pub(crate) struct Process {
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
    exited: watch::Receiver<Option<Exit>>,
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
pub(crate) struct Gone(pub String);

/// How a process ended: its exit status, and the last line it wrote to stderr (read to its end
/// before the exit is told, so the line is there whichever task ran first).
#[derive(Clone, Debug)]
pub(crate) struct Exit {
    /// `exited with code 3`, `was killed (signal: 9 (SIGKILL))`.
    pub status: String,
    /// The last non-empty line of its stderr (at most 300 bytes), or empty.
    pub stderr: String,
}

impl Exit {
    /// `"{status}{when}; its stderr last said: {stderr}"` (without the stderr part when it
    /// wrote nothing there).
    pub fn describe(&self, when: &str) -> String {
        format!("{}{when}{}", self.status, said(&self.stderr))
    }
}

/// `"; its stderr last said: {line}"`, or nothing for an empty line.
fn said(line: &str) -> String {
    if line.is_empty() {
        String::new()
    } else {
        format!("; its stderr last said: {line}")
    }
}

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
        // Each reader drops its sender when it reaches the end of its pipe.
        let (stdout_done, stdout_ended) = tokio::sync::oneshot::channel::<()>();
        let (stderr_done, stderr_ended) = tokio::sync::oneshot::channel::<()>();
        // stdout: the process's messages.
        let reader = Arc::downgrade(&process);
        tokio::spawn(async move {
            let _done = stdout_done;
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
            let _done = stderr_done;
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
        let last = process.last_stderr.clone();
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
            // What it wrote before exiting is read first: an answer on stdout reaches its
            // request, and the last stderr line (why it exited, usually) is in the exit.
            let _ = tokio::time::timeout(OUTPUT_DRAIN, async {
                let _ = stdout_ended.await;
                let _ = stderr_ended.await;
            })
            .await;
            let exit = Exit {
                status: how,
                stderr: last.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            };
            tracing::info!(process = %label, "{}", exit.status);
            // The exit is known before the requests in flight hear of it: whoever they wake
            // (a lease given back, a session looked up) must see a process that is gone.
            let _ = exited_tx.send(Some(exit.clone()));
            if let Some(p) = watcher.upgrade() {
                p.fail_all(&exit.status);
            }
        });
        Ok(process)
    }

    /// How the process ended, once it has.
    pub(crate) fn exit(&self) -> Option<Exit> {
        self.exited.borrow().clone()
    }

    /// Resolves when the process has exited.
    pub async fn exited(&self) {
        let mut rx = self.exited.clone();
        let _ = rx.wait_for(Option::is_some).await;
    }

    /// The last line of its stderr, if any.
    fn last_stderr(&self) -> String {
        self.last_stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Asks the process to stop: stdin closed, killed if it lingers.
    pub(crate) fn kill(&self) {
        let _ = self.stop.send(true);
    }

    pub fn init(&self) -> Option<Value> {
        self.lock().init.clone()
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub(crate) fn idle_for(&self) -> Duration {
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
        if let Some(exit) = self.exit() {
            return Err(Gone(exit.status));
        }
        let mut line = serde_json::to_vec(message).map_err(|e| Gone(format!("message: {e}")))?;
        line.push(b'\n');
        let written = {
            let mut stdin = self.stdin.lock().await;
            let Some(stdin) = stdin.as_mut() else {
                return Err(Gone("is stopping".into()));
            };
            match stdin.write_all(&line).await {
                Ok(()) => stdin.flush().await,
                Err(e) => Err(e),
            }
        };
        if let Err(e) = written {
            return Err(self.stopped_reading(e).await);
        }
        self.touch();
        Ok(())
    }

    /// Its input is closed (a broken pipe): the process is exiting, or of no use any more
    /// (stopped: stdin closed, killed after the grace). Says how it ended, not only the pipe,
    /// once it has (bounded).
    async fn stopped_reading(&self, error: std::io::Error) -> Gone {
        self.kill();
        let mut exited = self.exited.clone();
        let _ = tokio::time::timeout(
            STOP_GRACE + OUTPUT_DRAIN + Duration::from_secs(1),
            exited.wait_for(Option::is_some),
        )
        .await;
        match self.exit() {
            Some(exit) => Gone(format!("stopped reading its input and {}", exit.status)),
            None => Gone(format!("stopped reading its input ({error})")),
        }
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
        let handshake = async {
            let mut call = self.request("initialize", Some(params), json!(0)).await?;
            call.answer().await
        };
        let answer = match tokio::time::timeout(timeout, handshake).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(gone)) => return Err(self.not_initialized(gone)),
            Err(_) => {
                return Err(Gone(format!(
                    "did not answer initialize within {}{}",
                    humantime::format_duration(timeout),
                    said(&self.last_stderr())
                )));
            }
        };
        let Some(result) = answer.get("result").cloned() else {
            // The process's own error, or the bridge's for a process that exited first.
            if let Some(exit) = self.exit() {
                return Err(self.not_initialized(Gone(exit.status)));
            }
            let error = answer["error"]["message"]
                .as_str()
                .unwrap_or("an error")
                .to_string();
            return Err(Gone(format!(
                "did not initialize: {error}{}",
                said(&self.last_stderr())
            )));
        };
        self.lock().init = Some(result.clone());
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(result)
    }

    /// Why the handshake failed: for a process that exited (before reading its input, or
    /// before answering, whichever the race gave), one message with its exit status and
    /// its last stderr line.
    fn not_initialized(&self, gone: Gone) -> Gone {
        match self.exit() {
            Some(exit) => Gone(format!(
                "did not initialize: the server process {}",
                exit.describe(" before answering")
            )),
            None => Gone(format!("did not initialize: {gone}")),
        }
    }

    /// Keeps the `initialize` result a session's client got (its own handshake).
    pub(crate) fn remember_init(&self, result: Value) {
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
pub(crate) struct Call {
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
            self.process
                .exit()
                .map_or_else(|| "stopped".into(), |exit| exit.status),
        ))
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

pub(crate) fn is_answer(message: &Value) -> bool {
    message.get("method").is_none()
        && (message.get("result").is_some() || message.get("error").is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Launch {
        Launch {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
        }
    }

    /// Starts `script` and asks it to initialize, as the pool does; the failure's text.
    async fn failed_start(script: &str, n: u64) -> String {
        let process = Process::spawn(&sh(script), n, format!("test/{n}"), true)
            .unwrap_or_else(|e| panic!("sh did not start: {e}"));
        match process.initialize(Duration::from_secs(20)).await {
            Ok(init) => panic!("{script:?} answered initialize: {init}"),
            Err(e) => e.to_string(),
        }
    }

    /// Every report of a process that exits before answering has its exit code and its last
    /// stderr line, whichever of the exit, the stderr reader and the write of `initialize` came
    /// first (the race made some reports miss one or both). Fifty runs each, so the race shows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_exit_before_answering_is_told_with_its_code_and_stderr_every_time() {
        let servers = [
            // Exits at once (often before its input is written: a broken pipe).
            (
                "echo 'cannot open the database' >&2; exit 3",
                3,
                "cannot open the database",
            ),
            // Reads the request, writes stderr, exits.
            (
                "read -r line; echo 'unexpected request' >&2; exit 4",
                4,
                "unexpected request",
            ),
            // Closes its input first, then says why and exits.
            (
                "exec 0<&-; echo 'no input here' >&2; exit 5",
                5,
                "no input here",
            ),
        ];
        for (script, code, line) in servers {
            let mut wrong = Vec::new();
            for n in 0..50 {
                let said = failed_start(script, n).await;
                let whole = format!(
                    "the server process did not initialize: the server process exited with code {code} before answering; its stderr last said: {line}"
                );
                if said != whole {
                    wrong.push(said);
                }
            }
            assert!(
                wrong.is_empty(),
                "{script:?}: {} of 50 reports lack the exit code or the stderr line, e.g. {:?}",
                wrong.len(),
                wrong.first()
            );
        }
    }

    /// A process that closed its input and goes on running: the write of `initialize` gets a
    /// broken pipe, and the report waits for the exit (it is stopped) instead of naming the
    /// pipe alone.
    #[tokio::test]
    async fn a_broken_pipe_waits_for_the_exit_and_says_it() {
        let process = Process::spawn(
            &sh("exec 0<&-; echo 'closed my input' >&2; exec sleep 30"),
            1,
            "test/1".into(),
            true,
        )
        .unwrap_or_else(|e| panic!("sh did not start: {e}"));
        // Its input is closed once it said so (the line comes after the close).
        let deadline = Instant::now() + Duration::from_secs(10);
        while process.last_stderr() != "closed my input" {
            assert!(
                Instant::now() < deadline,
                "the process never wrote its line"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let said = match process.initialize(Duration::from_secs(20)).await {
            Ok(init) => panic!("answered initialize: {init}"),
            Err(e) => e.to_string(),
        };
        assert!(
            said.starts_with(
                "the server process did not initialize: the server process was killed"
            ) && said.ends_with("before answering; its stderr last said: closed my input"),
            "{said}"
        );
        assert!(process.exit().is_some(), "the process was stopped");
    }

    /// An answer the process wrote just before exiting reaches its request (the exit waits
    /// for stdout's end before failing what is in flight).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_written_just_before_the_exit_is_delivered() {
        let script =
            r#"read -r line; echo '{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}'; exit 0"#;
        for n in 0..50 {
            let process = Process::spawn(&sh(script), n, format!("test/{n}"), true)
                .unwrap_or_else(|e| panic!("sh did not start: {e}"));
            let mut call = match process.request("tools/list", None, json!(7)).await {
                Ok(call) => call,
                Err(e) => panic!("run {n}: {e}"),
            };
            let answer = call.answer().await.map_err(|e| e.to_string());
            assert!(
                answer
                    .as_ref()
                    .is_ok_and(|a| a["id"] == 7 && a["result"]["tools"] == json!([])),
                "run {n}: {answer:?}"
            );
        }
    }
}
