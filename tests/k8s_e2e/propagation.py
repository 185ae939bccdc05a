#!/usr/bin/env python3
"""Propagation: the time from `kubectl apply` of a change to every gateway replica serving it.

Each run starts the write and, while it runs, polls both gateways every 10 ms (bounded at 10 s)
until each serves the change. Runs alternate between two kinds of change:

- `filter`: toggle `tools.deny: [echo]` on an McpServer (served = `<prefix>__echo` answers 404
  tool_not_found when denied, 200 when allowed again);
- `add`: create a new McpServer (served = `<new prefix>__add` answers 200).

Two ways of writing, each measured over the same number of runs:

- `kubectl` (the acceptance figure): the clock starts just before `kubectl apply -f -` is spawned,
  so it includes kubectl's own start-up, its GET and its PATCH (typically most of the figure);
- `api`: one server-side-apply PATCH straight to the API server (no kubectl process), which shows
  what the operator, the stream and the gateways add on top of the API write.

The clock stops when the slower of the two gateways serves the change. One untimed warm-up write
per mode comes first (kubectl's first patch of a cluster fetches and caches its OpenAPI schema).

Used two ways:
- by tests/k8s_e2e/test_cluster_api.py (`measure()` on the suite's world; the figures go to
  tests/k8s_e2e/results/propagation-<pass>.json);
- standalone, for the benchmark harness: `python tests/k8s_e2e/propagation.py [--runs N]` starts
  its own loopback cluster, operator and two gateways, and prints one JSON object on stdout:
  {"median_s", "max_s", "runs", "propagated", "samples": [...], "api": {...}, "command"}
  (median_s/max_s: the kubectl figures). Progress goes to stderr. Needs the debug binaries
  (cargo build --workspace --bins) and tests/k8s/build-binaries.sh; run it with the test venv's
  python (tests/setup-python.sh prints its path).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from k8s_world import World, demo_objects, mcp_server, start_world, to_yaml  # noqa: E402

POLL_S = 0.010
BOUND_S = 10.0


def _served_check(client: httpx.Client, url: str, key: str, name: str, args: dict, want: int) -> Callable[[], bool]:
    body = {"name": name, "arguments": args}
    headers = {"Authorization": f"Bearer {key}"}

    def check() -> bool:
        try:
            return client.post(f"{url}/mcp-rest/tools/call", json=body, headers=headers).status_code == want
        except httpx.HTTPError:
            return False

    return check


def _kubectl_writer(world: World, manifest: dict) -> Callable[[], None]:
    def write() -> None:
        p = world.cluster.kubectl_popen("apply", "-f", "-")
        out, err = p.communicate(to_yaml(manifest), timeout=60)
        assert p.returncode == 0, f"kubectl apply failed: {err}{out}"

    return write


def _api_writer(world: World, manifest: dict) -> Callable[[], None]:
    return lambda: world.cluster.api_apply(manifest, field_manager="propagation")


def apply_and_time(write: Callable[[], None], checks: dict[str, Callable[[], bool]], *,
                   poll: float = POLL_S, bound: float = BOUND_S) -> dict:  # fmt: skip
    """Runs `write` (in a thread) and polls every check (one per gateway) meanwhile, until all
    pass. Returns {"served_s": slowest gateway or None, "per_gateway": {...}, "write_s"}."""
    served: dict[str, float | None] = dict.fromkeys(checks)
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            write()
        except BaseException as exc:  # noqa: BLE001 - reported below
            result["error"] = exc
        result["write_s"] = time.monotonic() - t0

    t0 = time.monotonic()
    writer = threading.Thread(target=run, daemon=True)
    writer.start()
    while True:
        for name, check in checks.items():
            if served[name] is None and check():
                served[name] = time.monotonic() - t0
        if all(v is not None for v in served.values()) or time.monotonic() - t0 > bound:
            break
        time.sleep(poll)
    writer.join(60)
    if "error" in result:
        raise result["error"]
    done = [v for v in served.values() if v is not None]
    return {
        "served_s": max(done) if len(done) == len(served) else None,
        "per_gateway": served,
        "write_s": result.get("write_s"),
    }


def _summary(samples: list[dict]) -> dict:
    times = [s["served_s"] for s in samples if s["served_s"] is not None]
    after = [s["served_s"] - s["write_s"] for s in samples if s["served_s"] is not None]

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 4)

    return {
        "runs": len(samples),
        "propagated": len(times),
        "median_s": r(statistics.median(times)) if times else None,
        "max_s": r(max(times)) if times else None,
        "min_s": r(min(times)) if times else None,
        "median_write_s": r(statistics.median(s["write_s"] for s in samples)),
        # Served minus the write's own duration: roughly what is left after the API server
        # stored the change (operator watch + render + stream + gateway apply); can be < 0.
        "median_after_write_s": r(statistics.median(after)) if after else None,
        "samples": [
            {
                "kind": s["kind"],
                "served_s": r(s["served_s"]),
                "write_s": r(s["write_s"]),
                "per_gateway": {k: r(v) for k, v in s["per_gateway"].items()},
            }
            for s in samples
        ],
    }


def measure(world: World, key: str, runs: int = 12, *, namespace: str = "default", access_group: str = "ci",
            poll: float = POLL_S, bound: float = BOUND_S, modes: tuple[str, ...] = ("kubectl", "api"),
            log: Callable[[str], Any] = print) -> dict:  # fmt: skip
    """`runs` timed changes per mode against every live gateway of `world`; `key` must reach
    `access_group` in `namespace`. The top-level figures are the first mode's."""
    assert world.upstream is not None
    gateways = {n: g for n, g in world.gateways.items() if g.proc.alive()}
    assert len(gateways) >= 2, f"propagation is measured across two gateways, have {list(gateways)}"
    url = world.upstream.mcp_url
    clients = {n: httpx.Client(timeout=2) for n in gateways}

    def server(name: str, deny: bool = False) -> dict:
        spec: dict[str, Any] = {"url": url, "timeout": "2s", "accessGroups": [access_group]}
        if deny:
            spec["tools"] = {"deny": ["echo"]}
        return mcp_server(name, namespace, **spec)

    def checks(tool: str, args: dict, want: int) -> dict[str, Callable[[], bool]]:
        return {n: _served_check(clients[n], g.url, key, tool, args, want) for n, g in gateways.items()}

    results: dict[str, dict] = {}
    try:
        for mode in modes:
            writer = _kubectl_writer if mode == "kubectl" else _api_writer
            base = f"prop-{mode}"
            # The server the filter runs toggle, then one unchanged re-apply (warm-up, untimed).
            for _ in range(2):
                warm = apply_and_time(writer(world, server(base)), checks(f"{base}__echo", {"text": "x"}, 200), bound=30)
                assert warm["served_s"] is not None, f"McpServer {base} never reached the gateways: {warm}"
            samples = []
            denied = False
            for i in range(runs):
                time.sleep(0.3)  # let the previous change's status writes settle: runs are independent
                if i % 2 == 0:
                    denied = not denied
                    kind = "filter-deny" if denied else "filter-allow"
                    result = apply_and_time(
                        writer(world, server(base, deny=denied)),
                        checks(f"{base}__echo", {"text": "x"}, 404 if denied else 200), poll=poll, bound=bound,
                    )  # fmt: skip
                else:
                    kind = "add-server"
                    name = f"{base}-{i}"
                    result = apply_and_time(
                        writer(world, server(name)), checks(f"{name}__add", {"a": 1, "b": 2}, 200), poll=poll, bound=bound
                    )
                result["kind"] = kind
                samples.append(result)
                shown = "NOT SERVED" if result["served_s"] is None else f"{result['served_s'] * 1000:.0f} ms"
                log(f"propagation {mode} run {i + 1}/{runs} ({kind}): {shown} (the write took {result['write_s'] * 1000:.0f} ms)")
            results[mode] = _summary(samples)
    finally:
        for c in clients.values():
            c.close()
    first = results[modes[0]]
    return {
        **first,
        "mode": modes[0],
        **{m: results[m] for m in modes[1:]},
        "poll_s": poll,
        "bound_s": bound,
        "gateways": len(gateways),
    }


def all_samples(result: dict) -> list[dict]:
    out = list(result["samples"])
    for m in ("api", "kubectl"):
        if isinstance(result.get(m), dict):
            out += result[m]["samples"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=12, help="timed runs per mode (default 12)")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="switchboard-propagation-") as tmp:
        try:
            world = start_world(Path(tmp))
        except AssertionError as exc:  # MissingBinary included
            log(f"propagation.py: {exc}")
            return 1
        try:
            world.cluster.apply(demo_objects(world))
            world.kubectl_wait_ready("demo")
            key = world.generated_key("ci-key")
            world.wait_key_served(key)
            result = measure(world, key, args.runs, log=log)
        finally:
            world.stop()
    result["command"] = f"python tests/k8s_e2e/propagation.py --runs {args.runs}"
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0 if all(s["served_s"] is not None for s in all_samples(result)) else 1


if __name__ == "__main__":
    sys.exit(main())
