"""A real ``envrt serve`` for the tests of ``Runtime.connect``: the ``envrt`` binary of
the cargo target directory (or ``$ENVRT_BIN``), a state directory of its own, tokens made
with ``envrt token create``, and a service on a unix socket (or loopback TCP) that can be
stopped with SIGTERM and started again on the same state."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LISTENING = "envrt serve: listening on "


def envrt_bin() -> Path:
    """The CLI; missing, the test skips loudly (fails with ``CI`` set)."""
    explicit = os.environ.get("ENVRT_BIN")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    path = Path(explicit) if explicit else target / "debug" / "envrt"
    if not path.is_file():
        message = f"the envrt CLI is not at {path} (cargo build --bin envrt, or set ENVRT_BIN)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(f"SKIPPED: {message}")
    return path


class Service:
    """``envrt serve`` on a state directory of its own."""

    def __init__(self) -> None:
        self.bin = envrt_bin()
        self.dir = Path(tempfile.mkdtemp(prefix="envrt-pyserve-"))
        self.socket = self.dir / "serve.sock"
        self.url = ""
        self.log: list[str] = []
        self._server: subprocess.Popen[str] | None = None
        self._drain: threading.Thread | None = None

    def env(self) -> dict[str, str]:
        env = {**os.environ, "ENVRT_STATE_DIR": str(self.dir / "state")}
        env.pop("ENVRT_CONFIG", None)
        env.pop("ENVRT_SERVER", None)
        return env

    def envrt(self, *args: str) -> str:
        """Runs ``envrt ARGS`` on the service's state; its stdout."""
        done = subprocess.run(
            [str(self.bin), *args], env=self.env(), cwd=self.dir, capture_output=True, text=True, check=True
        )
        return done.stdout

    def token(self, tenant: str, ops: str | None = None) -> str:
        """A new token for ``tenant`` (every operation unless ``ops``, comma-separated)."""
        extra = ["--ops", ops] if ops else []
        return self.envrt("token", "create", "--tenant", tenant, *extra).strip().splitlines()[-1]

    def start(self, listen: str | None = None) -> str:
        """Starts the service (on ``listen``, a TCP address, or on the unix socket); answers
        its URL once it says where it listens."""
        where = ["--listen", listen] if listen else ["--socket", str(self.socket)]
        server = subprocess.Popen(
            [str(self.bin), "serve", *where],
            env=self.env(),
            cwd=self.dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._server = server
        assert server.stderr is not None
        for line in server.stderr:
            self.log.append(line)
            if line.startswith(LISTENING):
                self.url = line[len(LISTENING) :].strip()
                break
        else:
            server.wait()
            raise RuntimeError(f"envrt serve exited with {server.returncode}: {''.join(self.log)}")
        # Audit lines go to stderr: keep reading them so the pipe never fills.
        self._drain = threading.Thread(target=self._read_rest, args=(server,), daemon=True)
        self._drain.start()
        return self.url

    def _read_rest(self, server: subprocess.Popen[str]) -> None:
        assert server.stderr is not None
        for line in server.stderr:
            self.log.append(line)

    def stop(self) -> int | None:
        """Stops the service with SIGTERM; its exit code."""
        server, self._server = self._server, None
        if server is None:
            return None
        server.send_signal(signal.SIGTERM)
        code = server.wait()
        if self._drain is not None:
            self._drain.join()
        return code

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
