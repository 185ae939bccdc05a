//! Replica-wide admission: what a replica does with more requests than it can serve promptly
//! (docs/architecture.md, "Overload"). Past its capacity a replica that admits everything only
//! queues: every request waits longer, clients time out, and the work done for them is wasted.
//! Instead, the excess is shed at once with `503` and `Retry-After: 1`, before its body is read
//! or any upstream I/O, so clients (and load balancers) try again or elsewhere while the
//! requests the replica did admit keep a bounded latency.
//!
//! Two bounds, checked when a request's head arrives, on the requests in flight (counted from
//! arrival to response head: a relayed stream or a `subscriptions/listen` holds no slot once
//! its head is out, or thousands of idle streams would exhaust any bound):
//!
//! - **Queueing delay** (`--max-queue-delay`, default 10 ms), on by default because it only
//!   bites when the CPU cannot keep up: every 10 ms a probe sends the runtime a byte over a
//!   socket and times the echo, which is how long ready work (a request whose bytes arrived,
//!   an upstream's answer) waits for a CPU. Tasks waiting on I/O are not in that queue, so a
//!   replica waiting on thousands of slow upstream calls has no delay and no bound. When even
//!   the quickest echo of a 100 ms window took longer than the bound (a standing queue, not a
//!   burst or one stall), the replica caps requests in flight at what it has, scaled by
//!   bound/delay (halved at most, never below 32), and sheds the excess; again each window
//!   the delay stays above. A window under half the bound raises the cap by a quarter; a
//!   second without one above it lifts the cap. A cap rather than shedding everything while
//!   behind: admission stays smooth, no flood of work is let in each time the queue drains.
//! - **A fixed cap** (`--max-in-flight`, default 0: none), for deployments that know their
//!   number.
//!
//! Never shed: `/healthz`, `/readyz`, `/metrics` (a busy replica must still say it is alive and
//! be observable) and `/mcp-internal/*` (a message for an exchange this replica already holds).

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::Request;
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use serde_json::Value;

use switchboard_core::errors::{GatewayError, RestError, jsonrpc_error_response};
use switchboard_core::metrics::Metrics;
use switchboard_llm::errors::LlmError;
use switchboard_llm::format::Format;

/// The replica-wide bounds and the metrics that report them: the state of the `admit` layer
/// and of the queueing-delay probe.
pub struct Shedding {
    pub(crate) admission: Admission,
    pub metrics: Arc<Metrics>,
}

/// How often the probe measures the queueing delay.
const PROBE_PERIOD: Duration = Duration::from_millis(10);

/// The default of `--max-queue-delay`.
const DEFAULT_MAX_QUEUE_DELAY: Duration = Duration::from_millis(10);

/// The replica's bounds (flags of the gateway); zero turns a bound off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionLimits {
    pub max_in_flight: usize,
    pub max_queue_delay: Duration,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        AdmissionLimits {
            max_in_flight: 0,
            max_queue_delay: DEFAULT_MAX_QUEUE_DELAY,
        }
    }
}

/// Why a request was shed (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shed {
    InFlight,
    QueueDelay,
}

impl Shed {
    pub fn label(self) -> &'static str {
        match self {
            Shed::InFlight => "in_flight",
            Shed::QueueDelay => "queue_delay",
        }
    }
}

/// No cap.
const NONE: usize = usize::MAX;

/// The replica's admission state: requests in flight and the cap the queueing delay set.
#[derive(Debug)]
pub(crate) struct Admission {
    limits: AdmissionLimits,
    in_flight: AtomicUsize,
    delay_cap: AtomicUsize,
}

/// One admitted request's slot, given back when dropped (when the response head is ready).
#[derive(Debug)]
pub(crate) struct Permit<'a> {
    admission: &'a Admission,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.admission.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Admission {
    pub fn new(limits: AdmissionLimits) -> Admission {
        Admission {
            limits,
            in_flight: AtomicUsize::new(0),
            delay_cap: AtomicUsize::new(NONE),
        }
    }

    pub fn limits(&self) -> AdmissionLimits {
        self.limits
    }

    /// Admits a request now, or says why not: two atomic operations on the way in, one out.
    fn try_admit(&self) -> Result<Permit<'_>, Shed> {
        let before = self.in_flight.fetch_add(1, Ordering::Relaxed);
        let permit = Permit { admission: self };
        if self.limits.max_in_flight != 0 && before >= self.limits.max_in_flight {
            return Err(Shed::InFlight);
        }
        if before >= self.delay_cap.load(Ordering::Relaxed) {
            return Err(Shed::QueueDelay);
        }
        Ok(permit)
    }

    /// Requests admitted whose response head is not out yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The cap the queueing delay has set, if any.
    fn delay_cap(&self) -> Option<usize> {
        Some(self.delay_cap.load(Ordering::Relaxed)).filter(|c| *c != NONE)
    }

    fn set_delay_cap(&self, cap: Option<usize>) {
        self.delay_cap.store(cap.unwrap_or(NONE), Ordering::Relaxed);
    }
}

/// How long one verdict of the probe covers: the least delay of a window is what a standing
/// queue adds to everything, where one slow echo may be a burst or a stall.
const WINDOW: Duration = Duration::from_millis(100);
/// The lowest cap the queueing delay sets: enough to keep a replica's CPU busy, and a client
/// with a few dozen calls in flight is never refused by this bound.
const FLOOR: usize = 32;
/// How long the delay must stay at or under the bound for the cap to be lifted.
const RELEASE: Duration = Duration::from_secs(1);

/// The cap from the probe's windows (see the module's documentation).
#[derive(Debug, Default)]
struct DelayCap {
    cap: Option<usize>,
    calm_since: Option<Instant>,
}

impl DelayCap {
    /// One window's verdict: `delay` is the least queueing delay the probe saw in it.
    fn window(
        &mut self,
        now: Instant,
        delay: Duration,
        bound: Duration,
        in_flight: usize,
    ) -> Option<usize> {
        if delay > bound {
            self.calm_since = None;
            let base = self.cap.map_or(in_flight, |cap| cap.min(in_flight));
            // Saturated, the queue is what is in flight: scaled down in proportion.
            let ratio = (bound.as_secs_f64() / delay.as_secs_f64()).clamp(0.5, 0.9);
            self.cap = Some(((base as f64 * ratio) as usize).max(FLOOR));
        } else if let Some(cap) = self.cap {
            let calm = *self.calm_since.get_or_insert(now);
            self.cap = if now.duration_since(calm) >= RELEASE {
                None
            } else if delay <= bound / 2 {
                Some(cap + cap / 4 + 1)
            } else {
                Some(cap)
            };
        }
        self.cap
    }
}

/// Starts the probe of the queueing delay (when that bound is on and a runtime runs); it ends
/// with the gateway or the runtime.
///
/// The probe measures what a request meets: a thread of its own writes a byte every
/// `PROBE_PERIOD` into a socket pair whose other end an echo task on the runtime reads, and
/// times the echo. The byte wakes the task the way a request's bytes wake its connection's
/// task (the I/O driver, then the run queue), so it waits behind the same ready work. (A timer
/// is no probe: Tokio wakes timers after I/O and runs the task woken last first, so a timer
/// never sees a queue.) While an echo is outstanding the thread looks again every
/// `PROBE_PERIOD`, so a runtime that is stuck is noticed before it answers.
pub fn watch_queue_delay(shedding: &Arc<Shedding>) {
    let bound = shedding.admission.limits.max_queue_delay;
    if bound.is_zero() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let started = echo_pair(&runtime).and_then(|ours| {
        let shedding = Arc::downgrade(shedding);
        std::thread::Builder::new()
            .name("admission-probe".into())
            .spawn(move || probe(ours, &shedding, bound))
    });
    if let Err(e) = started {
        tracing::warn!(error = %e, "cannot start the queueing-delay probe: --max-queue-delay is off");
    }
}

/// A socket pair whose one end an echo task on `runtime` serves; the other end is returned.
fn echo_pair(runtime: &tokio::runtime::Handle) -> std::io::Result<UnixStream> {
    let (ours, theirs) = UnixStream::pair()?;
    theirs.set_nonblocking(true)?;
    let mut theirs = {
        let _entered = runtime.enter();
        tokio::net::UnixStream::from_std(theirs)?
    };
    runtime.spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut byte = [0u8; 1];
        while let Ok(1) = theirs.read(&mut byte).await {
            if theirs.write_all(&byte).await.is_err() {
                return;
            }
        }
    });
    ours.set_read_timeout(Some(PROBE_PERIOD))?;
    Ok(ours)
}

fn probe(mut echo: UnixStream, shedding: &Weak<Shedding>, bound: Duration) {
    let mut control = DelayCap::default();
    let mut window_start = Instant::now();
    let mut least: Option<Duration> = None;
    let mut last_warning: Option<Instant> = None;
    let mut byte = [0u8; 1];
    loop {
        std::thread::sleep(PROBE_PERIOD);
        let sent = Instant::now();
        if echo.write_all(&[1]).is_err() {
            return;
        }
        loop {
            let answered = match echo.read(&mut byte) {
                Ok(1) => true,
                // The runtime is gone, and its echo task with it.
                Ok(_) => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    false
                }
                Err(_) => return,
            };
            let now = Instant::now();
            // Unanswered, the echo has waited this long so far.
            let delay = now.duration_since(sent);
            least = Some(least.map_or(delay, |l| l.min(delay)));
            let Some(shedding) = shedding.upgrade() else {
                return;
            };
            if answered {
                shedding.metrics.queue_delay(delay);
            }
            if now.duration_since(window_start) >= WINDOW {
                let admission = &shedding.admission;
                let before = admission.delay_cap();
                let cap = control.window(now, least.unwrap_or(delay), bound, admission.in_flight());
                admission.set_delay_cap(cap);
                shedding.metrics.in_flight_cap(cap);
                window_start = now;
                least = None;
                // Under a steady overload the cap comes and goes: one line a minute says so,
                // the metrics count every shed request and show the cap.
                if let (None, Some(cap)) = (before, cap)
                    && last_warning.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
                {
                    last_warning = Some(now);
                    tracing::warn!(
                        ?delay,
                        ?bound,
                        cap,
                        "requests are queueing for the CPU (delay over --max-queue-delay): requests in flight capped, the excess shed with 503"
                    );
                }
            }
            if answered {
                break;
            }
        }
    }
}

/// Paths a replica always serves.
fn never_shed(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics") || path.starts_with("/mcp-internal/")
}

/// Admits a request (the permit is held for as long as its handler takes to produce the
/// response head), or sheds it before anything else happens to it: the refusal is the answer.
/// Paths a replica always serves are admitted without a permit.
pub(crate) fn admit(
    shedding: &Shedding,
    request: Request<Incoming>,
) -> Result<(Option<Permit<'_>>, Request<Incoming>), Box<Response>> {
    if never_shed(request.uri().path()) {
        return Ok((None, request));
    }
    match shedding.admission.try_admit() {
        Ok(permit) => Ok((Some(permit), request)),
        Err(shed) => {
            shedding.metrics.shed(shed.label());
            let response = shed_response(
                request.uri().path(),
                request.headers(),
                shed,
                &shedding.admission,
            );
            // The client may be writing its body before it reads: a small one is taken while
            // the refusal goes out (cheaper than the reconnect a reset costs it); past the
            // bounds the connection closes.
            crate::refused_body::discard_in_background(
                axum::body::Body::new(request.into_body()),
                SHED_DISCARD_BYTES,
                SHED_DISCARD_TIME,
            );
            Err(Box::new(response))
        }
    }
}

/// What of a shed request's body is read before its refusal (see `refused_body`): shedding must
/// stay cheap, so less than a refused large body gets.
const SHED_DISCARD_BYTES: usize = 1024 * 1024;
const SHED_DISCARD_TIME: Duration = Duration::from_millis(500);

/// The refusal in the protocol of the endpoint asked: a JSON-RPC error on MCP (id `null`: the
/// body was not read), the provider's error shape on the LLM endpoints, else the REST error.
fn shed_response(path: &str, headers: &HeaderMap, shed: Shed, admission: &Admission) -> Response {
    let limits = admission.limits();
    let error = GatewayError::Overloaded(match shed {
        Shed::InFlight => format!(
            "{} requests in flight (--max-in-flight); retry shortly",
            limits.max_in_flight
        ),
        Shed::QueueDelay => format!(
            "requests are queueing for the CPU for more than {} (--max-queue-delay); retry shortly",
            humantime::format_duration(limits.max_queue_delay)
        ),
    });
    let llm_format = match path {
        "/v1/messages" | "/v1/messages/count_tokens" => Some(Format::Anthropic),
        "/v1/chat/completions" => Some(Format::OpenAi),
        "/v1/models" if headers.contains_key("anthropic-version") => Some(Format::Anthropic),
        "/v1/models" => Some(Format::OpenAi),
        _ => None,
    };
    if let Some(format) = llm_format {
        LlmError::from(error).into_response(format)
    } else if path == "/mcp" || path.starts_with("/mcp/") {
        jsonrpc_error_response(&Value::Null, &error)
    } else {
        RestError(error).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{StatusCode, header};

    fn limits(max_in_flight: usize) -> AdmissionLimits {
        AdmissionLimits {
            max_in_flight,
            max_queue_delay: Duration::ZERO,
        }
    }

    #[test]
    fn in_flight_bound_sheds_the_excess_and_slots_come_back() {
        let admission = Admission::new(limits(2));
        let a = admission.try_admit().expect("first");
        let b = admission.try_admit().expect("second");
        assert_eq!(admission.try_admit().unwrap_err(), Shed::InFlight);
        assert_eq!(admission.in_flight(), 2, "a refusal holds no slot");
        drop(a);
        let c = admission.try_admit().expect("a slot came back");
        drop((b, c));
        assert_eq!(admission.in_flight(), 0);
    }

    #[test]
    fn zero_means_no_in_flight_bound() {
        let admission = Admission::new(limits(0));
        let permits: Vec<_> = (0..10_000)
            .map(|_| admission.try_admit().unwrap())
            .collect();
        assert_eq!(admission.in_flight(), 10_000);
        drop(permits);
        assert_eq!(admission.in_flight(), 0);
    }

    #[test]
    fn the_delay_cap_sheds_the_excess() {
        let admission = Admission::new(limits(0));
        admission.set_delay_cap(Some(1));
        let one = admission.try_admit().expect("under the cap");
        assert_eq!(admission.try_admit().unwrap_err(), Shed::QueueDelay);
        assert_eq!(admission.delay_cap(), Some(1));
        admission.set_delay_cap(None);
        let two = admission.try_admit().expect("no cap");
        drop((one, two));
        assert_eq!(admission.in_flight(), 0);
    }

    #[test]
    fn the_cap_follows_a_standing_queue() {
        let bound = Duration::from_millis(50);
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut cap = DelayCap::default();
        // Under the bound: no cap, whatever is in flight.
        assert_eq!(cap.window(t0, ms(40), bound, 5000), None);
        // A standing queue of 4x the bound: what is in flight, halved at most.
        assert_eq!(cap.window(t0 + ms(100), ms(200), bound, 1000), Some(500));
        // Still above: from the cap or what is in flight, whichever is lower.
        assert_eq!(cap.window(t0 + ms(200), ms(60), bound, 800), Some(416));
        assert_eq!(cap.window(t0 + ms(300), ms(100), bound, 100), Some(50));
        // Never below the floor.
        assert_eq!(cap.window(t0 + ms(400), ms(1000), bound, 10), Some(FLOOR));
        // Between half the bound and the bound: held.
        assert_eq!(cap.window(t0 + ms(500), ms(40), bound, 32), Some(32));
        // Under half the bound: raised by a quarter each window.
        assert_eq!(cap.window(t0 + ms(600), ms(10), bound, 32), Some(41));
        assert_eq!(cap.window(t0 + ms(700), ms(10), bound, 41), Some(52));
        // A second without a window above the bound lifts it.
        assert_eq!(cap.window(t0 + ms(1499), ms(10), bound, 52), Some(66));
        assert_eq!(cap.window(t0 + ms(1500), ms(10), bound, 52), None);
        // And the next standing queue starts from what is in flight again.
        assert_eq!(cap.window(t0 + ms(1600), ms(100), bound, 300), Some(150));
    }

    #[test]
    fn health_metrics_and_internal_routes_are_never_shed() {
        for path in ["/healthz", "/readyz", "/metrics", "/mcp-internal/exchange"] {
            assert!(never_shed(path), "{path}");
        }
        for path in [
            "/mcp",
            "/mcp/a",
            "/mcp-rest/tools/call",
            "/v1/messages",
            "/x",
        ] {
            assert!(!never_shed(path), "{path}");
        }
    }

    async fn body_json(response: Response) -> Value {
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn each_endpoint_refuses_in_its_own_shape() {
        let admission = Admission::new(limits(1));
        let none = HeaderMap::new();
        let check = |response: &Response| {
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        };

        let mcp = shed_response("/mcp/alpha", &none, Shed::InFlight, &admission);
        check(&mcp);
        let body = body_json(mcp).await;
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["id"], Value::Null);
        assert_eq!(
            body["error"]["code"],
            switchboard_core::errors::codes::INTERNAL_ERROR
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--max-in-flight")
        );

        let rest = shed_response("/mcp-rest/tools/call", &none, Shed::QueueDelay, &admission);
        check(&rest);
        assert_eq!(body_json(rest).await["error"]["code"], "overloaded");

        let anthropic = shed_response("/v1/messages", &none, Shed::InFlight, &admission);
        check(&anthropic);
        let body = body_json(anthropic).await;
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "overloaded_error");

        let openai = shed_response("/v1/chat/completions", &none, Shed::InFlight, &admission);
        check(&openai);
        assert_eq!(body_json(openai).await["error"]["code"], "overloaded");
    }
}
