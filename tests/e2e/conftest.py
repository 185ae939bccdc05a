"""Fixtures for the end-to-end tests. The building blocks live in harness.py."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import keycloak as keycloak_server
from redis_store import RedisServer
import pytest
from harness import (
    GatewayFactory,
    ProcessGroup,
    Upstream,
    share_client_tls,
    start_python_upstream,
    start_rust_upstream,
)

# tmp_path under a directory of the run's own, removed when every test passed (temp_dirs.py).
from temp_dirs import pytest_configure, pytest_sessionfinish  # noqa: F401 - pytest hooks

# Every default-TLS HTTP client of a test process shares one context (harness.share_client_tls).
share_client_tls()


def pytest_configure(config: pytest.Config) -> None:
    # The process that owns the run (the only one, or pytest-xdist's controller) makes the run's
    # shared directory, which its workers inherit through the environment: the shared Keycloak
    # lives there (keycloak.py, `shared`).
    if not hasattr(config, "workerinput") and "SWITCHBOARD_KEYCLOAK_DIR" not in os.environ:
        run_dir = Path(tempfile.mkdtemp(prefix="switchboard-e2e-run."))
        os.environ["SWITCHBOARD_KEYCLOAK_DIR"] = str(run_dir)
        os.environ["SWITCHBOARD_KEYCLOAK_OWNER"] = str(os.getpid())
        config.stash[RUN_DIR] = run_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    run_dir = config.stash.get(RUN_DIR, None)
    if run_dir is not None:
        try:
            keycloak_server.stop_shared(run_dir)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)


RUN_DIR = pytest.StashKey[Path]()


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests marked `last` (the log grep for secrets) see the logs of everything that ran before.
    # tests/run-all.sh runs them in a pytest of their own that collects only the test_zz_*
    # modules (collecting every module takes seconds); one elsewhere would never run there.
    misplaced = [
        item.nodeid
        for item in items
        if item.get_closest_marker("last") is not None and not item.path.name.startswith("test_zz_")
    ]
    if misplaced:
        raise pytest.UsageError(f"tests marked `last` belong in a test_zz_*.py module: {', '.join(misplaced)}")
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _dump_logs_on_failure(request: pytest.FixtureRequest, group: ProcessGroup) -> None:
    failed = any(
        getattr(request.node, f"rep_{when}", None) is not None and getattr(request.node, f"rep_{when}").failed
        for when in ("setup", "call")
    )
    if failed:
        for proc in group.procs:
            print(f"\n===== {proc.name} =====\n{proc.describe(tail=6000)}")


@pytest.fixture
def procs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProcessGroup]:
    """Processes of one test; logs under the test's tmp dir; all killed at teardown."""
    group = ProcessGroup(tmp_path / "logs")
    try:
        yield group
    finally:
        group.stop_all()
        _dump_logs_on_failure(request, group)


@pytest.fixture(scope="session")
def session_procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessGroup]:
    """Long-lived processes shared by the whole session (upstreams without per-test state)."""
    group = ProcessGroup(tmp_path_factory.mktemp("session-logs"))
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture
def gateways(procs: ProcessGroup, tmp_path: Path) -> GatewayFactory:
    """Starts gateway processes for one test: `gateways.start(config_dict)`."""
    return GatewayFactory(procs, tmp_path)


@pytest.fixture(scope="session")
def rust_upstream(session_procs: ProcessGroup) -> Upstream:
    """The bundled Rust example upstream (target/debug/switchboard-example-upstream)."""
    return start_rust_upstream(session_procs, "rust")


@pytest.fixture(scope="session")
def python_upstream(session_procs: ProcessGroup) -> Upstream:
    """Python SDK upstream: legacy stateful sessions + 2026-07-28, SSE replies."""
    return start_python_upstream(session_procs, "py")


@pytest.fixture(scope="session")
def python_upstream_stateless(session_procs: ProcessGroup) -> Upstream:
    """Python SDK upstream: legacy stateless (no session ids) + 2026-07-28, JSON replies."""
    return start_python_upstream(session_procs, "py-stateless", stateless=True, json_response=True)


@pytest.fixture(params=["python", "python-stateless", "rust"])
def any_upstream(request: pytest.FixtureRequest) -> Upstream:
    """Each kind of upstream in turn."""
    name = {"python": "python_upstream", "python-stateless": "python_upstream_stateless", "rust": "rust_upstream"}
    return request.getfixturevalue(name[request.param])


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    """A Redis of this test's own (redis_store.py), stopped and removed at teardown."""
    server = RedisServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def keycloak() -> keycloak_server.Keycloak:
    """The run's one Keycloak, shared by every module and worker (keycloak.py, `shared`): read
    and sign in, never stop or reconfigure it in a way another test would notice."""
    return keycloak_server.shared(Path(os.environ["SWITCHBOARD_KEYCLOAK_DIR"]))


@pytest.fixture
def private_keycloak(tmp_path_factory: pytest.TempPathFactory) -> Iterator[keycloak_server.Keycloak]:
    """A Keycloak of this test's own, for a test that stops it."""
    kc = keycloak_server.start(tmp_path_factory.mktemp("keycloak"))
    try:
        yield kc
    finally:
        kc.stop()
