#!/usr/bin/env python3
"""Instruction counts per proxied call: the gateway under valgrind's callgrind, a bounded number
of requests, counts that do not move when other engineers' builds share the machine.

    python3 bench/callgrind.py --oha OHA --upstream UPSTREAM_BIN GATEWAY_BIN [GATEWAY_BIN ...] \
        [--requests 2000] [--path gw-2026|gw-2026-single|gw-legacy|gw-rest] [--top 25] [--out DIR] \
        [--floor FLOOR_BIN] [--person-labels LABEL,...] [--label-gateway LABEL:JSON] [--label-key LABEL:JSON]
        [--label-server LABEL:JSON] [--label-connect LABEL,...]

For each gateway binary: starts the upstream and the gateway (under callgrind, collection off
at start-up), warms up with 200 requests, zeroes the counters, sends exactly --requests
`tools/call`s one at a time with oha, dumps, and reports instructions per call (Ir/call) and
the functions with the most inclusive and self instructions (callgrind_annotate). Several
binaries give a before/after; --floor adds bench/floor's pass-through proxy first, so every
gateway's count is also a ratio to it. --person-labels: for those labels the caller is a person
signed in with an identity provider (an RS256 access token, verified by the gateway against a JWKS
this script serves on loopback) instead of a key; give the same binary twice to compare (needs
PyJWT, as in the tests' venv). --label-gateway and --label-key merge JSON into one label's
`gateway:` settings or its key (e.g. a shared store, a rate limit); `{redis}` in them is the URL
of a Redis this script starts (Debian's redis-server, on a Unix socket under --out) for the run.
--label-server merges JSON into the label's server (`{upstream}` is the example upstream's URL:
e.g. Example Accounts at `{upstream}/accounts/mcp` with `userOAuth`); --label-connect connects the
bench key's own account there first (the connect pages driven as a browser would, the key typed).
--latency runs the same labels without valgrind and reports time instead: oha's latency
percentiles and requests per second at concurrency 1 (what a store round trip adds to a call).
Output files stay in --out (default /tmp/switchboard-callgrind).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as B  # noqa: E402

# Every gateway started here picks a free port for its internal listener (the default is fixed).
os.environ.setdefault("SWITCHBOARD_INTERNAL_LISTEN", "127.0.0.1:0")


class Signer:
    """An identity provider for the person runs: one RSA key, its JWKS served on loopback, and
    access tokens for one subject (valid for an hour)."""

    def __init__(self) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        import jwt
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.jwt = jwt
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        body = json.dumps({"keys": [{**jwk, "kid": "bench", "alg": "RS256", "use": "sig"}]}).encode()

        class Jwks(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"

    def provider(self) -> dict:
        return {"name": "bench", "issuer": self.issuer, "audiences": ["switchboard"], "jwksUrl": f"{self.issuer}/jwks"}

    def token(self) -> str:
        now = int(time.time())
        claims = {"iss": self.issuer, "aud": "switchboard", "sub": "bench-user", "exp": now + 3600, "iat": now}
        return self.jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "bench"})


def label_env(args, label: str) -> dict[str, str]:
    """`--label-env LABEL:K=V,K=V` for this label."""
    env: dict[str, str] = {}
    for spec in args.label_env:
        name, _, pairs = spec.partition(":")
        if name == label:
            env.update(kv.split("=", 1) for kv in pairs.split(",") if kv)
    return env


def run_one(args, binary: str, label: str, outdir: Path) -> dict:
    procs = B.Procs(outdir)
    try:
        up = procs.start(f"upstream-{label}", [args.upstream, "--listen", "127.0.0.1:0", "--record", "0"])
        cfg = B.gateway_config([B.server("ex", f"{up.url}/mcp")])
        import json
        targets = ((args.label_gateway, cfg["gateway"]), (args.label_key, cfg["keys"][0]),
                   (args.label_server, cfg["servers"][0]))
        for flag, target in targets:
            for entry in flag:
                name, _, text = entry.partition(":")
                if name == label:
                    text = text.replace("{redis}", args.redis_url or "").replace("{upstream}", up.url)
                    target.update(json.loads(text))
        person = label in args.person_labels
        if person:
            signer = Signer()
            cfg["identityProviders"] = [signer.provider()]
            cfg["keys"][0]["people"] = [{"provider": "bench", "subjects": ["bench-user"]}]
        cfg_path = outdir / "callgrind.yaml"
        cfg_path.write_text(B.to_yaml(cfg))
        cg_out = outdir / f"callgrind.{label}.out"
        for old in glob.glob(f"{cg_out}*"):
            os.remove(old)
        grind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg_out}", "--dump-instr=no",
                 "--separate-threads=no"]
        if args.latency:
            grind = []
        if label == "floor":
            # bench/floor in front of the same upstream: the instructions any proxy on this stack spends
            gw = procs.start("floor", grind + [binary, "--listen", "127.0.0.1:0", "--upstream", up.url],
                             ready_timeout=120)
            path = B.floor_path(gw, "rust")
        else:
            gw = procs.start(f"gateway-{label}", grind + [
                binary, "--config", str(cfg_path), "--listen", "127.0.0.1:0"], ready_timeout=120,
                env={"RUST_LOG": "warn", **label_env(args, label)})
            path = next(p for p in B.gateway_paths(gw, "ex", "rust", single=True) if p.via == args.path)
            if person:
                path.headers["Authorization"] = f"Bearer {signer.token()}"
        if label in args.label_connect:
            connect_account(gw.url, path)
        # (A person's first call may find the provider's keys not fetched yet: a bounded wait.)
        for _ in range(50):
            ok, detail = path.check()
            if ok or not person:
                break
            time.sleep(0.2)
        if not ok:
            raise RuntimeError(f"{label}: check failed: {detail}")
        bench = B.Bench(argparse.Namespace(quick=True), args.oha, outdir)
        warm = bench.oha_argv(path, n=200, conc=1)
        subprocess.run(warm, capture_output=True, timeout=600)
        if args.latency:
            import json

            r = subprocess.run(bench.oha_argv(path, n=args.requests, conc=1), capture_output=True, timeout=1800)
            out = json.loads(r.stdout)
            pct = out.get("latencyPercentiles", {})
            return {"label": label, "binary": binary, "requests": args.requests,
                    "status_codes": out.get("statusCodeDistribution", {}),
                    "rps": round(out["summary"]["requestsPerSec"]),
                    "p50_us": round(pct.get("p50", 0) * 1e6), "p99_us": round(pct.get("p99", 0) * 1e6)}
        subprocess.run(["callgrind_control", "--zero", str(gw.pid)], capture_output=True, timeout=60)
        t0 = time.monotonic()
        r = subprocess.run(bench.oha_argv(path, n=args.requests, conc=1), capture_output=True, timeout=1800)
        wall = time.monotonic() - t0
        import json
        codes = json.loads(r.stdout).get("statusCodeDistribution", {})
        subprocess.run(["callgrind_control", "--dump", str(gw.pid)], capture_output=True, timeout=120)
        time.sleep(1.0)
        dumps = sorted(glob.glob(f"{cg_out}.*"), key=os.path.getmtime)
        dump = dumps[-1] if dumps else str(cg_out)
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", "--auto=no", dump],
                             capture_output=True, text=True).stdout
        ann_self = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", dump],
                                  capture_output=True, text=True).stdout
        m = re.search(r"([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS", ann) or re.search(r"([\d,]+)\s+PROGRAM TOTALS", ann)
        total = int(m.group(1).replace(",", "")) if m else 0
        (outdir / f"annotate.{label}.inclusive.txt").write_text(ann)
        (outdir / f"annotate.{label}.self.txt").write_text(ann_self)
        return {"label": label, "binary": binary, "requests": args.requests, "status_codes": codes,
                "instructions_total": total, "instructions_per_call": total // max(args.requests, 1),
                "wall_s": round(wall, 1), "dump": dump,
                "top_inclusive_gateway": top_lines(ann, args.top, only="switchboard_gateway::"),
                "top_self": top_lines(ann_self, args.top)}
    finally:
        procs.stop_all()


def connect_account(base: str, path) -> None:
    """Connects the bench key's own Example Accounts account: the call's connect URL, the key
    typed, the consent, Example Accounts' sign-in, the callback (httpx as the browser)."""
    import html

    import httpx

    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ex__add", "arguments": {"a": 1, "b": 2}}}
    first = httpx.post(f"{base}/mcp-rest/tools/call", headers={"Authorization": f"Bearer {B.GW_KEY}"},
                       json=call["params"], timeout=120)  # fmt: skip
    url = first.json()["error"]["connectUrl"]
    with httpx.Client(follow_redirects=False, timeout=120) as browser:
        page = browser.get(url)
        proof = html.unescape(re.search(r'name="proof" value="([^"]+)"', page.text).group(1))
        page = browser.get(browser.post(f"{base}/connect/key", data={"proof": proof, "key": B.GW_KEY}).headers["location"])
        consent = html.unescape(re.search(r'name="consent" value="([^"]+)"', page.text).group(1))
        to_accounts = browser.post(f"{base}/connect/approve", data={"consent": consent, "answer": "approve"}).headers["location"]
        form = browser.get(to_accounts)
        hidden = {html.unescape(k): html.unescape(v) for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.text)}
        back = browser.post(to_accounts.split("?")[0], data={**hidden, "username": "bench", "password": "demo"})
        done = browser.get(back.headers["location"])
        if "is connected" not in done.text:
            raise RuntimeError(f"the bench account did not connect: {done.text[:300]}")


LINE = re.compile(r"^\s*([\d,]+) \(\s*([\d.]+)%\)\s+(.*?)(?:\s+\[[^\]]*\])?$")


def top_lines(annotate: str, n: int, only: str = "") -> list[str]:
    """`<Ir> <pct>% <function>` lines, source paths dropped, optionally only functions naming `only`."""
    out = []
    started = False
    for line in annotate.splitlines():
        if "file:function" in line:
            started = True
            continue
        m = LINE.match(line) if started else None
        if not m:
            continue
        func = m.group(3)
        func = re.sub(r"^(?:/\S*?|\./\S*?|\?\?\?):", "", func, count=1)
        if only and only not in func:
            continue
        if not only and float(m.group(2)) > 90:
            continue  # thread start-up frames that callgrind charges the whole run to
        out.append(f"{m.group(1):>14} {m.group(2):>6}%  {func[:170]}")
        if len(out) >= n:
            break
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--oha", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("gateways", nargs="+")
    ap.add_argument("--labels", default="")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--path", default="gw-2026", choices=["gw-2026", "gw-2026-single", "gw-legacy", "gw-rest"])
    ap.add_argument("--floor", default="", help="also count bench/floor's binary (first, labelled floor)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--person-labels", default="", help="labels whose caller is a signed-in person")
    ap.add_argument("--out", default="/tmp/switchboard-callgrind")
    ap.add_argument("--label-gateway", action="append", default=[], metavar="LABEL:JSON",
                    help="merged into one label's gateway settings; {redis} is this run's Redis URL")
    ap.add_argument("--label-key", action="append", default=[], metavar="LABEL:JSON",
                    help="merged into one label's key (e.g. its limits)")
    ap.add_argument("--label-server", action="append", default=[], metavar="LABEL:JSON",
                    help="merged into one label's server; {upstream} is the example upstream's URL")
    ap.add_argument("--label-connect", default="", help="labels whose key connects its own account first")
    ap.add_argument("--latency", action="store_true", help="no valgrind: oha's latency and rate at concurrency 1")
    ap.add_argument("--label-env", action="append", default=[], metavar="LABEL:K=V[,K=V]",
                    help="environment of one label's gateway (e.g. audit or tracing settings); repeatable")
    args = ap.parse_args()
    args.person_labels = set(filter(None, args.person_labels.split(",")))
    args.label_connect = set(filter(None, args.label_connect.split(",")))
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    labels = args.labels.split(",") if args.labels else [f"g{i}" for i in range(len(args.gateways))]
    runs = list(zip(labels, args.gateways))
    if args.floor:
        runs.insert(0, ("floor", args.floor))
    args.redis_url = None
    redis = None
    if any("{redis}" in e for e in args.label_gateway):
        sock = outdir / "redis.sock"
        sock.unlink(missing_ok=True)
        redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(sock), "--save", "",
                                  "--appendonly", "no", "--dir", str(outdir)], stdout=subprocess.DEVNULL)
        for _ in range(200):
            if sock.exists():
                break
            time.sleep(0.02)
        args.redis_url = f"unix://{sock}"
    try:
        results = []
        for label, binary in runs:
            res = run_one(args, binary, label, outdir)
            results.append(res)
            if args.latency:
                print(f"== {label}: {res['rps']} req/s, p50 {res['p50_us']} µs, p99 {res['p99_us']} µs at concurrency 1 "
                      f"({res['requests']} calls, codes {res['status_codes']})")
                continue
            print(f"== {label}: {res['instructions_per_call']:,} instructions per {args.path} tools/call "
                  f"({res['requests']} calls, codes {res['status_codes']}, {res['wall_s']} s under callgrind)")
            print("   gateway functions, inclusive:")
            for line in res["top_inclusive_gateway"]:
                print("     " + line)
            print("   top self:")
            for line in res["top_self"]:
                print("     " + line)
        import json
        (outdir / "summary.json").write_text(json.dumps(results, indent=1))
        if len(results) > 1 and not args.latency:
            base = results[0]["instructions_per_call"]
            for r_ in results[1:]:
                print(f"{r_['label']} vs {results[0]['label']}: {r_['instructions_per_call'] / base:.3f}×")
    finally:
        # Also when a run fails: no Redis left behind.
        if redis is not None:
            redis.kill()
            redis.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
