#!/usr/bin/env python3
"""OpenAPI-backed tools (issue 24): what a `tools/call` of an operation costs through the gateway,
against calling the REST endpoint directly, in the same run; and what the kube-apiserver's whole
OpenAPI v3 document set costs a gateway in memory.

    python3 bench/openapi.py --oha OHA --gateway GATEWAY_BIN --upstream UPSTREAM_BIN --floor FLOOR_BIN \
        [--c1 5000] [--conc 16] [--seconds 8] [--rounds 2] [--callgrind-requests 1000] \
        [--parts latency,callgrind,kube] [--refetch] [--out bench/results/openapi.json] \
        [--paths gw-openapi,gw-mcp --latency-key latency_pair]   # some paths only, kept beside the others

The example upstream serves a tiny REST API beside its MCP endpoint (`GET /rest/add?a=&b=`,
its OpenAPI 3.1 document at `/rest/openapi.json`). One gateway has two servers: `rest`, an
OpenAPI-backed server (`url: UPSTREAM/rest`, `openapi.documentUrl: /rest/openapi.json`), and
`ex`, the upstream's MCP endpoint. bench/floor (the bare pass-through proxy on the gateway's
stack) sits in front of the same upstream. The paths, all `add(1, 2)`:

  rest-direct   GET  UPSTREAM/rest/add?a=1&b=2
  rest-floor    GET  FLOOR/rest/add?a=1&b=2             (the REST call through a bare proxy)
  gw-openapi    POST GATEWAY/mcp/rest  tools/call add   (2026-07-28, stateless; → GET /rest/add)
  mcp-direct    POST UPSTREAM/mcp      tools/call add   (2026-07-28)
  mcp-floor     POST FLOOR/mcp         tools/call add
  gw-mcp        POST GATEWAY/mcp/ex    tools/call add   (the same operation as an MCP tool)

Part `latency`: per round, each path one at a time (`oha -n C1 -c 1`) then each at CONC
connections for SECONDS (`oha -z`), with bench.py's CPU accounting (utime+stime of the gateway,
the floor and the upstream from /proc; a round whose "other" CPU is high is repeated once).
Medians over rounds; "+p50" is a path's p50 minus its direct call's p50 in the same run.

Part `callgrind`: the floor and the gateway each under valgrind's callgrind (collection zeroed
after a warm-up of 200 calls per path), exactly --callgrind-requests calls per path one at a
time, a dump per path: instructions per call, and the gateway's functions with the most
inclusive and self instructions (callgrind_annotate; files stay in the run dir).

Part `kube`: every document kube-apiserver lists under `/openapi/v3` (fetched once from a
throwaway API server, tests/k8s/cluster.sh, into $SWITCHBOARD_CACHE/bench/kube-openapi/, and
re-fetched when that is empty or with --refetch), one OpenAPI server per document with the
document inline (`document: {file: ...}`, compiled when the config loads; every operation
selected). The same gateway binary with the same MCP server and key but no OpenAPI servers is
the baseline: spawn → listening, RSS 1 s after ready (3 starts each, medians), the aggregate
`tools/list` walked (tools, pages, bytes, time) and RSS after it.

Prints the figures and the command line; writes JSON to --out (parts not run this time keep
their figures from the file, each part with the command that produced it). Loopback only; every load run is
bounded by a count or a duration. Benchmarks are not tests: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shlex
import shutil
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as B  # noqa: E402
import callgrind as CG  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CACHE = Path(os.environ.get("SWITCHBOARD_CACHE", Path.home() / ".cache/switchboard"))
KUBE_DOCS = CACHE / "bench" / "kube-openapi"
AUTH = {"Authorization": f"Bearer {B.GW_KEY}"}


# --------------------------------------------------------------------------------------------
# paths


class Path_(B.Path_):
    """A bench.py path with an HTTP method (GET paths send no body) and its own answer check."""

    def __init__(self, label: str, url: str, body: bytes | None, headers: dict, via: str, kind: str):
        super().__init__(label, url, body or b"", headers, via)
        self.method = "GET" if body is None else "POST"
        self.kind = kind  # "rest": the answer is {"sum": 3}; "mcp": a tools/call result

    def check(self) -> tuple[bool, str]:
        st, h, data, _ = B.http_req(self.url, self.body if self.method == "POST" else None, self.headers,
                                    method=self.method)
        try:
            msg = B.rpc_json(h.get("content-type", ""), data)
        except ValueError:
            msg = {}
        if self.kind == "rest":
            ok = st == 200 and msg == {"sum": 3}
        else:
            res = msg.get("result", {})
            sc = res.get("structuredContent", {}) if isinstance(res, dict) else {}
            ok = st == 200 and (sc.get("sum") == 3 or sc.get("result") == 3) and not res.get("isError")
        return ok, f"HTTP {st} {data[:300]!r}"


def mcp_call(label: str, url: str, via: str, extra: dict | None = None) -> Path_:
    body, h = B.modern_request("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, "add")
    return Path_(label, url, body, {**B.BASE_HEADERS, **(extra or {}), **h}, via, "mcp")


def paths_for(up: B.Proc, floor: B.Proc, gw: B.Proc) -> list[Path_]:
    return [
        Path_("REST GET /rest/add, direct", f"{up.url}/rest/add?a=1&b=2", None, {}, "rest-direct", "rest"),
        Path_("REST GET /rest/add through bench/floor", f"{floor.url}/rest/add?a=1&b=2", None, {}, "rest-floor", "rest"),
        mcp_call("gateway OpenAPI tool, tools/call on /mcp/rest", f"{gw.url}/mcp/rest", "gw-openapi", AUTH),
        mcp_call("MCP tools/call add, direct", f"{up.url}/mcp", "mcp-direct"),
        mcp_call("MCP tools/call add through bench/floor", f"{floor.url}/mcp", "mcp-floor"),
        mcp_call("gateway MCP tool, tools/call on /mcp/ex", f"{gw.url}/mcp/ex", "gw-mcp", AUTH),
    ]


class Bench(B.Bench):
    """bench.py's load runs, with GET paths (no body)."""

    def oha_argv(self, path, **kw) -> list[str]:
        argv = super().oha_argv(path, **kw)
        if getattr(path, "method", "POST") == "GET":
            argv[argv.index("-m") + 1] = "GET"
            i = argv.index("-d")
            del argv[i:i + 2]
        return argv


def gateway_servers(up: B.Proc) -> list[dict]:
    return [
        B.server("rest", f"{up.url}/rest", openapi={"documentUrl": "/rest/openapi.json"}),
        B.server("ex", f"{up.url}/mcp"),
    ]


def warm_listings(gw: B.Proc) -> None:
    """A client lists tools first (the gateway then has the schemas; the OpenAPI server's document
    is fetched and compiled)."""
    for prefix in ("rest", "ex"):
        body, h = B.modern_request("tools/list", {})
        st, _, data, _ = B.http_req(f"{gw.url}/mcp/{prefix}", body, {**B.BASE_HEADERS, **AUTH, **h})
        if st != 200:
            raise RuntimeError(f"tools/list on /mcp/{prefix}: HTTP {st} {data[:300]!r}")


# --------------------------------------------------------------------------------------------
# part 1: latency, throughput, CPU per call


def part_latency(args, bench: Bench, procs: B.Procs) -> dict:
    up = procs.start("upstream", [args.upstream, "--listen", "127.0.0.1:0", "--record", "0"])
    floor = procs.start("floor", [args.floor, "--listen", "127.0.0.1:0", "--upstream", up.url])
    cfg = args.rundir / "gateway-latency.yaml"
    cfg.write_text(B.to_yaml(B.gateway_config(gateway_servers(up))))
    gw = procs.start("gateway", [args.gateway, "--config", str(cfg), "--listen", "127.0.0.1:0"],
                     env={"RUST_LOG": "warn"})
    warm_listings(gw)
    paths = [p for p in paths_for(up, floor, gw) if not args.paths or p.via in args.paths]
    for p in paths:
        ok, detail = p.check()
        if not ok:
            raise RuntimeError(f"check failed: {p.label}: {detail}")
    tracked = {"gateway": gw, "upstream": up, "floor": floor}
    for p in paths:
        bench.run_load(p, tracked, n=300, conc=4)
    c1 = {p.via: [] for p in paths}
    tp = {p.via: [] for p in paths}
    for rnd in range(args.rounds):
        order = paths if rnd % 2 == 0 else list(reversed(paths))  # drift cancels over rounds
        for p in order:
            c1[p.via].append(bench.run_load(p, tracked, n=args.c1, conc=1))
            x = c1[p.via][-1]
            B.log(f"    c1  {p.label:50s} p50 {x['p50_ms']:.3f} p99 {x['p99_ms']:.3f} ms")
        for p in order:
            tp[p.via].append(bench.run_load(p, tracked, seconds=args.seconds, conc=args.conc))
            x = tp[p.via][-1]
            B.log(f"    c{args.conc} {p.label:50s} {x['req_per_s']:.0f} req/s; CPU ms/call "
                  + ", ".join(f"{k} {v}" for k, v in x['cpu_ms_per_call'].items() if v))
    out: dict = {"paths": {p.via: {"label": p.label, "method": p.method, "url": p.url,
                                   "curl": curl(p)} for p in paths}}
    proxy = {"rest-direct": None, "mcp-direct": None, "rest-floor": "floor", "mcp-floor": "floor",
             "gw-openapi": "gateway", "gw-mcp": "gateway"}
    direct_of = {"rest-floor": "rest-direct", "gw-openapi": "rest-direct", "mcp-floor": "mcp-direct",
                 "gw-mcp": "mcp-direct"}
    rows = {}
    for p in paths:
        a, t = B.merge_rounds(c1[p.via]), B.merge_rounds(tp[p.via])
        rows[p.via] = {
            "label": p.label,
            "c1_p50_ms": a["p50_ms"], "c1_p90_ms": a["p90_ms"], "c1_p99_ms": a["p99_ms"],
            "req_per_s": t["req_per_s"], "conc_p50_ms": t["p50_ms"], "conc_p99_ms": t["p99_ms"],
            "proxy": proxy[p.via],
            "proxy_cpu_ms_per_call": t["cpu_ms_per_call"].get(proxy[p.via]) if proxy[p.via] else None,
            "upstream_cpu_ms_per_call": t["cpu_ms_per_call"].get("upstream"),
            "non_200": a["non_200"] + t["non_200"],
            "contended_rounds": a["contended_rounds"] + t["contended_rounds"],
            "rounds": {"c1": [{k: x[k] for k in ("p50_ms", "p99_ms", "contended")} for x in c1[p.via]],
                       "throughput": [{k: x[k] for k in ("req_per_s", "cpu_ms_per_call", "contended", "other_cpu_s")}
                                      for x in tp[p.via]]},
        }
    for via, d in direct_of.items():
        if via not in rows or d not in rows:
            continue
        row, base = rows[via], rows[d]
        row["added_c1_p50_ms"] = B.r(row["c1_p50_ms"] - base["c1_p50_ms"])
        row["added_c1_p99_ms"] = B.r(row["c1_p99_ms"] - base["c1_p99_ms"])
        row["req_per_s_vs_direct"] = B.r(row["req_per_s"] / base["req_per_s"])

    def ratio(name: str, a: str, b: str, key: str) -> None:
        x, y = rows.get(a, {}).get(key), rows.get(b, {}).get(key)
        if x and y:
            ratios[name] = B.r(x / y)

    ratios: dict = {}
    ratio("openapi_cpu_vs_mcp_cpu", "gw-openapi", "gw-mcp", "proxy_cpu_ms_per_call")
    ratio("openapi_cpu_vs_rest_floor_cpu", "gw-openapi", "rest-floor", "proxy_cpu_ms_per_call")
    ratio("mcp_cpu_vs_mcp_floor_cpu", "gw-mcp", "mcp-floor", "proxy_cpu_ms_per_call")
    ratio("openapi_req_per_s_vs_mcp", "gw-openapi", "gw-mcp", "req_per_s")
    ratio("openapi_req_per_s_vs_rest_floor", "gw-openapi", "rest-floor", "req_per_s")
    ratio("mcp_req_per_s_vs_mcp_floor", "gw-mcp", "mcp-floor", "req_per_s")
    ratio("openapi_added_p50_vs_mcp_added_p50", "gw-openapi", "gw-mcp", "added_c1_p50_ms")
    ratio("openapi_c1_p50_vs_mcp_c1_p50", "gw-openapi", "gw-mcp", "c1_p50_ms")
    # per round, the two gateway paths side by side (the rounds alternate their order)
    if "gw-openapi" in rows and "gw-mcp" in rows:
        ratios["openapi_vs_mcp_req_per_s_by_round"] = [
            B.r(a["req_per_s"] / b["req_per_s"]) for a, b in zip(tp["gw-openapi"], tp["gw-mcp"])]
        ratios["openapi_vs_mcp_cpu_by_round"] = [
            B.r(a["cpu_ms_per_call"]["gateway"] / b["cpu_ms_per_call"]["gateway"])
            for a, b in zip(tp["gw-openapi"], tp["gw-mcp"])]
    out["rows"] = rows
    out["ratios"] = ratios
    out["params"] = {"c1_requests": args.c1, "conc": args.conc, "seconds": args.seconds, "rounds": args.rounds}
    procs.stop_all()
    return out


def curl(p: Path_) -> str:
    hs = " ".join(f"-H {shlex.quote(f'{k}: {v}')}" for k, v in p.headers.items())
    data = f" -d {shlex.quote(p.body.decode())}" if p.method == "POST" else ""
    return f"curl -s {shlex.quote(p.url)} {hs}{data}".replace("  ", " ")


# --------------------------------------------------------------------------------------------
# part 2: instructions per call under callgrind


def part_callgrind(args, bench: Bench, procs: B.Procs) -> dict:
    if not shutil.which("valgrind"):
        return {"status": "not measured", "why": "valgrind is not installed (apt-get install -y valgrind)"}
    outdir = args.rundir / "callgrind"
    outdir.mkdir(exist_ok=True)
    up = procs.start("cg-upstream", [args.upstream, "--listen", "127.0.0.1:0", "--record", "0"])
    grind = lambda name: ["valgrind", "--tool=callgrind", f"--callgrind-out-file={outdir}/{name}.out",  # noqa: E731
                          "--dump-instr=no", "--separate-threads=no"]
    result: dict = {"requests_per_path": args.callgrind_requests}
    # the floor first, then the gateway: each process under callgrind once, its paths in turn
    floor = procs.start("cg-floor", grind("floor") + [args.floor, "--listen", "127.0.0.1:0", "--upstream", up.url],
                        ready_timeout=120)
    fl_paths = [p for p in paths_for(up, floor, floor) if p.via in ("rest-floor", "mcp-floor")]
    result.update(grind_paths(args, bench, floor, fl_paths, outdir, "floor"))
    procs.stop(floor)
    cfg = args.rundir / "gateway-callgrind.yaml"
    cfg.write_text(B.to_yaml(B.gateway_config(gateway_servers(up))))
    gw = procs.start("cg-gateway", grind("gateway") + [args.gateway, "--config", str(cfg), "--listen", "127.0.0.1:0"],
                     ready_timeout=120, env={"RUST_LOG": "warn"})
    warm_listings(gw)
    gw_paths = [p for p in paths_for(up, gw, gw) if p.via in ("gw-openapi", "gw-mcp")]
    result.update(grind_paths(args, bench, gw, gw_paths, outdir, "gateway"))
    procs.stop_all()
    per = {k: v["instructions_per_call"] for k, v in result.items() if isinstance(v, dict) and "instructions_per_call" in v}
    result["ratios"] = {
        "openapi_vs_mcp": B.r(per["gw-openapi"] / per["gw-mcp"]),
        "openapi_vs_rest_floor": B.r(per["gw-openapi"] / per["rest-floor"]),
        "mcp_vs_mcp_floor": B.r(per["gw-mcp"] / per["mcp-floor"]),
        "openapi_minus_mcp": per["gw-openapi"] - per["gw-mcp"],
    }
    return result


def grind_paths(args, bench: Bench, proc: B.Proc, paths: list[Path_], outdir: Path, name: str) -> dict:
    for p in paths:
        ok, detail = p.check()
        if not ok:
            raise RuntimeError(f"check failed under callgrind: {p.label}: {detail}")
        subprocess.run(bench.oha_argv(p, n=200, conc=1), capture_output=True, timeout=900)
    out = {}
    for p in paths:
        subprocess.run(["callgrind_control", "--zero", str(proc.pid)], capture_output=True, timeout=60)
        before = set(glob.glob(f"{outdir}/{name}.out.*"))
        argv = bench.oha_argv(p, n=args.callgrind_requests, conc=1)
        bench.commands.append(f"(under callgrind) {shlex.join(argv)}")
        t0 = time.monotonic()
        r = subprocess.run(argv, capture_output=True, timeout=3600)
        wall = time.monotonic() - t0
        codes = json.loads(r.stdout).get("statusCodeDistribution", {})
        subprocess.run(["callgrind_control", "--dump", str(proc.pid)], capture_output=True, timeout=120)
        dump = None
        for _ in range(100):  # the dump is written by the process: a bounded wait for the new file
            new = sorted(set(glob.glob(f"{outdir}/{name}.out.*")) - before, key=os.path.getmtime)
            if new and os.path.getsize(new[-1]) > 0:
                time.sleep(0.5)
                dump = new[-1]
                break
            time.sleep(0.2)
        if dump is None:
            raise RuntimeError(f"no callgrind dump for {p.via}")
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", "--auto=no", dump],
                             capture_output=True, text=True).stdout
        ann_self = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", dump],
                                  capture_output=True, text=True).stdout
        (outdir / f"annotate.{p.via}.inclusive.txt").write_text(ann)
        (outdir / f"annotate.{p.via}.self.txt").write_text(ann_self)
        m = re.search(r"([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS", ann) or re.search(r"([\d,]+)\s+PROGRAM TOTALS", ann)
        total = int(m.group(1).replace(",", "")) if m else 0
        out[p.via] = {
            "label": p.label, "status_codes": codes, "instructions_total": total,
            "focus_inclusive_per_call": focus(ann, args.callgrind_requests),
            "instructions_per_call": total // max(args.callgrind_requests, 1), "wall_s": round(wall, 1),
            "dump": dump,
            "top_inclusive_switchboard": CG.top_lines(ann, args.top, only="switchboard_"),
            "top_self": CG.top_lines(ann_self, args.top),
        }
        B.log(f"    callgrind {p.label}: {out[p.via]['instructions_per_call']:,} instructions per call ({codes})")
    return out


# Functions that tell the OpenAPI path from the MCP path (inclusive instructions; a function
# inlined into several callers shows once per caller, the largest is kept).
FOCUS = {
    "the upstream exchange (Upstreams::call_in_era)": "switchboard_upstream::client::Upstreams::call_in_era::{{closure}}",
    "of which the OpenAPI server's answer (Upstreams::openapi)": "switchboard_upstream::client::Upstreams>::openapi::{{closure}}",
    "of which the MCP upstream's answer (Upstreams::modern)": "switchboard_upstream::client::Upstreams::modern::",
    "send_following (request out, answer head in)": "switchboard_upstream::client::Upstreams::send_following::",
    "the REST URL parsed per call (url::Parser::parse_url)": "url::parser::Parser::parse_url",
    "arguments → REST request (OperationTool::request)": "switchboard_openapi::compile::OperationTool>::request",
    "REST answer → tool result tree (OperationTool::result)": "switchboard_openapi::compile::OperationTool>::result",
    "a JSON text parsed into a Value tree (ValueVisitor::visit_map)": "ValueVisitor as serde_core::de::Visitor>::visit_map",
    "Value trees dropped": "core::ptr::drop_in_place<serde_json::value::Value>",
    "the client's answer written (replies::rpc_response)": "switchboard_mcp::endpoint::replies::rpc_response",
    "the upstream's JSON-RPC answer read (jsonrpc::raw_response)": "switchboard_protocol::jsonrpc::raw_response",
    "the client's message read (parse_message)": "switchboard_mcp::endpoint::message::parse_message",
    "format! (alloc::fmt::format_inner)": "alloc::fmt::format::format_inner",
    "the audit record (audit::Slot::finish)": "switchboard_core::audit::Slot::finish",
}


def focus(annotate: str, calls: int) -> dict:
    best: dict[str, int] = {}
    for line in annotate.splitlines():
        m = CG.LINE.match(line)
        if not m:
            continue
        for label, needle in FOCUS.items():
            if needle in m.group(3):
                best[label] = max(best.get(label, 0), int(m.group(1).replace(",", "")))
    return {label: best[label] // max(calls, 1) for label in FOCUS if label in best}


# --------------------------------------------------------------------------------------------
# part 3: the kube-apiserver's OpenAPI v3 documents


def doc_file(key: str) -> str:
    """`apis/apps/v1` → `apis__apps__v1.json` (file names in the cache)."""
    return re.sub(r"[^A-Za-z0-9.-]+", "__", key).strip("_") + ".json"


def fetch_kube_documents(rundir: Path) -> dict:
    """Starts a throwaway API server (tests/k8s/cluster.sh), fetches /openapi/v3 and every document
    it lists into KUBE_DOCS, stops the API server."""
    cluster_dir = rundir / "kube-cluster"
    cluster = REPO / "tests" / "k8s" / "cluster.sh"
    B.log(f"  starting a throwaway kube-apiserver ({cluster} start {cluster_dir})")
    started = subprocess.run([str(cluster), "start", str(cluster_dir)], capture_output=True, text=True, timeout=900)
    if started.returncode != 0:
        raise RuntimeError(f"cluster.sh start failed: {started.stderr[-2000:]}")
    try:
        env = dict(line.split("=", 1) for line in (cluster_dir / "cluster.env").read_text().splitlines() if "=" in line)
        api, token, ca = env["SWITCHBOARD_K8S_API"], env["SWITCHBOARD_K8S_TOKEN"], env["SWITCHBOARD_K8S_CA"]
        ctx = ssl.create_default_context(cafile=ca)

        def get(path: str) -> bytes:
            req = urllib.request.Request(f"{api}{path}", headers={"Authorization": f"Bearer {token}",
                                                                  "Accept": "application/json"})
            with urllib.request.urlopen(req, context=ctx, timeout=60) as resp:
                return resp.read()

        version = json.loads(get("/version"))
        index_raw = get("/openapi/v3")
        index = json.loads(index_raw)
        tmp = KUBE_DOCS.with_name(KUBE_DOCS.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        docs = {}
        for key, entry in sorted(index.get("paths", {}).items()):
            data = get(entry["serverRelativeURL"])
            name = doc_file(key)
            (tmp / name).write_bytes(data)
            docs[key] = {"file": name, "bytes": len(data), "serverRelativeURL": entry["serverRelativeURL"]}
        meta = {"fetched": B.now_iso(), "api_server_version": version.get("gitVersion"), "index_bytes": len(index_raw),
                "documents": docs}
        (tmp / "index.json").write_text(json.dumps(meta, indent=1) + "\n")
        shutil.rmtree(KUBE_DOCS, ignore_errors=True)
        tmp.rename(KUBE_DOCS)
        B.log(f"  fetched {len(docs)} documents ({sum(d['bytes'] for d in docs.values()):,} bytes) from "
              f"kube-apiserver {meta['api_server_version']} into {KUBE_DOCS}")
        return meta
    finally:
        subprocess.run([str(cluster), "stop", str(cluster_dir)], capture_output=True, timeout=120)


def server_name(i: int, key: str) -> str:
    """A DNS label per document: `api/v1` → `k00-core-v1`, `apis/apps/v1` → `k05-apps-v1`."""
    label = key.removeprefix("apis/").replace("api/", "core/")
    label = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    return f"k{i:02d}-{label}"[:63].rstrip("-")


def operations_in(doc: dict) -> int:
    methods = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
    return sum(1 for item in (doc.get("paths") or {}).values() if isinstance(item, dict)
               for m in methods if isinstance(item.get(m), dict))


def walk_listing(gw_url: str, max_pages: int = 500) -> dict:
    """The aggregate tools/list, every page: tools, pages, bytes, time, tools per prefix."""
    cursor, tools, pages, size, http_s = None, 0, 0, 0, 0.0
    per_prefix: dict[str, int] = {}
    schema_bytes = {"inputSchema": 0, "outputSchema": 0}
    largest: list[tuple[int, str]] = []
    errors: list = []
    t0 = time.perf_counter()
    for _ in range(max_pages):
        body, h = B.modern_request("tools/list", {"cursor": cursor} if cursor else {})
        st, hh, data, elapsed = B.http_req(f"{gw_url}/mcp", body, {**B.BASE_HEADERS, **AUTH, **h}, timeout=300)
        http_s += elapsed
        if st != 200:
            raise RuntimeError(f"tools/list HTTP {st}: {data[:300]!r}")
        size += len(data)
        res = B.rpc_json(hh.get("content-type", ""), data).get("result", {})
        for t in res.get("tools", []):
            prefix = t["name"].split("__", 1)[0]
            per_prefix[prefix] = per_prefix.get(prefix, 0) + 1
            for k in schema_bytes:
                if k in t:
                    schema_bytes[k] += len(json.dumps(t[k], separators=(",", ":")))
            largest.append((len(json.dumps(t, separators=(",", ":"))), t["name"]))
            largest = sorted(largest, reverse=True)[:8]
        tools += len(res.get("tools", []))
        pages += 1
        errors.extend((res.get("_meta") or {}).get("switchboard.dev/listingErrors") or [])
        cursor = res.get("nextCursor")
        if not cursor:
            break
    return {"tools": tools, "pages": pages, "bytes": size, "seconds": B.r(time.perf_counter() - t0, 3),
            "http_seconds": B.r(http_s, 3), "schema_bytes": schema_bytes,
            "largest_tools": [{"name": n, "bytes": b} for b, n in largest],
            "per_prefix": per_prefix, "listing_errors": errors}


def part_kube(args, procs: B.Procs) -> dict:
    if args.refetch or not (KUBE_DOCS / "index.json").is_file():
        fetch_kube_documents(args.rundir)
    meta = json.loads((KUBE_DOCS / "index.json").read_text())
    up = procs.start("kube-upstream", [args.upstream, "--listen", "127.0.0.1:0", "--record", "0"])
    base_servers = [B.server("ex", f"{up.url}/mcp")]
    docs = []
    servers = []
    for i, (key, d) in enumerate(sorted(meta["documents"].items())):
        path = KUBE_DOCS / d["file"]
        doc = json.loads(path.read_text())
        name = server_name(i, key)
        docs.append({"key": key, "server": name, "bytes": d["bytes"], "operations": operations_in(doc)})
        # any base URL: nothing is called, the documents are compiled at load
        servers.append(B.server(name, "https://127.0.0.1:6443", openapi={"document": {"file": str(path)}}))
    configs = {"baseline": B.gateway_config(base_servers), "kube": B.gateway_config(base_servers + servers)}
    out: dict = {"api_server_version": meta.get("api_server_version"), "fetched": meta.get("fetched"),
                 "documents": len(docs), "document_bytes": sum(d["bytes"] for d in docs),
                 "operations_in_documents": sum(d["operations"] for d in docs), "per_document": docs}
    for label, cfg in configs.items():
        path = args.rundir / f"gateway-{label}.yaml"
        path.write_text(B.to_yaml(cfg))
        starts = []
        for k in range(args.kube_starts):
            t_spawn = time.time()
            gw = procs.start(f"gateway-{label}-{k}", [args.gateway, "--config", str(path), "--listen", "127.0.0.1:0"],
                             env={"RUST_LOG": "warn"}, ready_timeout=300)
            ready = gw.ready_at - t_spawn
            time.sleep(1.0)
            rss = gw.rss_kb()
            hwm = gw.hwm_kb()
            run = {"spawn_to_listening_ms": B.r(ready * 1000, 1), "rss_kib": rss, "hwm_kib": hwm}
            if k == 0:
                listing = walk_listing(gw.url)
                time.sleep(0.5)
                run["rss_after_listing_kib"] = gw.rss_kb()
                run["hwm_after_listing_kib"] = gw.hwm_kb()
                second = walk_listing(gw.url)
                run["rss_after_second_listing_kib"] = gw.rss_kb()
                run["listing"] = {k2: v for k2, v in listing.items() if k2 != "per_prefix"}
                run["second_listing_seconds"] = second["seconds"]
                run["second_listing_http_seconds"] = second["http_seconds"]
                if label == "kube":
                    for d in docs:
                        d["tools"] = listing["per_prefix"].get(d["server"], 0)
                    log_text = gw.log_text()
                    left = [line.split("problem=", 1)[1] for line in log_text.splitlines()
                            if "an OpenAPI operation is left out" in line and "problem=" in line]
                    run["operations_left_out_warnings"] = len(left)
                    run["operations_left_out"] = left
            procs.stop(gw)
            starts.append(run)
            B.log(f"  {label} start {k}: listening after {run['spawn_to_listening_ms']} ms, RSS {rss / 1024:.1f} MiB"
                  + (f"; listing {run['listing']['tools']} tools, {run['listing']['bytes']:,} bytes, "
                     f"{run['listing']['pages']} pages in {run['listing']['seconds']} s; "
                     f"RSS after {run['rss_after_listing_kib'] / 1024:.1f} MiB" if k == 0 else ""))
        out[label] = {
            "starts": starts,
            "spawn_to_listening_ms_median": B.r(statistics.median(s["spawn_to_listening_ms"] for s in starts), 1),
            "rss_kib_median": int(statistics.median(s["rss_kib"] for s in starts)),
            "hwm_kib_median": int(statistics.median(s["hwm_kib"] for s in starts)),
        }
    b, k = out["baseline"], out["kube"]
    out["rss_delta_kib"] = k["rss_kib_median"] - b["rss_kib_median"]
    out["hwm_delta_kib"] = k["hwm_kib_median"] - b["hwm_kib_median"]
    out["load_ms_delta"] = B.r(k["spawn_to_listening_ms_median"] - b["spawn_to_listening_ms_median"], 1)
    out["tools"] = sum(d.get("tools", 0) for d in docs)
    out["rss_delta_after_listing_kib"] = (k["starts"][0]["rss_after_listing_kib"]
                                          - b["starts"][0]["rss_after_listing_kib"])
    procs.stop_all()
    return out


# --------------------------------------------------------------------------------------------
# report


def fmt(x, nd=3) -> str:
    return "–" if x is None else (f"{x:,.{nd}f}" if isinstance(x, float) else f"{x:,}")


def report(res: dict) -> str:
    L = [f"# OpenAPI-backed tools (issue 24), {res['date']}", "", f"`{res['command']}`", ""]
    for key in [k for k in res if k.startswith("latency")]:
        lat = res[key]
        p = lat["params"]
        L += [f"`{lat.get('command', res['command'])}`", "",
              f"{key}: one at a time (`oha -n {p['c1_requests']} -c 1`) and {p['conc']} connections for {p['seconds']} s, "
              f"medians of {p['rounds']} rounds:", "",
              "| path | p50 ms | p99 ms | +p50 vs its direct | req/s | ÷ its direct | proxy CPU ms/call | upstream CPU ms/call | contended |",
              "|---|---|---|---|---|---|---|---|---|"]
        for via, x in lat["rows"].items():
            L.append(f"| {x['label']} | {fmt(x['c1_p50_ms'])} | {fmt(x['c1_p99_ms'])} | {fmt(x.get('added_c1_p50_ms'))} | "
                     f"{fmt(x['req_per_s'], 0)} | {fmt(x.get('req_per_s_vs_direct'), 2)} | {fmt(x['proxy_cpu_ms_per_call'], 4)} | "
                     f"{fmt(x['upstream_cpu_ms_per_call'], 4)} | {x['contended_rounds']} |")
        L += ["", "Ratios (same run): " + ", ".join(f"{k} {v}" for k, v in lat["ratios"].items()), ""]
    cg = res.get("callgrind")
    if cg and "ratios" in cg:
        L += [f"Instructions per call under callgrind ({cg['requests_per_path']} calls per path, one at a time):", "",
              "| path | instructions per call |", "|---|---|"]
        for via in ("rest-floor", "mcp-floor", "gw-openapi", "gw-mcp"):
            L.append(f"| {cg[via]['label']} | {cg[via]['instructions_per_call']:,} |")
        L += ["", "Ratios: " + ", ".join(f"{k} {v}" for k, v in cg["ratios"].items()), ""]
        fo, fm = cg["gw-openapi"].get("focus_inclusive_per_call", {}), cg["gw-mcp"].get("focus_inclusive_per_call", {})
        L += ["| function (inclusive, per call) | OpenAPI path | MCP path |", "|---|---|---|"]
        for label in FOCUS:
            if label in fo or label in fm:
                L.append(f"| {label} | {fmt(fo.get(label))} | {fmt(fm.get(label))} |")
        L.append("")
        for via in ("gw-openapi", "gw-mcp"):
            L += [f"{via}: Switchboard functions, inclusive:", "```", *cg[via]["top_inclusive_switchboard"], "```",
                  f"{via}: self:", "```", *cg[via]["top_self"], "```", ""]
    elif cg:
        L += [f"callgrind: {cg.get('status')}: {cg.get('why')}", ""]
    kube = res.get("kube")
    if kube and "baseline" in kube:
        b, k = kube["baseline"], kube["kube"]
        kl = k["starts"][0]["listing"]
        L += [f"kube-apiserver {kube['api_server_version']}: {kube['documents']} documents under /openapi/v3, "
              f"{kube['document_bytes']:,} bytes, {kube['operations_in_documents']:,} operations; "
              f"{kube['tools']:,} tools listed ({kl['pages']} pages, {kl['bytes']:,} bytes, first walk {kl['seconds']} s "
              f"({kl.get('http_seconds')} s of it HTTP), second {k['starts'][0]['second_listing_seconds']} s; "
              f"input schemas {kl['schema_bytes']['inputSchema']:,} bytes, output schemas "
              f"{kl['schema_bytes']['outputSchema']:,} bytes; largest "
              + ", ".join(f"{t['name']} {t['bytes']:,}" for t in kl['largest_tools'][:3]) + "); "
              f"{k['starts'][0].get('operations_left_out_warnings')} operations left out (warnings).", "",
              "| gateway | spawn → listening ms | RSS MiB (1 s after ready) | peak RSS MiB | RSS after the listing MiB |",
              "|---|---|---|---|---|"]
        for label, x in (("baseline (1 MCP server)", b), (f"+ {kube['documents']} OpenAPI servers", k)):
            L.append(f"| {label} | {fmt(x['spawn_to_listening_ms_median'], 1)} | {x['rss_kib_median'] / 1024:.1f} | "
                     f"{x['hwm_kib_median'] / 1024:.1f} | {x['starts'][0]['rss_after_listing_kib'] / 1024:.1f} |")
        L += ["", f"RSS delta {kube['rss_delta_kib'] / 1024:.1f} MiB (peak {kube['hwm_delta_kib'] / 1024:.1f} MiB), "
              f"load +{kube['load_ms_delta']} ms; after the listing +{kube['rss_delta_after_listing_kib'] / 1024:.1f} MiB", "",
              "| document | bytes | operations | tools |", "|---|---|---|---|"]
        for d in sorted(kube["per_document"], key=lambda d: -d["bytes"]):
            L.append(f"| {d['key']} | {d['bytes']:,} | {d['operations']} | {d.get('tools', '–')} |")
        L.append("")
    L += ["Load commands:", "```", *res.get("commands", [])[:30], "```"]
    return "\n".join(L) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--oha", required=True)
    ap.add_argument("--gateway", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--floor", required=True)
    ap.add_argument("--parts", default="latency,callgrind,kube")
    ap.add_argument("--paths", default="", help="latency part: only these paths (e.g. gw-openapi,gw-mcp)")
    ap.add_argument("--latency-key", default="latency",
                    help="where the latency part's figures go in the JSON (a second run beside the first)")
    ap.add_argument("--c1", type=int, default=5000, help="requests one at a time per path and round")
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--callgrind-requests", type=int, default=1000)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--kube-starts", type=int, default=3)
    ap.add_argument("--refetch", action="store_true", help="fetch the kube-apiserver's documents again")
    ap.add_argument("--out", default=str(HERE / "results" / "openapi.json"))
    ap.add_argument("--versions", default="{}", help="JSON merged into the result's versions")
    args = ap.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    args.paths = {p.strip() for p in args.paths.split(",") if p.strip()}
    args.rundir = CACHE / "bench" / "runs" / f"openapi-{time.strftime('%Y%m%d-%H%M%S')}"
    args.rundir.mkdir(parents=True, exist_ok=True)
    B.log(f"bench/openapi.py: run dir {args.rundir}")
    bench = Bench(argparse.Namespace(quick=False), args.oha, args.rundir)
    bench.max_wait = 60
    procs = B.Procs(args.rundir)
    cmd = "python3 bench/openapi.py " + shlex.join(sys.argv[1:])
    versions = {"rustc": subprocess.run(["rustc", "-V"], capture_output=True, text=True).stdout.strip(),
                "oha": subprocess.run([args.oha, "--version"], capture_output=True, text=True).stdout.strip(),
                "cpu": next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                             if line.startswith("model name")), "?"),
                "nproc": os.cpu_count(), **json.loads(args.versions)}
    res: dict = {"date": B.now_iso(), "command": cmd, "versions": versions, "rundir": str(args.rundir)}
    t0 = time.monotonic()
    try:
        if "latency" in parts:
            B.log("== latency, throughput, CPU per call")
            res[args.latency_key] = {"command": cmd, "date": res["date"], "versions": versions, **part_latency(args, bench, procs)}
        if "callgrind" in parts:
            B.log("== instructions per call (callgrind)")
            res["callgrind"] = {"command": cmd, "date": res["date"], "versions": versions, **part_callgrind(args, bench, procs)}
        if "kube" in parts:
            B.log("== kube-apiserver OpenAPI v3 documents: gateway memory")
            res["kube"] = {"command": cmd, "date": res["date"], "versions": versions, **part_kube(args, procs)}
    finally:
        procs.stop_all()
    res["duration_s"] = round(time.monotonic() - t0, 1)
    res["commands"] = bench.commands
    out = Path(args.out)
    if out.is_file():  # parts not run this time keep their previous figures
        prev = json.loads(out.read_text())
        for part in [k for k in prev if k in ("callgrind", "kube") or k.startswith("latency")]:
            if part not in res:
                res[part] = prev[part]
                res.setdefault("kept_from_previous_run", []).append({
                    "part": part, "date": prev[part].get("date", prev.get("date")),
                    "command": prev[part].get("command", prev.get("command"))})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(report(res))
    B.log(f"bench/openapi.py: wrote {out} in {res['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
