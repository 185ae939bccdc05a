"""Issue 11 acceptance 1, the short profile of the chaos soak (tests/e2e/chaos.py): 60 s of a
mixed load (REST, both MCP eras with streamed answers, listings) through two replicas behind a
round-robin balancer while upstreams crash, hang, turn slow, answer 5xx or garbage, break off a
streamed answer mid-stream, stop accepting the gateway's credential, the token endpoint of an
OAuth server goes down, a replica is killed with SIGKILL and restarted, and the config is
rewritten in place every second with invalid versions in between. No answer may be wrong (an
error counts as documented only under a fault that produces it on that server), no gateway may
panic, and the replica that is never killed must not grow without bound.

Nothing here is a rate: the soak runs on past 60 s until every kind of fault has been injected
once (chaos.soak), and the load is required to have run during every fault, not to have made N
calls in 60 s. (The oracle's own checks, that it can say "wrong": test_chaos_sabotage.py.)"""

from __future__ import annotations

import os

from chaos import FAULT_KINDS, run

DURATION_S = float(os.environ.get("SWITCHBOARD_CHAOS_SECONDS", "60"))


def test_a_short_chaos_soak_has_no_wrong_answer(tmp_path):
    report = run(DURATION_S, seed=11, workdir=tmp_path)
    print("\n" + report.text())
    print("faults, in order:\n  " + "\n  ".join(report.fault_log))
    assert not report.harness_errors, report.harness_errors
    # Every kind of fault happened, and calls were in flight during each one.
    assert report.first_round_done, f"not every kind of fault was injected: {report.faults}"
    assert set(report.faults) == set(FAULT_KINDS), report.faults
    assert not report.faults_without_calls, f"the load did not run during {report.faults_without_calls}"
    # The streamed path was checked in both eras (the progress event before the result).
    assert report.streamed_by_era.get("mcp_modern", 0) > 0 and report.streamed_by_era.get("mcp_legacy", 0) > 0, (
        report.streamed_by_era
    )
    assert report.classes.get("correct", 0) > report.calls // 2, report.classes
    distinct = sorted({w.split(": ", 1)[-1][:160] for w in report.wrong})
    assert not report.wrong, f"{len(report.wrong)} wrong answers, {len(distinct)} kinds:\n" + "\n".join(distinct[:30])
    assert report.panics == 0
    # Bounded: after warm-up, RSS may move with allocator caches, but not by multiples.
    warm, end = report.gw_a_warm, report.gw_a_end
    assert end["rss_kib"] < 2 * warm["rss_kib"] + 16 * 1024, f"RSS {warm} -> {end}"
    assert end["fds"] < warm["fds"] + 64, f"fds {warm} -> {end}"
    assert end["tasks"] < warm["tasks"] + 64, f"runtime tasks {warm} -> {end}"
