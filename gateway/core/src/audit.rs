//! The audit record: one JSON line per client request (docs/audit.md is its schema,
//! `switchboard.audit/v1`), written when the request's answer ends (a stream's when it closes).
//!
//! The edge opens a [`Slot`] per request and runs the handler inside it ([`Slot::scope`]); the
//! layers that learn something of the request note it into the slot they run in ([`note`]),
//! wherever they are (scope checks, routing, the upstream client, the LLM loop) without each
//! handler passing a record through every call. What may be noted is only what the record's
//! fields name: identities, names, codes, sizes and counts; never arguments, results, prompts
//! or credentials (no field can hold them).
//!
//! Records go to a thread that writes them ([`AuditLog`]); a request never waits on it. When
//! the writer falls behind by `QUEUE` records, further records are dropped and counted
//! (`switchboard_gateway_audit_records_dropped_total`).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::{Instant, SystemTime};

use switchboard_protocol::trace_context::{self, TraceContext};

use crate::metrics::{Metrics, UsageFigures};
pub use crate::noted::{CallerRecord, Noted, Tokens, WorkloadRecord, name};

/// The schema every record names (docs/audit.md): a field renamed or removed is a new version.
const SCHEMA: &str = "switchboard.audit/v1";

/// Records the writer may be behind by before new ones are dropped.
const QUEUE: usize = 16_384;

/// The buffer a record is written into (a `tools/call`'s record is 400-500 bytes).
const LINE_CAPACITY: usize = 512;

/// The request a slot records: what the edge knows of it.
#[derive(Debug)]
pub struct Arrival {
    pub at: SystemTime,
    pub started: Instant,
    pub request_id: String,
    pub endpoint: &'static str,
    pub http_method: http::Method,
    pub path: String,
    /// The route the path matched (a span's `http.route`).
    pub route: Option<&'static str>,
}

/// A request's place in a trace, settled once its client's trace context is known
/// ([`Slot::begin_trace`]).
#[derive(Debug)]
struct Traced {
    /// The request's span (a disabled one when it is not traced): the stages' spans are its
    /// children; it ends with the slot, a stream's when the stream does.
    span: tracing::Span,
    trace_id: Option<String>,
    /// The client's trace context, passed on as it came when the request is not traced.
    client: Option<TraceContext>,
}

/// One request's record being filled in.
#[derive(Debug)]
pub struct Slot {
    arrival: Arrival,
    traced: OnceLock<Traced>,
    noted: Mutex<Noted>,
}

tokio::task_local! {
    static CURRENT: Arc<Slot>;
}

/// The span of a request whose trace has not begun.
static NO_SPAN: LazyLock<tracing::Span> = LazyLock::new(tracing::Span::none);

impl Slot {
    pub fn new(arrival: Arrival) -> Arc<Slot> {
        Arc::new(Slot {
            arrival,
            traced: OnceLock::new(),
            noted: Mutex::new(Noted::default()),
        })
    }

    /// Places the request in a trace: the child of `client`'s context when there is one (its
    /// sampled flag decides whether the request is traced), else the root of a new trace if
    /// the ratio says so. Once: later calls change nothing. The edge calls it with the
    /// headers' context as the request arrives, or, for an MCP message whose headers carry
    /// none, with its `_meta`'s once the body is read (before any stage's span exists).
    pub fn begin_trace(&self, client: Option<TraceContext>) {
        if self.traced.get().is_some() {
            return;
        }
        let traceparent = client.as_ref().map(|c| c.traceparent().as_bytes());
        let (span, trace_id) = if switchboard_telemetry::sampled(traceparent) {
            let span = crate::request_span::start(
                &self.arrival.http_method,
                self.arrival.route,
                &self.arrival.path,
                &self.arrival.request_id,
            );
            let trace_id = continue_trace(&span, client.as_ref());
            (span, Some(trace_id))
        } else {
            let trace_id = client.as_ref().map(|c| c.trace_id().to_string());
            (tracing::Span::none(), trace_id)
        };
        let _ = self.traced.set(Traced {
            span,
            trace_id,
            client,
        });
    }

    /// Whether [`Slot::begin_trace`] was called.
    pub fn trace_begun(&self) -> bool {
        self.traced.get().is_some()
    }

    /// The request's span (disabled with traces off, or before its trace began).
    pub fn span(&self) -> &tracing::Span {
        self.traced.get().map_or(&NO_SPAN, |t| &t.span)
    }

    pub fn request_id(&self) -> &str {
        &self.arrival.request_id
    }

    /// Runs `work` (the handler) with this slot as the one [`note`] fills.
    pub async fn scope<F: Future>(self: &Arc<Self>, work: F) -> F::Output {
        CURRENT.scope(self.clone(), work).await
    }

    /// Notes into this slot (for work outside its scope: a stream's end, polled by the
    /// connection).
    pub fn note(&self, f: impl FnOnce(&mut Noted)) {
        if let Ok(mut noted) = self.noted.lock() {
            f(&mut noted);
        }
    }

    /// The request ended, its answer `status` and `bytes_out` long: its usage counted in
    /// `metrics`, its record written to `log`. (Once: by the edge, or by the end of a stream.)
    pub fn finish(&self, status: u16, bytes_out: u64, log: Option<&AuditLog>, metrics: &Metrics) {
        let Ok(noted) = self.noted.lock() else { return };
        let outcome = noted.outcome.unwrap_or(outcome_of_status(status));
        crate::request_span::finish(self.span(), self.arrival.endpoint, &noted, status, outcome);
        let tokens = noted.tokens.unwrap_or_default();
        metrics.usage(&UsageFigures {
            endpoint: self.arrival.endpoint,
            tenant: noted.caller.as_ref().map_or("-", |c| c.namespace.as_str()),
            server: noted.server.as_deref().unwrap_or("-"),
            model: noted.model.as_deref(),
            outcome,
            elapsed: self.arrival.started.elapsed(),
            input_tokens: tokens.input,
            output_tokens: tokens.output,
        });
        if let Some(log) = log
            && let Some(line) = self.line_of(&noted, &log.replica, status, bytes_out)
        {
            log.send(line);
        }
    }

    #[cfg(test)]
    fn line(&self, replica: &str, status: u16, bytes_out: u64) -> Option<Vec<u8>> {
        let noted = self.noted.lock().ok()?;
        self.line_of(&noted, replica, status, bytes_out)
    }

    /// The record's line, the answer being `status` and `bytes_out` long.
    fn line_of(
        &self,
        noted: &Noted,
        replica: &str,
        status: u16,
        bytes_out: u64,
    ) -> Option<Vec<u8>> {
        let duration_ms = (self.arrival.started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
        self.line_lasting(noted, replica, status, bytes_out, duration_ms)
    }

    /// The record's line for a request that lasted `duration_ms`: its members in the order the
    /// record has always had (serde's derive wrote them so: see the test's `SerdeRecord`),
    /// unset ones left out.
    fn line_lasting(
        &self,
        noted: &Noted,
        replica: &str,
        status: u16,
        bytes_out: u64,
        duration_ms: f64,
    ) -> Option<Vec<u8>> {
        let mut line = Line::new();
        line.text(member!("schema"), SCHEMA)?;
        line.member(member!("time"));
        write_time(&mut line.0, self.arrival.at);
        line.text(member!("request_id"), &self.arrival.request_id)?;
        if let Some(trace_id) = self.traced.get().and_then(|t| t.trace_id.as_deref()) {
            line.text(member!("trace_id"), trace_id)?;
        }
        line.text(member!("replica"), replica)?;
        line.text(member!("endpoint"), self.arrival.endpoint)?;
        line.text(member!("http_method"), self.arrival.http_method.as_str())?;
        line.text(member!("path"), &self.arrival.path)?;
        line.value(member!("status"), &status)?;
        line.noted(noted)?;
        line.text(
            member!("outcome"),
            noted.outcome.unwrap_or(outcome_of_status(status)),
        )?;
        line.value(member!("duration_ms"), &duration_ms)?;
        line.value(member!("bytes_in"), &noted.bytes_in)?;
        line.value(member!("bytes_out"), &bytes_out)?;
        Some(line.end())
    }
}

/// `at` as a JSON string of RFC 3339 with milliseconds, humantime's text, the part to the
/// second made once a second on each thread and the milliseconds written after it (humantime's
/// formatter through `write!` cost a record about 300 instructions).
fn write_time(out: &mut Vec<u8>, at: SystemTime) {
    thread_local! {
        static SECOND: std::cell::Cell<Option<(u64, [u8; 19])>> = const { std::cell::Cell::new(None) };
    }
    // (A time before 1970, or past the year 9999, is written by humantime whole.)
    let cached = at
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|since| {
            let secs = since.as_secs();
            let second = SECOND.with(|cell| match cell.get() {
                Some((cached, text)) if cached == secs => Some(text),
                _ => {
                    let whole = at.checked_sub(std::time::Duration::from_nanos(u64::from(
                        since.subsec_nanos(),
                    )))?;
                    // `YYYY-MM-DDTHH:MM:SSZ`, the `Z` left for after the milliseconds.
                    let text: [u8; 19] = humantime::format_rfc3339_seconds(whole)
                        .to_string()
                        .as_bytes()
                        .get(..19)?
                        .try_into()
                        .ok()?;
                    cell.set(Some((secs, text)));
                    Some(text)
                }
            })?;
            Some((second, since.subsec_millis()))
        });
    let Some((second, millis)) = cached else {
        let _ = write!(out, "\"{}\"", humantime::format_rfc3339_millis(at));
        return;
    };
    out.push(b'"');
    out.extend_from_slice(&second);
    // (Each digit is below ten: the casts cannot lose anything.)
    out.extend_from_slice(&[
        b'.',
        b'0' + (millis / 100) as u8,
        b'0' + (millis / 10 % 10) as u8,
        b'0' + (millis % 10) as u8,
        b'Z',
        b'"',
    ]);
}

/// An audit record's line being written: member by member, the names written as they are
/// (fixed ASCII names, nothing to escape) and each value by serde_json (strings escaped,
/// numbers formatted as serde_json formats them). serde's derived map with the noted members
/// flattened into it cost a call about 5,000 instructions; most of it was the map's machinery
/// and escaping the names, which this skips. A test holds it to serde's output byte for byte.
struct Line(Vec<u8>);

/// A record member's `,"name":` for [`Line`]: a fixed ASCII name, nothing to escape.
macro_rules! member {
    ($name:literal) => {
        concat!(",\"", $name, "\":")
    };
}
use member;

impl Line {
    fn new() -> Line {
        // A record is most of half a kilobyte: written into a buffer that holds it from the
        // start rather than one grown by doubling.
        let mut line = Vec::with_capacity(LINE_CAPACITY);
        line.push(b'{');
        Line(line)
    }

    /// A member's name: `member` is its `,"name":` (the `member!` macro's), written without
    /// the comma when it is the first member of its object. (One copy of a text made at
    /// compile time: the comma, the quotes and the name written one by one cost a record about
    /// 500 instructions more.)
    fn member(&mut self, member: &'static str) {
        let first = self.0.last() == Some(&b'{');
        let token = match member.strip_prefix(',') {
            Some(token) if first => token,
            _ => member,
        };
        self.0.extend_from_slice(token.as_bytes());
    }

    fn value(&mut self, member: &'static str, value: &impl serde::Serialize) -> Option<()> {
        self.member(member);
        serde_json::to_writer(&mut self.0, value).ok()
    }

    fn text(&mut self, member: &'static str, value: &str) -> Option<()> {
        self.member(member);
        switchboard_protocol::write_json_str(&mut self.0, value);
        Some(())
    }

    fn some_text(&mut self, member: &'static str, value: Option<&str>) -> Option<()> {
        match value {
            Some(value) => self.text(member, value),
            None => Some(()),
        }
    }

    fn some<T: serde::Serialize + ?Sized>(
        &mut self,
        member: &'static str,
        value: Option<&T>,
    ) -> Option<()> {
        match value {
            Some(value) => self.value(member, &value),
            None => Some(()),
        }
    }

    /// What the layers noted, in [`Noted`]'s order (its `skip`ped members are the span's).
    fn noted(&mut self, noted: &Noted) -> Option<()> {
        if let Some(caller) = &noted.caller {
            self.caller(caller)?;
        }
        self.some_text(member!("server"), noted.server.as_deref())?;
        self.some_text(member!("virtual_server"), noted.virtual_server.as_deref())?;
        self.some_text(member!("rpc_method"), noted.rpc_method.as_deref())?;
        self.some_text(member!("tool"), noted.tool.as_deref())?;
        self.some_text(member!("prompt"), noted.prompt.as_deref())?;
        self.some_text(member!("resource"), noted.resource.as_deref())?;
        self.some_text(member!("model"), noted.model.as_deref())?;
        self.some(member!("rpc_error_code"), noted.rpc_error_code.as_ref())?;
        if !noted.tools_flagged.is_empty() {
            self.value(member!("tools_flagged"), &noted.tools_flagged)?;
        }
        self.some(member!("upstream_status"), noted.upstream_status.as_ref())?;
        self.some(member!("tokens"), noted.tokens.as_ref())?;
        self.some_text(member!("token_issuer"), noted.token_issuer.as_deref())
    }

    fn caller(&mut self, caller: &CallerRecord) -> Option<()> {
        self.member(member!("caller"));
        self.0.push(b'{');
        self.text(member!("kind"), caller.kind)?;
        self.text(member!("key"), &caller.key)?;
        self.text(member!("namespace"), &caller.namespace)?;
        if let Some(workload) = &caller.service_account {
            self.member(member!("service_account"));
            self.0.push(b'{');
            self.text(member!("namespace"), &workload.namespace)?;
            self.text(member!("name"), &workload.name)?;
            self.some_text(member!("pod"), workload.pod.as_deref())?;
            self.0.push(b'}');
        }
        self.some_text(member!("issuer"), caller.issuer.as_deref())?;
        self.some_text(member!("subject"), caller.subject.as_deref())?;
        self.some_text(member!("provider"), caller.provider.as_deref())?;
        self.0.push(b'}');
        Some(())
    }

    fn end(mut self) -> Vec<u8> {
        self.0.extend_from_slice(b"}\n");
        self.0
    }
}

/// The trace context an outgoing request carries: the current span's when the request is
/// traced (the upstream request's own span, a child of the client's request), else the
/// client's as it came. Nothing outside a client request.
pub fn outgoing_trace() -> Option<TraceContext> {
    if switchboard_telemetry::tracing_on() && !tracing::Span::current().is_disabled() {
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let context = tracing::Span::current().context();
        let mut carrier = std::collections::HashMap::new();
        opentelemetry::global::get_text_map_propagator(|p| {
            p.inject_context(&context, &mut carrier)
        });
        let traceparent = carrier.get(trace_context::TRACEPARENT)?;
        return TraceContext::new(
            traceparent,
            carrier.get(trace_context::TRACESTATE).map(String::as_str),
        );
    }
    CURRENT
        .try_with(|slot| slot.traced.get().and_then(|t| t.client.clone()))
        .ok()
        .flatten()
}

/// [`outgoing_trace`] as the `traceparent` and `tracestate` headers of an outgoing request.
pub fn propagate(headers: &mut http::HeaderMap) {
    if let Some(trace) = outgoing_trace() {
        insert_trace_headers(&trace, headers);
    }
}

/// `trace` as the `traceparent` and `tracestate` headers of an outgoing request.
pub fn insert_trace_headers(trace: &TraceContext, headers: &mut http::HeaderMap) {
    if let Ok(value) = http::HeaderValue::from_str(trace.traceparent()) {
        headers.insert(TRACEPARENT, value);
    }
    if let Some(value) = trace
        .tracestate()
        .and_then(|s| http::HeaderValue::from_str(s).ok())
    {
        headers.insert(TRACESTATE, value);
    }
}

/// The client's trace context in a request's `traceparent` and `tracestate` headers, if its
/// `traceparent` is a valid one.
pub fn trace_of_headers(headers: &http::HeaderMap) -> Option<TraceContext> {
    let traceparent = headers.get(TRACEPARENT)?.to_str().ok()?;
    let tracestate = headers.get(TRACESTATE).and_then(|v| v.to_str().ok());
    TraceContext::new(traceparent, tracestate)
}

const TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
const TRACESTATE: http::HeaderName = http::HeaderName::from_static("tracestate");

/// Makes `span` (a client request's) the child of the client's trace context when there is
/// one (else the root of a new trace); returns the trace id.
fn continue_trace(span: &tracing::Span, client: Option<&TraceContext>) -> String {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if let Some(client) = client {
        let parent =
            opentelemetry::global::get_text_map_propagator(|p| p.extract(&Carrier(client)));
        let _ = span.set_parent(parent);
    }
    span.context().span().span_context().trace_id().to_string()
}

/// A client's trace context as the OpenTelemetry propagator reads one.
struct Carrier<'a>(&'a TraceContext);

impl opentelemetry::propagation::Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            trace_context::TRACEPARENT => Some(self.0.traceparent()),
            trace_context::TRACESTATE => self.0.tracestate(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec![trace_context::TRACEPARENT, trace_context::TRACESTATE]
    }
}

/// Begins the trace of the request this task serves when it waited for the body (an MCP
/// message whose headers carry no trace context: see [`Slot::begin_trace`]), from the
/// message's `_meta`, and returns its span for the handler to run in. `None` when the trace had
/// begun already, or outside a client request.
pub fn begin_trace_from_message(body: &[u8]) -> Option<tracing::Span> {
    CURRENT
        .try_with(|slot| {
            if slot.trace_begun() {
                return None;
            }
            slot.begin_trace(TraceContext::from_message(body));
            Some(slot.span().clone())
        })
        .ok()
        .flatten()
}

/// The slot of the request this task serves, if any.
pub fn current() -> Option<Arc<Slot>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// Notes into the slot of the request this task serves (nothing outside one: probes, the
/// gateway's own background work).
pub fn note(f: impl FnOnce(&mut Noted)) {
    let _ = CURRENT.try_with(|slot| slot.note(f));
}

/// Whether the request this task serves is traced (its span exports): what only the span
/// needs is worked out only then.
pub fn traced() -> bool {
    current().is_some_and(|slot| !slot.span().is_disabled())
}

fn outcome_of_status(status: u16) -> &'static str {
    match status {
        200..=399 => "ok",
        401 => "unauthenticated",
        403 => "forbidden",
        404 => "not_found",
        408 => "timeout",
        413 => "payload_too_large",
        429 => "rate_limited",
        503 => "unavailable",
        400..=499 => "invalid_request",
        _ => "error",
    }
}

/// Where records go: a writer thread fed by a bounded queue, or nowhere.
pub struct AuditLog {
    queue: Option<SyncSender<Vec<u8>>>,
    /// The writer thread, joined by [`AuditLog::close`].
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    closing: Arc<std::sync::atomic::AtomicBool>,
    replica: String,
    dropped: AtomicU64,
    metrics: Option<Arc<Metrics>>,
}

/// Where the audit log is written (`--audit-log`).
#[derive(Clone, Debug, PartialEq)]
pub enum Destination {
    Off,
    Stdout,
    File(std::path::PathBuf),
}

impl Destination {
    pub fn parse(value: &str) -> Destination {
        match value.trim() {
            "" | "off" | "none" => Destination::Off,
            "stdout" | "-" => Destination::Stdout,
            path => Destination::File(path.into()),
        }
    }
}

impl AuditLog {
    pub fn off() -> AuditLog {
        AuditLog {
            queue: None,
            writer: Mutex::new(None),
            closing: Arc::default(),
            replica: String::new(),
            dropped: AtomicU64::new(0),
            metrics: None,
        }
    }

    /// Opens the destination and starts its writer; a file that cannot be opened is an error
    /// naming it.
    pub fn open(
        to: &Destination,
        replica: String,
        metrics: Arc<Metrics>,
    ) -> Result<AuditLog, String> {
        let out: Box<dyn Write + Send> = match to {
            Destination::Off => return Ok(AuditLog::off()),
            Destination::Stdout => Box::new(std::io::stdout()),
            Destination::File(path) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| format!("--audit-log {}: {e}", path.display()))?,
            ),
        };
        let (queue, lines) = sync_channel::<Vec<u8>>(QUEUE);
        let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop = closing.clone();
        let writer = std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_lines(out, lines, &stop))
            .map_err(|e| format!("the audit log's writer did not start: {e}"))?;
        Ok(AuditLog {
            queue: Some(queue),
            writer: Mutex::new(Some(writer)),
            closing,
            replica,
            dropped: AtomicU64::new(0),
            metrics: Some(metrics),
        })
    }

    pub fn is_on(&self) -> bool {
        self.queue.is_some()
    }

    /// Writes out every record queued so far and stops the writer (at exit).
    pub fn close(&self) {
        let Some(writer) = self.writer.lock().ok().and_then(|mut w| w.take()) else {
            return;
        };
        self.closing.store(true, Ordering::Release);
        writer.thread().unpark();
        let _ = writer.join();
    }

    /// Queues a record's line; never waits (a full queue drops it, counted).
    fn send(&self, line: Vec<u8>) {
        let Some(queue) = &self.queue else { return };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = queue.try_send(line) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            if let Some(metrics) = &self.metrics {
                metrics.audit_record_dropped();
            }
        }
    }
}

/// How often the writer takes what is queued: records reach the log within this. (A writer
/// woken per record costs every request a thread wake-up and a write: measured, a third more
/// CPU per call than the record itself.)
const WRITE_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

/// The writer thread: every [`WRITE_EVERY`], what is queued, in one flush; at close, the rest.
fn write_lines(
    out: Box<dyn Write + Send>,
    lines: std::sync::mpsc::Receiver<Vec<u8>>,
    closing: &std::sync::atomic::AtomicBool,
) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
    loop {
        std::thread::park_timeout(WRITE_EVERY);
        let last = closing.load(Ordering::Acquire);
        let mut wrote = false;
        loop {
            match lines.try_recv() {
                Ok(line) => {
                    let _ = out.write_all(&line);
                    wrote = true;
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => break,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    let _ = out.flush();
                    return;
                }
            }
        }
        if wrote {
            let _ = out.flush();
        }
        if last {
            return;
        }
    }
}

/// A request id: the client's `X-Request-Id` when it is a plain token of at most 128
/// characters, else one made here (unique in this process, unguessable across processes).
pub fn request_id(given: Option<&http::HeaderValue>) -> String {
    if let Some(given) = given.and_then(|v| v.to_str().ok())
        && !given.is_empty()
        && given.len() <= 128
        && given
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
    {
        return given.to_string();
    }
    static PREFIX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(rand::random::<u64>);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    // The two numbers as 32 hex digits (`{prefix:016x}{n:016x}`; `format!` cost a request
    // about 1,500 instructions, this a third of that).
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&prefix.to_be_bytes());
    bytes[8..].copy_from_slice(&n.to_be_bytes());
    let mut digits = [0u8; 32];
    // 16 bytes fill exactly 32 digits: its one error, a length that does not match, cannot
    // happen here; nor can hex digits be other than UTF-8. (Collected char by char, the
    // digits cost a request about 600 instructions.)
    let _ = hex::encode_to_slice(bytes, &mut digits);
    std::str::from_utf8(&digits)
        .map(str::to_owned)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_arrival() -> Arrival {
        Arrival {
            at: SystemTime::UNIX_EPOCH,
            started: Instant::now(),
            request_id: "r1".into(),
            endpoint: "mcp",
            http_method: http::Method::POST,
            path: "/mcp".into(),
            route: Some("/mcp"),
        }
    }

    fn slot() -> Arc<Slot> {
        Slot::new(slot_arrival())
    }

    #[tokio::test]
    async fn notes_reach_the_record_of_the_request_they_were_made_in() {
        let s = slot();
        s.scope(async {
            note(|n| {
                n.server = Some("alpha".into());
                n.tool = Some(name("echo"));
                n.outcome = Some("ok");
                n.bytes_in = 42;
            });
        })
        .await;
        // Outside any scope a note goes nowhere (and does not panic).
        note(|n| n.server = Some("elsewhere".into()));
        let line = s.line("gw-0", 200, 7).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["time"], "1970-01-01T00:00:00.000Z");
        assert_eq!(v["server"], "alpha");
        assert_eq!(v["tool"], "echo");
        assert_eq!(v["outcome"], "ok");
        assert_eq!(v["bytes_in"], 42);
        assert_eq!(v["bytes_out"], 7);
        assert_eq!(v["replica"], "gw-0");
        assert!(v.get("prompt").is_none(), "unset fields are left out: {v}");
        assert!(line.ends_with(b"\n"));
    }

    /// The record as serde's derive wrote it before [`Line`]: the oracle the writer is held to.
    #[derive(serde::Serialize)]
    struct SerdeRecord<'a> {
        schema: &'static str,
        time: String,
        request_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        trace_id: Option<&'a str>,
        replica: &'a str,
        endpoint: &'static str,
        http_method: &'a str,
        path: &'a str,
        status: u16,
        #[serde(flatten)]
        noted: &'a Noted,
        outcome: &'static str,
        duration_ms: f64,
        bytes_in: u64,
        bytes_out: u64,
    }

    fn serde_line(
        slot: &Slot,
        noted: &Noted,
        status: u16,
        bytes_out: u64,
        duration_ms: f64,
    ) -> Vec<u8> {
        let record = SerdeRecord {
            schema: SCHEMA,
            time: humantime::format_rfc3339_millis(slot.arrival.at).to_string(),
            request_id: &slot.arrival.request_id,
            trace_id: slot.traced.get().and_then(|t| t.trace_id.as_deref()),
            replica: "gw-0",
            endpoint: slot.arrival.endpoint,
            http_method: slot.arrival.http_method.as_str(),
            path: &slot.arrival.path,
            status,
            noted,
            outcome: noted.outcome.unwrap_or(outcome_of_status(status)),
            duration_ms,
            bytes_in: noted.bytes_in,
            bytes_out,
        };
        let mut line = serde_json::to_vec(&record).unwrap();
        line.push(b'\n');
        line
    }

    #[test]
    fn the_time_is_humantimes_text() {
        use std::time::{Duration, UNIX_EPOCH};
        let now = SystemTime::now();
        let times = [
            UNIX_EPOCH,
            UNIX_EPOCH + Duration::from_millis(1),
            UNIX_EPOCH + Duration::from_nanos(999_999_999),
            now,
            now + Duration::from_millis(7),
            now + Duration::from_secs(1) + Duration::from_nanos(123_456_789),
            UNIX_EPOCH + Duration::from_secs(253_402_300_799) + Duration::from_millis(999),
            UNIX_EPOCH + Duration::from_secs(951_782_400),
        ];
        // Twice over: the second time from the cached second where it is the same.
        for at in times.iter().chain(times.iter()) {
            let mut out = Vec::new();
            write_time(&mut out, *at);
            let expected = format!("\"{}\"", humantime::format_rfc3339_millis(*at));
            assert_eq!(String::from_utf8_lossy(&out), expected);
        }
    }

    #[test]
    fn the_line_is_what_serde_writes_byte_for_byte() {
        // Texts a client or an identity provider controls: quotes, backslashes, control
        // characters, the separators JSON allows raw and JavaScript does not, non-ASCII.
        let hard = "a\"b\\c\nd\u{1}e\u{7f}f\u{2028}g é 🦀 </script>";
        let caller = CallerRecord {
            kind: "person",
            key: format!("ns/{hard}"),
            namespace: "ns".into(),
            service_account: Some(WorkloadRecord {
                namespace: "team".into(),
                name: hard.into(),
                pod: Some("pod-1".into()),
            }),
            issuer: Some("https://idp.example/realms/x".into()),
            subject: Some(hard.into()),
            provider: Some("ns/idp".into()),
        };
        let everything = Noted {
            caller: Some(caller.clone()),
            server: Some("alpha".into()),
            virtual_server: Some(hard.into()),
            rpc_method: Some("tools/call".into()),
            tool: Some(name(hard)),
            prompt: Some("p".into()),
            resource: Some("file:///a b".into()),
            model: Some("m".into()),
            outcome: Some("upstream_error"),
            rpc_error_code: Some(-32_602),
            tools_flagged: vec![format!("{hard}: description changed"), "b: ok".into()],
            upstream_status: Some(502),
            tokens: Some(Tokens {
                input: 3,
                output: u64::MAX,
            }),
            token_issuer: Some(hard.into()),
            bytes_in: 42,
            rpc_id: Some("7".into()),
            protocol_version: Some("2026-07-28"),
            session_tag: Some(9),
            tool_error: true,
        };
        let key_only = Noted {
            caller: Some(CallerRecord {
                kind: "key",
                key: "ns/k".into(),
                namespace: "ns".into(),
                ..CallerRecord::default()
            }),
            server: Some("alpha".into()),
            ..Noted::default()
        };
        let workload_without_pod = Noted {
            caller: Some(CallerRecord {
                service_account: Some(WorkloadRecord {
                    pod: None,
                    ..caller.service_account.clone().unwrap()
                }),
                ..caller.clone()
            }),
            ..Noted::default()
        };
        let traced = slot();
        traced.begin_trace(TraceContext::new(TP, None));
        let odd_path = Slot::new(Arrival {
            path: format!("/mcp/{hard}"),
            request_id: hard.into(),
            at: SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_764_000_000_123),
            ..slot_arrival()
        });
        let mut compared = 0;
        for s in [slot(), traced, odd_path] {
            for noted in [
                &Noted::default(),
                &everything,
                &key_only,
                &workload_without_pod,
            ] {
                for (status, duration_ms) in [
                    (200, 0.0),
                    (429, 1.0),
                    (502, 12.345),
                    (200, 1e-3),
                    (200, 123_456.789),
                ] {
                    let ours = s
                        .line_lasting(noted, "gw-0", status, 17, duration_ms)
                        .unwrap();
                    let serde = serde_line(&s, noted, status, 17, duration_ms);
                    assert_eq!(
                        String::from_utf8_lossy(&ours),
                        String::from_utf8_lossy(&serde),
                        "status {status}, {duration_ms} ms"
                    );
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, 60);
    }

    #[test]
    fn outcome_defaults_to_the_status_class() {
        let s = slot();
        let v: serde_json::Value = serde_json::from_slice(&s.line("", 429, 0).unwrap()).unwrap();
        assert_eq!(v["outcome"], "rate_limited");
    }

    #[test]
    fn request_ids_and_names() {
        let v = |s: &str| http::HeaderValue::from_str(s).unwrap();
        assert_eq!(request_id(Some(&v("abc-123"))), "abc-123");
        let made = request_id(Some(&v("has space")));
        assert_eq!(made.len(), 32);
        assert!(
            made.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "{made}"
        );
        // One process's ids share their first half and count in the second.
        let next = request_id(None);
        assert_eq!(next[..16], made[..16]);
        let count = |id: &str| u64::from_str_radix(&id[16..], 16).expect("hex");
        assert!(count(&next) > count(&made), "{made} then {next}");
        assert_eq!(name(&"é".repeat(200)).len(), 256);
    }

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[tokio::test]
    async fn the_clients_trace_context_is_recorded_and_passed_on_once_begun() {
        let s = slot();
        // Before the trace began (an MCP message whose `_meta` is not read yet): nothing.
        s.scope(async { assert_eq!(outgoing_trace(), None) }).await;
        let client = TraceContext::new(TP, Some("k=v"));
        s.begin_trace(client.clone());
        assert!(s.trace_begun());
        // Once: a later context changes nothing.
        s.begin_trace(TraceContext::new(&TP.replace("4bf9", "5bf9"), None));
        s.scope(async {
            // Traces are off here: the client's context goes on as it came.
            assert_eq!(outgoing_trace(), client);
            let mut headers = http::HeaderMap::new();
            propagate(&mut headers);
            assert_eq!(headers["traceparent"], TP);
            assert_eq!(headers["tracestate"], "k=v");
        })
        .await;
        assert_eq!(outgoing_trace(), None, "outside a request");
        let v: serde_json::Value = serde_json::from_slice(&s.line("", 200, 0).unwrap()).unwrap();
        assert_eq!(v["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        // A request without any context has no trace id in its record.
        let bare = slot();
        bare.begin_trace(None);
        let v: serde_json::Value = serde_json::from_slice(&bare.line("", 200, 0).unwrap()).unwrap();
        assert!(v.get("trace_id").is_none(), "{v}");
    }

    #[tokio::test]
    async fn an_mcp_messages_meta_begins_a_trace_that_waited_for_the_body() {
        let s = slot();
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"_meta":{{"traceparent":"{TP}"}}}}}}"#
        );
        s.scope(async {
            assert!(begin_trace_from_message(body.as_bytes()).is_some());
            // Begun: a second body (or the edge's own fallback) changes nothing.
            assert!(begin_trace_from_message(b"{}").is_none());
            assert_eq!(
                outgoing_trace()
                    .map(|t| t.trace_id().to_string())
                    .as_deref(),
                Some(&TP[3..35])
            );
        })
        .await;
        assert!(
            begin_trace_from_message(body.as_bytes()).is_none(),
            "outside a request"
        );
    }

    #[test]
    fn a_header_context_is_read_only_when_valid() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(trace_of_headers(&headers), None);
        headers.insert("tracestate", http::HeaderValue::from_static("k=v"));
        headers.insert("traceparent", http::HeaderValue::from_static("00-abc"));
        assert_eq!(trace_of_headers(&headers), None);
        headers.insert("traceparent", http::HeaderValue::from_static(TP));
        let read = trace_of_headers(&headers).unwrap();
        assert_eq!((read.traceparent(), read.tracestate()), (TP, Some("k=v")));
    }
}
