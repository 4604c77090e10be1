"""The peer side of envrt-bench's `peers` rows (crates/bench/src/peers.rs): runs in the peer's
own interpreter, started once, and times one operation per request, so the interpreter's
start and the pipe to envrt-bench stay out of every figure.

    python peers_driver.py swerex    # SWE-ReX: LocalRuntime, RemoteRuntime, bash session
    python peers_driver.py inspect   # Inspect AI's local sandbox (and the envrt package)

Protocol, one JSON object per line: the driver first prints {"ready": [OPS...]} (the
operations it can run here) or {"error": TEXT}; then each request line {"op": OP, "argv":
[...], "bytes": N} gets {"ns": NANOSECONDS} or {"error": TEXT}. End of input stops it (and
the SWE-ReX server it started).

SWE-ReX operations (swe-rex 1.4.0):
- "swerex-local": LocalRuntime.execute(Command(command=argv, shell=False)): a fresh process
  per command through subprocess.run, stdout and stderr captured, the exit code returned;
  the one SWE-ReX call that does what envrt's execute does.
- "swerex-session": LocalRuntime.run_in_session(BashAction(command=...)) in one bash session
  (pexpect): what SWE-agent drives; a command line typed into a long-lived shell.
- "swerex-remote" / "swerex-remote-session": the same two through RemoteRuntime, the HTTP
  client, against a `swerex-remote` server this driver starts on 127.0.0.1.
- "subprocess": subprocess.run(argv, capture_output=True) in this interpreter, the floor
  of the Python side.
Inspect operations (inspect-ai 0.3.285):
- "inspect-local": LocalSandboxEnvironment.exec(argv).
- "envrt-package": envrt's Python package, Lease.exec(argv) on a local lease.
- "envrt-inspect": envrt's Inspect provider, EnvrtSandboxEnvironment.exec(argv).
A request with "bytes" checks that the command's stdout had exactly that many bytes.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Awaitable, Callable

Op = Callable[[list[str]], Awaitable[int]]


def reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def checked(out: bytes | str, code: int | None, argv: list[str]) -> int:
    if code != 0:
        raise RuntimeError(f"{argv!r} exited {code}")
    return len(out)


async def subprocess_op(argv: list[str]) -> int:
    done = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL)
    return checked(done.stdout, done.returncode, argv)


class SweRex:
    """SWE-ReX's local runtime, a bash session in it, and a remote server with its client."""

    async def start(self, stack: list[Callable[[], Awaitable[None]]]) -> dict[str, Op]:
        from swerex.runtime.abstract import BashAction, Command, CreateBashSessionRequest
        from swerex.runtime.local import LocalRuntime
        from swerex.runtime.remote import RemoteRuntime

        self.Command, self.BashAction = Command, BashAction
        self.local = LocalRuntime()
        # SWE-ReX waits 1 s for a new bash session's prompt by default; a loaded machine
        # needs longer, and the start is not what the bench measures.
        await self.local.create_session(CreateBashSessionRequest(session="bench", startup_timeout=60))
        stack.append(self.local.close)

        token = os.urandom(16).hex()
        port = free_port()
        server = os.path.join(os.path.dirname(sys.executable), "swerex-remote")
        self.server = subprocess.Popen(
            [server, "--host", "127.0.0.1", "--port", str(port), "--auth-token", token],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        async def stop_server() -> None:
            self.server.terminate()
            self.server.wait(10)

        stack.append(stop_server)
        self.remote = RemoteRuntime(host="http://127.0.0.1", port=port, auth_token=token)
        await self.remote.wait_until_alive(timeout=60)
        await self.remote.create_session(CreateBashSessionRequest(session="bench", startup_timeout=60))
        return {
            "swerex-local": self.local_exec,
            "swerex-session": self.local_session,
            "swerex-remote": self.remote_exec,
            "swerex-remote-session": self.remote_session,
            "subprocess": subprocess_op,
        }

    async def local_exec(self, argv: list[str]) -> int:
        r = await self.local.execute(self.Command(command=argv, shell=False))
        return checked(r.stdout, r.exit_code, argv)

    async def remote_exec(self, argv: list[str]) -> int:
        r = await self.remote.execute(self.Command(command=argv, shell=False))
        return checked(r.stdout, r.exit_code, argv)

    async def local_session(self, argv: list[str]) -> int:
        r = await self.local.run_in_session(self.BashAction(session="bench", command=" ".join(argv), check="silent"))
        return checked(r.output, r.exit_code, argv)

    async def remote_session(self, argv: list[str]) -> int:
        r = await self.remote.run_in_session(self.BashAction(session="bench", command=" ".join(argv), check="silent"))
        return checked(r.output, r.exit_code, argv)


class Inspect:
    """Inspect AI's local sandbox; envrt's package and Inspect provider when importable."""

    async def start(self, stack: list[Callable[[], Awaitable[None]]]) -> dict[str, Op]:
        from inspect_ai.util._sandbox.local import LocalSandboxEnvironment

        sandbox = (await LocalSandboxEnvironment.sample_init("bench", None, {}))["default"]

        async def cleanup() -> None:
            await LocalSandboxEnvironment.sample_cleanup("bench", None, {"default": sandbox}, False)

        stack.append(cleanup)

        async def inspect_local(argv: list[str]) -> int:
            r = await sandbox.exec(argv)
            return checked(r.stdout, r.returncode, argv)

        ops: dict[str, Op] = {"inspect-local": inspect_local, "subprocess": subprocess_op}
        try:
            import envrt
            from envrt._inspect import EnvrtSandboxEnvironment
        except ImportError:
            return ops
        root = tempfile.TemporaryDirectory(prefix="envrt-bench-peers-")
        runtime = await envrt.Runtime.create(local_root=f"{root.name}/workspaces")
        lease = await runtime.acquire("local")
        provider = EnvrtSandboxEnvironment(lease)

        async def release() -> None:
            await lease.release()
            root.cleanup()

        stack.append(release)

        async def package(argv: list[str]) -> int:
            r = await lease.exec(argv)
            return checked(r.stdout, r.exit_code, argv)

        async def envrt_inspect(argv: list[str]) -> int:
            r = await provider.exec(argv)
            return checked(r.stdout, r.returncode, argv)

        ops["envrt-package"] = package
        ops["envrt-inspect"] = envrt_inspect
        return ops


async def serve(kind: str) -> int:
    stack: list[Callable[[], Awaitable[None]]] = []
    try:
        try:
            peer = {"swerex": SweRex, "inspect": Inspect}[kind]()
            ops = await peer.start(stack)
        except Exception as e:  # the bench prints it in the row
            reply({"error": f"{kind} did not start: {type(e).__name__}: {e}"})
            return 1
        reply({"ready": sorted(ops)})
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return 0
            request = json.loads(line)
            try:
                op = ops[request["op"]]
                start = time.perf_counter_ns()
                seen = await op(request["argv"])
                took = time.perf_counter_ns() - start
                want = request.get("bytes")
                if want is not None and seen != want:
                    raise RuntimeError(f"{request['op']}: stdout had {seen} bytes, not {want}")
                reply({"ns": took})
            except Exception as e:
                reply({"error": f"{type(e).__name__}: {e}"})
    finally:
        for undo in reversed(stack):
            try:
                await undo()
            except Exception:
                pass


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("swerex", "inspect"):
        sys.stderr.write("usage: peers_driver.py swerex|inspect\n")
        sys.exit(2)
    sys.exit(asyncio.run(serve(sys.argv[1])))
