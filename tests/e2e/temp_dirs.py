"""Where the tests' temporary directories go (a pytest plugin: the conftest of each test suite,
tests/e2e, tests/k8s_e2e and tests/node_e2e, imports its two hooks).

pytest's default keeps each run's `tmp_path` directories under `pytest-of-<user>` in the system
temp dir, the last three runs of them: test certificates and their private keys, config files
with the run's secrets, logs. Here a run's directories go in one directory of its own
(`switchboard-pytest-XXXXXX` in the temp dir), removed when every test passed; when one failed
it is kept, and named at the end of the run, for its logs. An explicit `--basetemp` is left to
whoever gave it.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

_OWN_BASETEMP = pytest.StashKey[Path]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before pytest's own tmp_path plugin reads the option (its configure hook runs after this).
    if config.option.basetemp is None:
        path = Path(tempfile.mkdtemp(prefix="switchboard-pytest-"))
        config.option.basetemp = str(path)
        config.stash[_OWN_BASETEMP] = path


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.stash.get(_OWN_BASETEMP, None)
    if path is None or not path.exists():
        return
    if exitstatus == 0:
        shutil.rmtree(path, ignore_errors=True)
    else:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"the tests' temporary files and logs are kept in {path}")
