"""Issue 11 acceptance 1, the short profile of the chaos soak (tests/e2e/chaos.py): 60 s of a
mixed load (REST, both MCP eras with streamed answers, listings) through two replicas behind a
round-robin balancer while upstreams crash, hang, turn slow, answer 5xx or garbage, break off a
streamed answer mid-stream, the token endpoint of an OAuth server goes down, a replica is killed
with SIGKILL and restarted, and the config is rewritten in place every second with invalid
versions in between. No answer may be wrong, no
gateway may panic, and the replica that is never killed must not grow without bound."""

from __future__ import annotations

import os

from chaos import run

DURATION_S = float(os.environ.get("SWITCHBOARD_CHAOS_SECONDS", "60"))


def test_a_short_chaos_soak_has_no_wrong_answer(tmp_path):
    report = run(DURATION_S, seed=11, workdir=tmp_path)
    print("\n" + report.text())
    print("faults, in order:\n  " + "\n  ".join(report.fault_log))
    assert not report.harness_errors, report.harness_errors
    assert report.calls > 200, f"only {report.calls} calls: the load did not run"
    assert report.classes.get("correct", 0) > report.calls // 2, report.classes
    assert report.streamed > 20, f"only {report.streamed} streamed answers checked"
    assert sum(report.faults.values()) >= 10, f"only {report.faults} faults injected"
    distinct = sorted({w.split(": ", 1)[-1][:160] for w in report.wrong})
    assert not report.wrong, f"{len(report.wrong)} wrong answers, {len(distinct)} kinds:\n" + "\n".join(distinct[:30])
    assert report.panics == 0
    # Bounded: after warm-up, RSS may move with allocator caches, but not by multiples.
    warm, end = report.gw_a_warm, report.gw_a_end
    assert end["rss_kib"] < 2 * warm["rss_kib"] + 16 * 1024, f"RSS {warm} -> {end}"
    assert end["fds"] < warm["fds"] + 64, f"fds {warm} -> {end}"
    assert end["tasks"] < warm["tasks"] + 64, f"runtime tasks {warm} -> {end}"
