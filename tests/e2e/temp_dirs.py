"""Where the tests' temporary directories go (a pytest plugin: the conftest of each test suite,
tests/e2e, tests/k8s_e2e and tests/node_e2e, imports its two hooks).

pytest's default keeps each run's `tmp_path` directories under `pytest-of-<user>` in the system
temp dir, the last three runs of them: test certificates and their private keys, config files
with the run's secrets, logs. Here a run's directories go in one directory of its own
(`switchboard-pytest-XXXXXX` in the temp dir), removed when every test passed; when one failed
it is moved out of the temp dir, which a run leaves as it found it, into the cache's
`kept-test-dirs` (`$SWITCHBOARD_CACHE`, by default ~/.cache/switchboard; readable by its owner
only, the newest KEEP of them), and named at the end of the run, for its logs. An explicit
`--basetemp` is left to whoever gave it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_OWN_BASETEMP = pytest.StashKey[Path]()
# How many failed runs' directories the cache keeps.
KEEP = 5


def kept_root() -> Path:
    cache = os.environ.get("SWITCHBOARD_CACHE") or str(Path.home() / ".cache" / "switchboard")
    return Path(cache) / "kept-test-dirs"


def keep(path: Path) -> Path:
    """Moves a failed run's directory into `kept_root()`, dropping the oldest beyond KEEP."""
    root = kept_root()
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    kept = Path(shutil.move(str(path), str(root / path.name)))
    older = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)[:-KEEP]
    for old in older:
        shutil.rmtree(old, ignore_errors=True)
    return kept


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
        try:
            path = keep(path)
        except OSError as exc:  # (kept where it is, and said so)
            path = Path(f"{path} (moving it to {kept_root()} failed: {exc})")
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"the tests' temporary files and logs are kept in {path}")
