"""Runs the real Claude Code CLI (@anthropic-ai/claude-code) against an Anthropic-style
`POST /v1/messages` endpoint from the e2e tests.

tests/setup-claude.sh installs the CLI (exact pins from tests/claude/package-lock.json) into
${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/claude and prints the path of its `claude`
executable; tests/run-all.sh exports it as $SWITCHBOARD_CLAUDE. A missing install fails the test
with a message naming tests/setup-claude.sh (never a skip).

Each run is non-interactive and sealed off from the machine: `claude -p --output-format json
--allowedTools Read [extra_args] -- PROMPT`, stdin from /dev/null, cwd = the work dir, and an
environment built from scratch (PATH only is inherited) with a scratch HOME and TMPDIR, so no
developer's key, login, settings or ANTHROPIC_* variable leaks in. What the CLI sends and how it
reacts to errors is written down in tests/e2e/CLAUDE_CODE.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from harness import REPO_ROOT

CLAUDE_PACKAGE = "@anthropic-ai/claude-code"
LOCK_FILE = REPO_ROOT / "tests" / "claude" / "package-lock.json"
SETUP_HINT = "run tests/setup-claude.sh first (tests/run-all.sh e2e does it)"

# The flags of every run: print mode, one JSON object on stdout, and the Read tool allowed without
# a permission prompt (inside the work dir it needs none; this also allows files elsewhere).
BASE_ARGS = ("-p", "--output-format", "json", "--allowedTools", "Read")

# The environment of every run, besides HOME, TMPDIR, PATH, the base URL and the credential.
# NONESSENTIAL_TRAFFIC also stops the unauthenticated `HEAD /api/hello` probe of the base URL;
# MAX_RETRIES=0 turns off the CLI's retries of 429/5xx/dropped connections (it still falls back
# to a non-streaming request and retries a 400 with fewer betas: see CLAUDE_CODE.md).
BASE_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_MAX_RETRIES": "0",
    "LANG": "C.UTF-8",
}


class ClaudeRun(NamedTuple):
    """One run: its exit code, its JSON result object (None when stdout held none; the raw stdout
    is then appended to `stderr`), and its stderr."""

    returncode: int
    output: dict[str, Any] | None
    stderr: str


def claude_executable() -> Path:
    """The `claude` executable tests/setup-claude.sh installed; fails the test when it is missing."""
    if os.environ.get("SWITCHBOARD_CLAUDE"):
        exe = Path(os.environ["SWITCHBOARD_CLAUDE"])
    else:
        cache = os.environ.get("SWITCHBOARD_CACHE") or str(Path.home() / ".cache" / "switchboard")
        exe = Path(cache) / "claude" / "node_modules" / ".bin" / "claude"
    if not (exe.is_file() and os.access(exe, os.X_OK)):
        pytest.fail(f"the Claude Code CLI ({CLAUDE_PACKAGE}) is not installed at {exe}: {SETUP_HINT}", pytrace=False)
    # Without the native binary the package leaves a 500-byte shell stub that only prints an error.
    if exe.stat().st_size < 1_000_000:
        pytest.fail(f"{exe} is the placeholder stub, not the native Claude Code binary: {SETUP_HINT}", pytrace=False)
    return exe


def pinned_version() -> str:
    """The CLI version tests/claude/package-lock.json pins."""
    lock = json.loads(LOCK_FILE.read_text())
    return lock["packages"][f"node_modules/{CLAUDE_PACKAGE}"]["version"]


@contextlib.contextmanager
def runtime_dir() -> Iterator[dict[str, str]]:
    """The CLI's runtime directory, private and removed afterwards: it makes its sockets'
    directory (`cc-socks-<uid>`) in `CLAUDE_CODE_TMPDIR`, else `XDG_RUNTIME_DIR`, else in /tmp
    whatever TMPDIR says, where it outlives the run. Short (`/tmp/cc-XXXXXXXX`), as a socket's
    path must be; both variables name it."""
    path = tempfile.mkdtemp(prefix="cc-")
    try:
        yield {"CLAUDE_CODE_TMPDIR": path, "XDG_RUNTIME_DIR": path}
    finally:
        shutil.rmtree(path, ignore_errors=True)


def claude_version() -> str:
    """What the installed CLI says its version is (`claude --version`; no network)."""
    exe = claude_executable()
    with tempfile.TemporaryDirectory(prefix="claude-home-") as home, runtime_dir() as runtime:
        done = subprocess.run(
            [str(exe), "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "TMPDIR": home, **runtime, **BASE_ENV},
            check=False,
        )
    assert done.returncode == 0, f"{exe} --version failed: {done.stdout!r} {done.stderr!r}"
    return done.stdout.decode().split()[0]


def run_claude(
    base_url: str,
    prompt: str,
    workdir: Path | str,
    *,
    api_key: str | None = None,
    auth_token: str | None = None,
    timeout: float = 120,
    extra_args: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    home: Path | str | None = None,
) -> ClaudeRun:
    """Runs `claude -p PROMPT --output-format json` once against `base_url` (the CLI appends
    `/v1/messages?beta=true` to it, keeping any path prefix) with cwd = `workdir`.

    api_key is sent as `x-api-key` (ANTHROPIC_API_KEY), auth_token as `Authorization: Bearer`
    (ANTHROPIC_AUTH_TOKEN); both may be given (both headers are sent) or neither (the CLI then
    sends nothing and exits 1 with "Not logged in"). extra_args go before the prompt (e.g.
    `("--model", "m")`); env adds or overrides variables (e.g. CLAUDE_CODE_DISABLE_THINKING=1).
    home: a directory to use as HOME (and TMPDIR under it) and keep, e.g. for the session
    transcript under .claude/projects; by default a temporary one, removed afterwards.
    The run is bounded by `timeout`: past it the CLI's process group is killed and the test
    fails with what it printed."""
    exe = claude_executable()
    workdir = Path(workdir)
    assert workdir.is_dir(), f"the work dir {workdir} does not exist"
    scratch = None
    if home is None:
        scratch = tempfile.mkdtemp(prefix="claude-home-")
        home = scratch
    home = Path(home)
    tmpdir = home / "tmp"
    tmpdir.mkdir(parents=True, exist_ok=True)
    run_env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(tmpdir),
        "ANTHROPIC_BASE_URL": base_url,
        **BASE_ENV,
    }
    if api_key is not None:
        run_env["ANTHROPIC_API_KEY"] = api_key
    if auth_token is not None:
        run_env["ANTHROPIC_AUTH_TOKEN"] = auth_token
    run_env.update(env or {})
    argv = [str(exe), *BASE_ARGS, *extra_args, "--", prompt]
    with runtime_dir() as runtime:
        run_env.update(runtime)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir,
                env=run_env,
                start_new_session=True,
            )
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                out, err = proc.communicate()
                raise AssertionError(
                    f"claude did not exit within {timeout}s\nstdout: {_text(out)[-4000:]}\nstderr: {_text(err)[-4000:]}"
                ) from None
            finally:
                _kill_group(proc)  # whatever it left running (a Bash tool's children)
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
    stdout, stderr = _text(out), _text(err)
    output = None
    try:
        parsed = json.loads(stdout)
        output = parsed if isinstance(parsed, dict) else None
    except ValueError:
        pass
    if output is None:
        stderr += f"\n--- stdout (no JSON object) ---\n{stdout[-4000:]}"
    return ClaudeRun(proc.returncode, output, stderr)


def claude_ok(run: ClaudeRun) -> str:
    """The model's final text of a run that succeeded; otherwise fails with what the CLI said."""
    ok = run.returncode == 0 and run.output is not None and run.output.get("is_error") is False
    assert ok, f"the Claude Code CLI failed:\n{describe(run)}"
    return run.output["result"]


def describe(run: ClaudeRun) -> str:
    """A run's exit code, result fields and stderr, for assertion messages."""
    parts = [f"exit: {run.returncode}"]
    if run.output is not None:
        brief = {
            k: run.output.get(k)
            for k in ("is_error", "result", "api_error_status", "terminal_reason", "num_turns", "permission_denials")
        }
        parts.append(f"output: {json.dumps(brief)[:4000]}")
    if run.stderr.strip():
        parts.append(f"stderr: {run.stderr[-4000:]}")
    return "\n".join(parts)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")
