"""A real Prometheus server for tests, and the metric names the chart's rules and dashboard use.

- `Prometheus`: starts the server built by tests/setup-prometheus.sh on a free loopback port, with
  a generated config scraping the given targets every second and its TSDB in a temporary
  directory; every wait is bounded, and `stop()` (or leaving the `with` block) kills it.
- `metric_names_in(files)`: every metric name the PromQL expressions of rule files (YAML,
  `groups[].rules[].expr`) and Grafana dashboards (JSON, `targets[].expr` and query variables)
  refer to.
- `registered_families(rust_files)`: the metric families the Rust sources register
  (`Registry::with_prefix` + `registry.register("name", ...)`), to check names without a build.

Only the standard library is needed, and PyYAML for rule files. Run as a script for the checks of
tests/suites.d/45-prometheus-rules.sh:

    python tests/e2e/prometheus.py names FILE...            # referenced metric names, one a line
    python tests/e2e/prometheus.py dashboard-rules FILE     # the dashboard's exprs as a rule file
    python tests/e2e/prometheus.py unregistered FILE...     # names no Rust source registers
    python tests/e2e/prometheus.py self-test                # a real server scrapes a fixture
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import reserve_port  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
SETUP = REPO_ROOT / "tests" / "setup-prometheus.sh"
RULES = REPO_ROOT / "charts" / "switchboard" / "files" / "prometheus-rules.yaml"
DASHBOARD = REPO_ROOT / "charts" / "switchboard" / "files" / "dashboard.json"
METRICS_SOURCES = [
    REPO_ROOT / "gateway" / "core" / "src" / "metrics.rs",
    REPO_ROOT / "operator" / "src" / "metrics.rs",
]


def bin_dir() -> Path:
    """The directory with `prometheus` and `promtool` (built once; instant when cached).
    SWITCHBOARD_PROMETHEUS_BIN overrides it."""
    override = os.environ.get("SWITCHBOARD_PROMETHEUS_BIN")
    if override:
        return Path(override)
    out = subprocess.run([str(SETUP)], check=True, stdout=subprocess.PIPE, text=True, timeout=1800).stdout
    return Path(out.strip().splitlines()[-1])


def _wait(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - keep polling, report the last failure
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last!r})" if last else ""))
        time.sleep(interval)


# --------------------------------------------------------------------------------------------
# The server


class Prometheus:
    """A Prometheus server scraping `targets` (`host:port`, loopback), as job `job` (one list) or
    one job per key (a dict `job -> [targets]`). `metrics_path` applies to every job."""

    def __init__(
        self,
        targets: Iterable[str] | dict[str, Iterable[str]],
        workdir: Path | None = None,
        *,
        job: str = "switchboard",
        metrics_path: str = "/metrics",
        scrape_interval: str = "1s",
        labels: dict[str, str] | None = None,
        rule_files: Iterable[Path] = (),
        bin_path: Path | None = None,
    ):
        jobs = dict(targets) if isinstance(targets, dict) else {job: list(targets)}
        self._own_dir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="switchboard-prometheus."))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = reserve_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = self.workdir / "prometheus.yml"
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval,
                       "scrape_timeout": scrape_interval},
            "rule_files": [str(Path(p).resolve()) for p in rule_files],
            "scrape_configs": [
                {
                    "job_name": name,
                    "metrics_path": metrics_path,
                    "static_configs": [{"targets": list(ts), "labels": dict(labels or {})}],
                }
                for name, ts in jobs.items()
            ],
        }
        # JSON is YAML: no PyYAML needed to write the config.
        self.config_path.write_text(json.dumps(config, indent=2))
        binary = (bin_path or bin_dir()) / "prometheus"
        self.log_path = self.workdir / "prometheus.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            [
                str(binary),
                f"--config.file={self.config_path}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                "--storage.tsdb.retention.time=1h",
                "--web.enable-lifecycle",
                "--log.level=warn",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            start_new_session=True,
        )

    # -- lifecycle -----------------------------------------------------------------------------

    def wait_ready(self, timeout: float = 30.0) -> Prometheus:
        def ready() -> bool:
            if self.popen.poll() is not None:
                raise AssertionError(f"prometheus exited with {self.popen.returncode}:\n{self.log_text()}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    return r.status == 200
            return False

        try:
            _wait(ready, timeout, "prometheus to be ready")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log_text()}") from None
        return self

    def stop(self, grace: float = 5.0) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(grace)
        self._log.close()
        if self._own_dir:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Prometheus:
        try:
            return self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def log_text(self) -> str:
        self._log.flush()
        with contextlib.suppress(OSError):
            return self.log_path.read_text("utf-8", "replace")[-4000:]
        return ""

    # -- the HTTP API --------------------------------------------------------------------------

    def api(self, path: str, **params: str | list[str]) -> Any:
        """GET /api/v1/<path>: its `data`, or AssertionError with Prometheus's error."""
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        if body.get("status") != "success":
            raise AssertionError(f"/api/v1/{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query's result (a vector: [{metric, value}], or a scalar's [time, value])."""
        return self.api("query", query=expr)["result"]

    def targets(self) -> list[dict]:
        return self.api("targets", state="active")["activeTargets"]

    def wait_targets_up(self, timeout: float = 30.0, expected: int | None = None) -> list[dict]:
        """Waits until every active target (at least `expected` of them) was scraped healthily."""

        def up() -> list[dict] | None:
            targets = self.targets()
            if expected is not None and len(targets) < expected:
                return None
            if targets and all(t["health"] == "up" for t in targets):
                return targets
            return None

        try:
            return _wait(up, timeout, "every scrape target to be up", interval=0.25)
        except AssertionError as exc:
            detail = [(t["scrapeUrl"], t["health"], t.get("lastError")) for t in self.targets()]
            raise AssertionError(f"{exc}: {detail}") from None

    def series_exist(self, name: str, window_seconds: int = 3600) -> bool:
        """Whether any series of metric `name` was ingested in the last `window_seconds`."""
        now = time.time()
        data = self.api("series", **{"match[]": f'{{__name__="{name}"}}', "start": str(now - window_seconds),
                                     "end": str(now + 60)})
        return bool(data)

    def metadata(self, family: str) -> list[dict]:
        """The scraped metadata (type, help) of metric family `family` (a counter's family has no
        `_total`, a histogram's no `_bucket`); present even when the family has no sample yet."""
        return self.api("metadata", metric=family).get(family, [])

    def metric_known(self, name: str) -> bool:
        """`name` has series, or its family was exposed (with HELP/TYPE and no sample yet: a
        labelled family before its first label set)."""
        if self.series_exist(name):
            return True
        return any(self.metadata(f) for f in family_candidates(name))


def family_candidates(name: str) -> list[str]:
    """The metric family a sample name may belong to: itself, and without a counter's or
    histogram's suffix."""
    out = [name]
    for suffix in ("_total", "_bucket", "_count", "_sum", "_created"):
        if name.endswith(suffix):
            out.append(name[: -len(suffix)])
    return out


# --------------------------------------------------------------------------------------------
# Metric names in PromQL

# Words that are PromQL syntax, not metric names.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
    "offset", "atan2", "inf", "nan", "start", "end",
    # aggregation operators (`sum by (x) (...)`: not always followed by a parenthesis)
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
    "topk", "quantile", "limitk", "limit_ratio",
}
# Keywords followed by a parenthesised list of label names.
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_TOKEN = re.compile(
    r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`'   # strings
    r"|#[^\n]*"                                          # comments
    r"|\[[^\]]*\]"                                       # ranges and subqueries [5m:1m]
    r"|\{[^}]*\}"                                        # label matchers (strings inside: no braces)
    r"|[A-Za-z_:][A-Za-z0-9_:]*"                         # identifiers
    r"|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?"                   # Grafana variables
    r"|[0-9][0-9a-zA-Z_.+-]*"                            # numbers and durations
    r"|\S"
)


def promql_metric_names(expr: str) -> set[str]:
    """Metric names in one PromQL expression, roughly parsed: identifiers that are neither
    function names (followed by `(`), keywords, nor label names (in the lists of by/without/on/
    ignoring/group_left/group_right, or inside `{...}`)."""
    tokens = [t for t in _TOKEN.findall(expr) if not t.startswith("#")]
    names: set[str] = set()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok in LABEL_LIST_KEYWORDS:
            if nxt == "(":  # skip the label list
                depth, i = 0, i + 1
                while i < len(tokens):
                    depth += {"(": 1, ")": -1}.get(tokens[i], 0)
                    if depth == 0:
                        break
                    i += 1
        elif tok.startswith("{") and "__name__" in tok:
            m = re.search(r'__name__\s*=\s*"([^"]+)"', tok)
            if m:
                names.add(m.group(1))
        elif re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", tok) and tok.lower() not in KEYWORDS and nxt != "(":
            names.add(tok)
        i += 1
    return names


def grafana_to_promql(expr: str) -> str:
    """A dashboard query with Grafana's variables replaced by values PromQL accepts."""
    fixed = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h", "__range_s": "3600", "interval": "1m"}

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        return fixed.get(name, ".*")

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", sub, expr)


def dashboard_exprs(dashboard: dict) -> list[tuple[str, str]]:
    """(where, expr) of every query in a Grafana dashboard: panels (nested in rows too) and the
    templating variables' queries (`label_values(metric, label)` gives `metric`)."""
    out: list[tuple[str, str]] = []

    def panels(items: list[dict]) -> None:
        for p in items:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((f"panel {p.get('title')!r} ref {t.get('refId')}", t["expr"]))
            panels(p.get("panels", []))

    panels(dashboard.get("panels", []))
    for var in dashboard.get("templating", {}).get("list", []):
        q = var.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if var.get("type") == "query" and isinstance(q, str):
            m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", q)
            if m:
                out.append((f"variable {var.get('name')}", m.group(1)))
            elif not q.startswith(("label_names(", "metrics(")):
                out.append((f"variable {var.get('name')}", q))
    return out


def rule_exprs(rules: dict) -> list[tuple[str, str]]:
    return [
        (r.get("alert") or r.get("record") or "?", r["expr"])
        for g in rules.get("groups", [])
        for r in g.get("rules", [])
    ]


def exprs_in(path: Path) -> list[tuple[str, str]]:
    path = Path(path)
    if path.suffix == ".json":
        return [(w, grafana_to_promql(e)) for w, e in dashboard_exprs(json.loads(path.read_text()))]
    import yaml  # PyYAML: in the test venv (tests/requirements.txt)

    return [(w, str(e)) for w, e in rule_exprs(yaml.safe_load(path.read_text()))]


def metric_names_in(expr_files: Iterable[Path]) -> set[str]:
    """Every metric name referenced by the given rule files (.yaml) and dashboards (.json)."""
    names: set[str] = set()
    for f in expr_files:
        for _, expr in exprs_in(f):
            names |= promql_metric_names(expr)
    return names


def registered_families(rust_files: Iterable[Path] = METRICS_SOURCES) -> dict[str, str]:
    """The metric families the Rust sources register, with their types: `<prefix>_<name>` for
    every `register("name", help, x.clone())` after a `Registry::with_prefix("prefix")` in the
    same file; the type (counter, gauge, histogram, or "" when unknown) from the declaration of
    `x` (a `let x ...;` or a struct field `x: ...`)."""
    families: dict[str, str] = {}
    for f in rust_files:
        text = Path(f).read_text()
        prefix = re.search(r'Registry::with_prefix\(\s*"(\w+)"\s*\)', text)
        for m in re.finditer(r'\bregister\(\s*"(\w+)"\s*,\s*(?:"(?:[^"\\]|\\.)*"\s*,\s*)?([\w.]+)\.clone\(\)', text, re.S):
            var = m.group(2).split(".")[-1]
            kind = ""
            for decl in re.finditer(rf"\blet\s+(?:mut\s+)?{var}\b[^;]*;|^\s*(?:pub\s+)?{var}\s*:[^\n]*", text, re.M):
                found = re.search(r"\b(Counter|Gauge|Histogram)", decl.group(0))
                if found:
                    kind = found.group(1).lower()
                    break
            families[f"{prefix.group(1)}_{m.group(1)}" if prefix else m.group(1)] = kind
    return families


def exposed_names(families: dict[str, str]) -> set[str]:
    """The sample names an OpenMetrics exposition of `families` has: a counter's `_total`, a
    histogram's `_bucket`, `_sum` and `_count`, a gauge's own name (unknown type: all of them)."""
    suffixes = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"]}
    names: set[str] = set()
    for family, kind in families.items():
        for suffix in suffixes.get(kind, ["", "_total", "_bucket", "_sum", "_count"]):
            names.add(family + suffix)
    return names


def unregistered(names: Iterable[str], families: dict[str, str]) -> list[str]:
    """Names (of the switchboard_ prefix) that no registered family exposes."""
    exposed = exposed_names(families)
    return sorted(n for n in names if n.startswith("switchboard_") and n not in exposed)


# --------------------------------------------------------------------------------------------
# Self-test: a real server scrapes a fixture exporter


FIXTURE = """\
# HELP switchboard_gateway_requests Client requests by endpoint, method and outcome.
# TYPE switchboard_gateway_requests counter
switchboard_gateway_requests_total{endpoint="mcp_single",method="tools/call",outcome="ok"} 3
# HELP switchboard_gateway_snapshot_generation Generation of the snapshot being served.
# TYPE switchboard_gateway_snapshot_generation gauge
switchboard_gateway_snapshot_generation 7
# HELP switchboard_gateway_upstream_request_duration_seconds Upstream request latency by server.
# TYPE switchboard_gateway_upstream_request_duration_seconds histogram
switchboard_gateway_upstream_request_duration_seconds_bucket{server="search",le="0.1"} 2
switchboard_gateway_upstream_request_duration_seconds_bucket{server="search",le="+Inf"} 3
switchboard_gateway_upstream_request_duration_seconds_sum{server="search"} 0.4
switchboard_gateway_upstream_request_duration_seconds_count{server="search"} 3
# HELP switchboard_gateway_shed_requests Requests the replica shed.
# TYPE switchboard_gateway_shed_requests counter
# EOF
"""


def self_test() -> int:
    """Starts the real Prometheus against a loopback exporter serving FIXTURE (OpenMetrics), and
    checks the API: target up, series found, a labelled family without samples known only by
    its metadata, a name never exposed unknown, a query evaluated. Prints `N passed, N failed`."""

    class Exporter(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = FIXTURE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/openmetrics-text; version=1.0.0; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{server.server_address[1]}"
    passed = failed = 0

    def check(name: str, cond: Callable[[], Any]) -> None:
        nonlocal passed, failed
        try:
            ok = cond()
        except Exception as exc:  # noqa: BLE001
            ok, name = False, f"{name}: {exc!r}"
        if ok:
            passed += 1
            print(f"ok   - {name}")
        else:
            failed += 1
            print(f"FAIL - {name}")

    try:
        with Prometheus([target], labels={"namespace": "sb"}) as prom:
            check("the API is served without the web UI's assets (/api/v1/status/buildinfo)",
                  lambda: prom.api("status/buildinfo")["version"])
            check("the fixture target is up within 30 s", lambda: prom.wait_targets_up(30, expected=1))
            _wait(lambda: prom.series_exist("switchboard_gateway_snapshot_generation"), 15, "the first scrape's series")
            check("series_exist: a counter's _total series", lambda: prom.series_exist("switchboard_gateway_requests_total"))
            check("series_exist: a histogram's _bucket series",
                  lambda: prom.series_exist("switchboard_gateway_upstream_request_duration_seconds_bucket"))
            check("series_exist: a name never exposed is absent", lambda: not prom.series_exist("switchboard_gateway_nonexistent"))
            check("metric_known: a family without samples is known by its metadata",
                  lambda: not prom.series_exist("switchboard_gateway_shed_requests_total")
                  and prom.metric_known("switchboard_gateway_shed_requests_total"))
            check("metric_known: a name never exposed is unknown", lambda: not prom.metric_known("switchboard_gateway_nonexistent_total"))
            check("a query is evaluated, with the target's labels",
                  lambda: prom.query('switchboard_gateway_snapshot_generation{namespace="sb"}')[0]["value"][1] == "7")
            check("an invalid query is an error", lambda: _raises(lambda: prom.query("sum(")))
    finally:
        server.shutdown()
    names = promql_metric_names(
        'sum by (namespace, server) (rate(a_total{outcome!="ok"}[5m])) / on (namespace) group_left (x) '
        'max(b) > bool 0 and histogram_quantile(0.99, sum by (le) (rate(c_bucket[$__rate_interval]))) or vector(1)'
    )
    check("promql_metric_names skips functions, keywords, label lists and matchers",
          lambda: names == {"a_total", "b", "c_bucket"} or print(names))
    families = registered_families()
    check("unregistered: a gauge read as a counter, a counter without _total, a typo are flagged",
          lambda: unregistered(["switchboard_gateway_snapshot_generation_total", "switchboard_gateway_requests",
                                "switchboard_gateway_request_total", "switchboard_gateway_requests_total",
                                "switchboard_gateway_upstream_request_duration_seconds_bucket",
                                "switchboard_operator_leader"], families)
          == ["switchboard_gateway_request_total", "switchboard_gateway_requests",
              "switchboard_gateway_snapshot_generation_total"])
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def _raises(fn: Callable[[], Any]) -> bool:
    try:
        fn()
    except AssertionError:
        return True
    return False


def main(argv: list[str]) -> int:
    cmd, args = (argv[0], argv[1:]) if argv else ("", [])
    if cmd == "names":
        for n in sorted(metric_names_in(Path(a) for a in args)):
            print(n)
        return 0
    if cmd == "dashboard-rules":
        # Every dashboard query as a recording rule, for `promtool check rules` (JSON is YAML).
        rules = [{"record": f"dashboard:query_{i}", "expr": e} for i, (_, e) in enumerate(exprs_in(Path(args[0])))]
        print(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}, indent=1))
        return 0
    if cmd == "unregistered":
        missing = unregistered(metric_names_in(Path(a) for a in args), registered_families())
        for n in missing:
            print(n)
        return 1 if missing else 0
    if cmd == "self-test":
        return self_test()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
