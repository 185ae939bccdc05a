"""A binary started on a port another process holds (issue 35, item 8): it exits at once, and
its stderr names the flag and the address on one line, with no backtrace, whichever of its
listeners it was: the gateway's client and internal listeners, the operator's snapshot stream
and metrics listeners, the stdio bridge's, the example upstream's and the scripted provider's.

The port is held by the test itself (a listening socket), so the binary meets a real EADDRINUSE.
Every process runs with RUST_BACKTRACE=1, as the harness runs them (and as a debugging operator
might): a `main` returning its error would print a backtrace then. The operator needs no API
server here: it binds its listeners before it reads a kubeconfig (KUBECONFIG names a file that
does not exist, so the old order would have failed on that instead)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from harness import EXAMPLE_UPSTREAM_BIN, GATEWAY_BIN, binary, gateway_config, write_config

OPERATOR_BIN = "switchboard-operator"
BRIDGE_BIN = "switchboard-stdio-bridge"
PROVIDER_BIN = "switchboard-scripted-provider"


@contextmanager
def held_port() -> Iterator[str]:
    """`127.0.0.1:PORT`, listened on by this test for as long as the block runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield f"127.0.0.1:{s.getsockname()[1]}"


def run_until_exit(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Runs a binary that is expected to stop at once; bounded, so one that serves instead fails."""
    full_env = {**os.environ, "RUST_BACKTRACE": "1", **(env or {})}
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, env=full_env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{argv[0]} did not exit within 30s on a port in use:\n{exc.stderr}") from None


def assert_names_the_listener(done: subprocess.CompletedProcess, flag: str, address: str) -> None:
    stderr = done.stderr
    assert done.returncode != 0, f"exit code {done.returncode}; stderr:\n{stderr}"
    lines = [line for line in stderr.splitlines() if f"{flag} {address}" in line]
    assert lines, f"no line of stderr names '{flag} {address}':\n{stderr}"
    assert "address already in use" in lines[0].lower(), f"the cause is not said:\n{stderr}"
    assert "backtrace" not in stderr.lower(), f"a backtrace on a configuration error:\n{stderr}"
    assert "panicked" not in stderr, stderr


def _gateway_argv(tmp_path, listen: str, internal: str) -> list[str]:
    config = tmp_path / "gateway.yaml"
    write_config(config, gateway_config([], []))
    return [str(binary(GATEWAY_BIN)), "--config", str(config), "--listen", listen, "--internal-listen", internal]


@pytest.mark.parametrize("flag", ["--listen", "--internal-listen"])
def test_gateway_names_the_listener_whose_port_is_in_use(tmp_path, flag):
    with held_port() as address:
        listen, internal = (address, "127.0.0.1:0") if flag == "--listen" else ("127.0.0.1:0", address)
        done = run_until_exit(_gateway_argv(tmp_path, listen, internal))
    assert_names_the_listener(done, flag, address)


@pytest.mark.parametrize("flag", ["--snapshot-listen", "--metrics-listen"])
def test_operator_names_the_listener_whose_port_is_in_use(tmp_path, flag):
    with held_port() as address:
        listens = {"--snapshot-listen": "127.0.0.1:0", "--metrics-listen": "127.0.0.1:0", flag: address}
        argv = [str(binary(OPERATOR_BIN))]
        for name, value in listens.items():
            argv += [name, value]
        done = run_until_exit(argv, env={"KUBECONFIG": str(tmp_path / "no-such-kubeconfig")})
    assert_names_the_listener(done, flag, address)


def test_stdio_bridge_names_its_listener(tmp_path):
    with held_port() as address:
        done = run_until_exit([str(binary(BRIDGE_BIN)), "--listen", address, "--", sys.executable, "-c", "pass"])
    assert_names_the_listener(done, "--listen", address)


@pytest.mark.parametrize("name", [EXAMPLE_UPSTREAM_BIN, PROVIDER_BIN])
def test_example_servers_name_their_listener(name):
    with held_port() as address:
        done = run_until_exit([str(binary(name)), "--listen", address])
    assert_names_the_listener(done, "--listen", address)


def test_control_a_free_port_is_served(tmp_path):
    """The control: the same gateway command on a port nobody holds starts and serves."""
    from harness import Proc

    proc = Proc("gateway-free-port", _gateway_argv(tmp_path, "127.0.0.1:0", "127.0.0.1:0"), tmp_path / "logs")
    try:
        proc.wait_ready()
        assert httpx.get(f"http://{proc.internal_addr}/healthz", timeout=5).status_code == 200
    finally:
        proc.stop()
