"""Hooks for the Kubernetes end-to-end tests: one loopback cluster (etcd + kube-apiserver) per
test module, with the operator and gateway replicas as local processes (k8s_fixtures.module_world).
The building blocks live in k8s_world.py (cluster) and tests/e2e/harness.py (processes, MCP
clients)."""

from __future__ import annotations

import pytest
from k8s_fixtures import FAILED_MODULES
from k8s_world import MissingBinary, require_binaries
from harness import share_client_tls

# tmp_path under a directory of the run's own, removed when every test passed (tests/e2e/temp_dirs.py;
# k8s_world put tests/e2e on the path).
from temp_dirs import pytest_configure, pytest_sessionfinish  # noqa: F401 - pytest hooks

# Every default-TLS HTTP client of a test process shares one context (harness.share_client_tls).
share_client_tls()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed:
        FAILED_MODULES.add(item.module.__name__)
    return report


def pytest_sessionstart(session: pytest.Session) -> None:
    # Missing binaries fail the run at once, with the command that builds them (never a skip).
    try:
        require_binaries()
    except MissingBinary as exc:
        pytest.exit(f"FAILED: {exc}", returncode=1)
