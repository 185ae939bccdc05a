#!/usr/bin/env python3
"""Many tools (issue 39): how well a search-mode virtual server finds the tool for a task, what
its listing costs a model next to the whole listing, and what a large API description costs a
gateway in memory and in its first listing.

    python3 bench/many_tools.py --gateway GATEWAY_BIN --upstream UPSTREAM_BIN \
        [--python PYTHON] [--parts search,memory] [--before BEFORE_GATEWAY_BIN] \
        [--kube-docs DIR] [--out bench/results/many_tools.json]

Part `search`: one gateway with three servers behind a search-mode virtual server `work`:
the Python SDK upstream (tests/e2e/upstreams/python_upstream.py, some of its tools), the Rust
example upstream (two of its tools) and GitHub's REST description (`@octokit/openapi`, pinned in
tests/node/package.json, installed by tests/setup-node.sh) as an OpenAPI-backed server, every
operation a tool. Two sets of tasks (a task in words, the tool that does it) are asked one by
one through `find_tools` (2026-07-28, `limit: 5`): top-1 and top-5 recall and the mean
reciprocal rank. bench/tool_search_tasks.json (60, phrased as a person asks) is the set the
ranking was tuned on; bench/tool_search_heldout.json (54, phrased as a model searches) was
written after the tuning and never tuned on. The listing a model would be sent is measured both ways: the same
sources as a plain virtual server (`all`: every tool) and the search-mode one (its two search
tools): bytes, and tokens by a real tokenizer (OpenAI's o200k_base, from the `js-tiktoken` npm
package, installed into $SWITCHBOARD_CACHE/bench/tokenizer). Then scope: a key that does not
reach GitHub finds none of its tools (control: the wide key finds them for the same task).

Part `memory`: a gateway with GitHub's description as one OpenAPI server, against the same
binary with only an MCP server (idle): RSS 1 s after ready, the first aggregate `tools/list`
(walked whole: tools, bytes, seconds), RSS after it, and a second listing's time. With
--kube-docs (a directory of kube-apiserver's `/openapi/v3` documents, as bench/openapi.py
fetches them), the same with one server per document. With --before, every figure of the part
also for that binary (the same run).

Prints the figures; writes JSON to --out. Loopback only; nothing here asserts a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as B  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CACHE = Path(os.environ.get("SWITCHBOARD_CACHE", Path.home() / ".cache/switchboard"))
GITHUB = CACHE / "node/node_modules/@octokit/openapi/generated/api.github.com.json"
TOKENIZER = CACHE / "bench" / "tokenizer"
TIKTOKEN = "js-tiktoken@1.0.21"
NOWHERE = "http://127.0.0.1:9/api"
AUTH = {"Authorization": f"Bearer {B.GW_KEY}"}
NARROW_KEY = "sk-bench-narrow-0123456789"
PY_TOOLS = ["add", "echo", "request_headers", "ask", "sample", "progress"]
EX_TOOLS = ["slow", "fail"]


def rpc(url: str, method: str, params: dict, headers: dict | None = None, rid: int = 1,
        http_s: list | None = None) -> dict:
    """One call's result; `http_s` collects the time the HTTP exchange took (to the answer's
    last byte, before the client parses it)."""
    body, h = B.modern_request(method, params, params.get("name"), rid)
    st, hh, data, elapsed = B.http_req(url, body, {**B.BASE_HEADERS, **(headers or AUTH), **h}, timeout=120)
    if http_s is not None:
        http_s.append(elapsed)
    msg = B.rpc_json(hh.get("content-type", ""), data)
    if st != 200 or "result" not in msg:
        raise RuntimeError(f"{method} at {url}: HTTP {st} {data[:400]!r}")
    return msg["result"]


def listing_bytes(url: str, headers: dict | None = None, failed: list | None = None,
                  http_s: list | None = None) -> tuple[list[dict], int]:
    """The whole tools/list of an endpoint (every page): the tools, and the bytes of the tools
    array as JSON (what a client hands a model). A server's listing that failed is an error,
    unless `failed` is given to collect it; `http_s` collects each page's HTTP time."""
    tools: list[dict] = []
    cursor = None
    for _ in range(500):
        res = rpc(url, "tools/list", {"cursor": cursor} if cursor else {}, headers, http_s=http_s)
        errors = (res.get("_meta") or {}).get("switchboard.dev/listingErrors")
        if errors and failed is None:
            raise RuntimeError(f"tools/list at {url}: a server's listing failed: {errors}")
        if errors:
            failed.extend(e for e in errors if e not in failed)
        tools.extend(res.get("tools", []))
        cursor = res.get("nextCursor")
        if not cursor:
            break
    return tools, len(json.dumps(tools, separators=(",", ":")).encode())


def tokenizer() -> list[str]:
    """A node command that prints the o200k_base token count of its stdin."""
    if not (TOKENIZER / "node_modules/js-tiktoken").is_dir():
        TOKENIZER.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(TOKENIZER), "--no-audit", "--no-fund", TIKTOKEN],
                       check=True, stdout=subprocess.DEVNULL)
    script = ("const {Tiktoken}=require('js-tiktoken/lite');const o=require('js-tiktoken/ranks/o200k_base');"
              "const e=new Tiktoken(o);let s='';process.stdin.on('data',d=>s+=d);"
              "process.stdin.on('end',()=>console.log(e.encode(s).length));")
    return ["node", "-e", script]


def tokens(text: str) -> int:
    out = subprocess.run(tokenizer(), input=text.encode(), capture_output=True, check=True,
                         env={**os.environ, "NODE_PATH": str(TOKENIZER / "node_modules")})
    return int(out.stdout.decode().strip())


def github_server() -> dict:
    if not GITHUB.is_file():
        raise SystemExit(f"{GITHUB} is missing: run tests/setup-node.sh (it installs @octokit/openapi)")
    return B.server("github", NOWHERE, openapi={"document": {"file": str(GITHUB)}})


def sources() -> list[dict]:
    # (explicit lists first: a source with every tool selected claims every name after it)
    return [
        {"server": "py", "tools": {"allow": PY_TOOLS}},
        {"server": "ex", "tools": {"allow": EX_TOOLS}},
        {"server": "github", "tools": {}},
    ]


def recall(gw: B.Proc, tasks: list, file: str) -> dict:
    """Each task through `find_tools` (limit 5): where its tool ranks."""
    ranks: list[int | None] = []
    misses: list[dict] = []
    times: list[float] = []
    for i, (task, tool) in enumerate(tasks):
        t0 = time.perf_counter()
        res = rpc(f"{gw.url}/mcp/work", "tools/call", {"name": "find_tools", "arguments": {"query": task, "limit": 5}},
                  rid=i + 2)
        times.append(time.perf_counter() - t0)
        found = [t["name"] for t in res["structuredContent"]["tools"]]
        rank = found.index(tool) + 1 if tool in found else None
        ranks.append(rank)
        if rank != 1:
            misses.append({"task": task, "tool": tool, "rank": rank, "found": found})
    n = len(tasks)
    out = {
        "file": file, "tasks": n,
        "top1": round(sum(1 for r in ranks if r == 1) / n, 3),
        "top5": round(sum(1 for r in ranks if r is not None) / n, 3),
        "mrr": round(sum(1 / r for r in ranks if r is not None) / n, 3),
        "find_ms_p50": round(statistics.median(times) * 1000, 2),
        "find_ms_max": round(max(times) * 1000, 2),
        "misses": misses,
    }
    B.log(f"  {file}: {n} tasks, top-1 {out['top1']}, top-5 {out['top5']}, MRR {out['mrr']}; "
          f"find_tools p50 {out['find_ms_p50']} ms, max {out['find_ms_max']} ms")
    for m in misses:
        B.log(f"    {'miss' if m['rank'] is None else 'rank ' + str(m['rank'])}: {m['task']!r} -> {m['tool']} (found {m['found']})")
    return out


def part_search(args, procs: B.Procs) -> dict:
    py = procs.start("python-upstream", [args.python, str(HERE / "python_upstream.py"), "--port", "0", "--name", "py"])
    ex = procs.start("example-upstream", [args.upstream, "--listen", "127.0.0.1:0", "--record", "0"])
    servers = [B.server("py", f"{py.url}/mcp"), B.server("ex", f"{ex.url}/mcp"), github_server()]
    keys = [
        {"name": "bench", "secret": B.GW_KEY, "accessGroups": ["bench"]},
        # Reaches the virtual servers and the two MCP servers, not GitHub.
        {"name": "narrow", "secret": NARROW_KEY, "servers": ["py", "ex", "work", "all"]},
    ]
    cfg = B.gateway_config(servers, keys)
    cfg["virtualServers"] = [
        {"name": "all", "sources": sources(), "accessGroups": ["bench"]},
        {"name": "work", "sources": sources(), "accessGroups": ["bench"], "search": {"pinned": ["echo"]}},
    ]
    path = args.rundir / "gateway-search.yaml"
    path.write_text(B.to_yaml(cfg))
    gw = procs.start("gateway-search", [args.gateway, "--config", str(path), "--listen", "127.0.0.1:0"],
                     env={"RUST_LOG": "warn"}, ready_timeout=120)
    everything, all_bytes = listing_bytes(f"{gw.url}/mcp/all")
    listed, search_bytes = listing_bytes(f"{gw.url}/mcp/work")
    names = {t["name"] for t in everything}
    # (kept for a look at what was searched)
    (args.rundir / "all-tools.json").write_text(json.dumps(everything))
    sets = {}
    for label, file in (("tuned", "tool_search_tasks.json"), ("held_out", "tool_search_heldout.json")):
        tasks = json.loads((HERE / file).read_text())["tasks"]
        missing = [tool for _, tool in tasks if tool not in names]
        if missing:
            raise RuntimeError(f"{file} names tools the gateway does not present: {missing}")
        sets[label] = recall(gw, tasks, file)
    # Scope: the narrow key finds nothing of GitHub's for a GitHub task; the wide key does.
    narrow = {"Authorization": f"Bearer {NARROW_KEY}"}
    probe = {"name": "find_tools", "arguments": {"query": "open a new issue in a repository", "limit": 20}}
    narrow_found = [t["name"] for t in rpc(f"{gw.url}/mcp/work", "tools/call", probe, narrow)["structuredContent"]["tools"]]
    wide_found = [t["name"] for t in rpc(f"{gw.url}/mcp/work", "tools/call", probe)["structuredContent"]["tools"]]
    github_names = names - set(PY_TOOLS) - set(EX_TOOLS)
    scope = {
        "narrow_found": narrow_found,
        "narrow_found_github": sorted(set(narrow_found) & github_names),
        "wide_found_github": len(set(wide_found) & github_names),
    }
    B.log(f"  scope: the key without GitHub found {narrow_found} ({len(scope['narrow_found_github'])} of GitHub's); "
          f"the wide key {scope['wide_found_github']} of GitHub's")
    all_text = json.dumps(everything, separators=(",", ":"))
    search_text = json.dumps(listed, separators=(",", ":"))
    out = {
        "sets": sets,
        "listing_all": {"tools": len(everything), "bytes": all_bytes, "tokens_o200k": tokens(all_text)},
        "listing_search": {"tools": len(listed), "bytes": search_bytes, "tokens_o200k": tokens(search_text),
                           "names": [t["name"] for t in listed]},
        "scope": scope,
    }
    B.log(f"  tokens (o200k_base): all {out['listing_all']['tokens_o200k']}, search mode {out['listing_search']['tokens_o200k']}")
    procs.stop_all()
    return out


def rss_mib(p: B.Proc) -> float:
    return round(p.rss_kb() / 1024, 1)


def one_gateway(args, procs: B.Procs, binary: str, label: str, servers: list[dict]) -> dict:
    cfg = args.rundir / f"gateway-{label}.yaml"
    cfg.write_text(B.to_yaml(B.gateway_config(servers)))
    t0 = time.time()
    gw = procs.start(f"gateway-{label}", [binary, "--config", str(cfg), "--listen", "127.0.0.1:0"],
                     env={"RUST_LOG": "warn"}, ready_timeout=300)
    ready_s = gw.ready_at - t0
    time.sleep(1)
    idle = rss_mib(gw)
    t1 = time.perf_counter()
    failed: list = []
    first_http: list = []
    tools, listing = listing_bytes(f"{gw.url}/mcp", failed=failed, http_s=first_http)
    first_s = time.perf_counter() - t1
    after = rss_mib(gw)
    t2 = time.perf_counter()
    second_http: list = []
    listing_bytes(f"{gw.url}/mcp", failed=[], http_s=second_http)
    second_s = time.perf_counter() - t2
    time.sleep(1)
    settled = rss_mib(gw)
    hwm = round(gw.hwm_kb() / 1024, 1)
    procs.stop(gw)
    row = {"ready_s": round(ready_s, 2), "rss_ready_mib": idle, "tools": len(tools), "listing_bytes": listing,
           "first_listing_s": round(first_s, 3), "rss_after_listing_mib": after, "second_listing_s": round(second_s, 3),
           # (the HTTP exchanges alone: the gateway's answer to its last byte, before the
           # client parses it and measures what it got)
           "first_listing_http_s": round(sum(first_http), 3), "second_listing_http_s": round(sum(second_http), 3),
           "rss_settled_mib": settled, "rss_peak_mib": hwm,
           "first_listing_failed": [f"{e['server']}: {e['message']}" for e in failed]}
    B.log(f"    {label:28s} ready {row['ready_s']}s RSS {idle} MiB; {len(tools)} tools {listing} B, first listing "
          f"{row['first_listing_s']}s (HTTP {row['first_listing_http_s']}s), RSS after {after} MiB (peak {hwm}), "
          f"second listing {row['second_listing_s']}s (HTTP {row['second_listing_http_s']}s)"
          + (f"; first listing failed for {row['first_listing_failed']}" if failed else ""))
    return row


def part_memory(args, procs: B.Procs) -> dict:
    ex = procs.start("example-upstream", [args.upstream, "--listen", "127.0.0.1:0", "--record", "0"])
    mcp = B.server("ex", f"{ex.url}/mcp")
    binaries = [("after", args.gateway)] + ([("before", args.before)] if args.before else [])
    sets = [("idle", [mcp]), ("github", [mcp, github_server()])]
    if args.kube:
        import openapi as O  # (bench/openapi.py: where the kube-apiserver's documents come from)

        if not (O.KUBE_DOCS / "index.json").is_file():
            O.fetch_kube_documents(args.rundir)
        docs = sorted(p for p in O.KUBE_DOCS.glob("*.json") if p.name != "index.json")
        kube = [B.server(re.sub(r"[^a-z0-9]+", "-", d.stem.lower()).strip("-")[:40] + f"-{i}", NOWHERE,
                         openapi={"document": {"file": str(d)}}) for i, d in enumerate(docs)]
        sets.append(("kube", [mcp, *kube]))
    out: dict = {}
    for label, binary in binaries:
        out[label] = {}
        for name, servers in sets:
            out[label][name] = one_gateway(args, procs, binary, f"{label}-{name}", servers)
        idle = out[label]["idle"]["rss_after_listing_mib"]
        for name, _ in sets[1:]:
            row = out[label][name]
            row["rss_above_idle_mib"] = round(row["rss_after_listing_mib"] - idle, 1)
            B.log(f"  {label} {name}: RSS above idle {row['rss_above_idle_mib']} MiB, first listing {row['first_listing_s']}s")
    procs.stop_all()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gateway", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--before")
    ap.add_argument("--python", default=str(CACHE / "venv/bin/python"))
    ap.add_argument("--parts", default="search,memory")
    ap.add_argument("--kube", action="store_true",
                    help="also the kube-apiserver's OpenAPI v3 documents (fetched as bench/openapi.py does)")
    ap.add_argument("--out", default=str(HERE / "results/many_tools.json"))
    args = ap.parse_args()
    args.rundir = CACHE / "bench" / "many-tools-run"
    args.rundir.mkdir(parents=True, exist_ok=True)
    procs = B.Procs(args.rundir)
    out_path = Path(args.out)
    out = json.loads(out_path.read_text()) if out_path.is_file() else {}
    try:
        for part in args.parts.split(","):
            B.log(f"part {part}")
            result = {"search": part_search, "memory": part_memory}[part](args, procs)
            out[part] = {"at": B.now_iso(), "command": " ".join(sys.argv), "figures": result}
    finally:
        procs.stop_all()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=2) + "\n")
    B.log(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
