"""A real Redis for the shared store's tests: Debian's `redis-server` 7 (what
`tests/install-packages.sh redis-server=redis-server` installs), on a Unix socket in a directory
of its own (no port to race for), no persistence, stopped and removed at teardown. `stop()` and
`start()` again on the same socket are how a test takes the store down and brings it back.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

INSTALL = "tests/install-packages.sh redis-server=redis-server redis-cli=redis-tools"


class RedisServer:
    def __init__(self, password: str | None = None):
        if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
            raise AssertionError(f"redis-server and redis-cli are needed (Debian's redis 7): run {INSTALL}")
        # Short: a Unix socket's path has a limit of about 100 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="sb-redis-"))
        self.password = password
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def socket(self) -> Path:
        return self.dir / "redis.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def store_settings(self, **extra) -> dict:
        """`gateway.store` for a gateway that shares this Redis."""
        redis = {"url": self.url, **extra}
        if self.password:
            redis["password"] = self.password
        return {"redis": redis}

    def start(self) -> None:
        self.socket.unlink(missing_ok=True)
        argv = [
            "redis-server", "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
            "--save", "", "--appendonly", "no", "--dir", str(self.dir),
        ]
        if self.password:
            argv += ["--requirepass", self.password]
        log = open(self.dir / "redis.log", "ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 10
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"redis-server did not open {self.socket}: {(self.dir / 'redis.log').read_text()[-2000:]}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def cli(self, *args: str) -> str:
        env = {"REDISCLI_AUTH": self.password} if self.password else None
        out = subprocess.run(["redis-cli", "-s", str(self.socket), *args], capture_output=True, env=env, timeout=10, check=True)
        return out.stdout.decode("utf-8", "replace")

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
