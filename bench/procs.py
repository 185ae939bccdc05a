"""Starting the processes a bench script measures (standard library only, so scripts that run
on the system python3 can use it)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

# Every gateway started here picks a free port for its internal listener (the default is fixed).
os.environ.setdefault("SWITCHBOARD_INTERNAL_LISTEN", "127.0.0.1:0")


def start(argv: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    """Starts `argv` in its own session with output teed to `log`, and waits (at most 20 s)
    for its `listening on http://ADDR` line. Returns the process and ADDR."""
    out = open(log, "wb")  # noqa: SIM115 - written by the reader thread for the process's life
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
    found: dict = {}

    def read() -> None:
        assert p.stdout is not None
        for raw in p.stdout:
            out.write(raw)
            line = raw.decode(errors="replace")
            if "listening on http://" in line and "addr" not in found:
                found["addr"] = line.split("http://", 1)[1].split()[0].rstrip("/")

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 20
    while "addr" not in found:
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            raise SystemExit(f"{argv[0]} did not start; log {log}")
        time.sleep(0.02)
    return p, found["addr"]
