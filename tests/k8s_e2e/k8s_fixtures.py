"""The module-scoped world the Kubernetes test modules share (imported by conftest.py and the test
modules; not named conftest so that it never collides with tests/e2e/conftest.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from k8s_world import MissingBinary, World, start_world

# Modules with a failed test: their world prints its process logs and keeps the apiserver log.
FAILED_MODULES: set[str] = set()


@contextlib.contextmanager
def module_world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, name: str, **kw) -> Iterator[World]:
    """Starts a world (k8s_world.start_world) for one test module and stops it afterwards."""
    workdir = tmp_path_factory.mktemp(name)
    try:
        world = start_world(workdir, **kw)
    except MissingBinary as exc:
        pytest.fail(str(exc), pytrace=False)
    print(f"\n[{name}] cluster up in {world.startup_seconds:.1f}s; logs in {world.group.logdir}")
    try:
        yield world
    finally:
        failed = request.module.__name__ in FAILED_MODULES
        world.stop(keep_logs=failed)
        if failed:
            print(f"\n[{name}] a test failed; process logs (apiserver log kept in {world.cluster.dir}):")
            print(world.describe(tail=5000))
