"""The peer side of envrt-bench's agent loop rows (crates/bench/src/scenario/agent.rs): runs
in SWE-ReX's own interpreter, started once, and times one whole loop per request, so the
interpreter's start and the pipe to envrt-bench stay out of every figure.

    python agent_driver.py swerex-local

Protocol, one JSON object per line: the driver first prints {"ready": true} or
{"error": TEXT}; then each request {"repo": DIR, "work": DIR, "out": DIR, "commands":
[[ARGV]...]} gets {"ns": NANOSECONDS} or {"error": TEXT}. End of input stops it.

The loop with SWE-ReX 1.4.0's LocalRuntime: `upload(UploadRequest(repo, work))` (its
copytree), `execute(Command(command=argv, shell=False, cwd=work))` for every command, the
patch and the test (each must exit 0), and `upload(UploadRequest(work, out))` for the sync
out (SWE-ReX has no download; for the local runtime its upload is a local copy either way).
The work directory is removed after each loop, outside the timing.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time


def reply(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def main() -> None:
    if sys.argv[1:] != ["swerex-local"]:
        reply({"error": f"usage: agent_driver.py swerex-local (got {sys.argv[1:]!r})"})
        return
    try:
        from swerex.runtime.abstract import Command, UploadRequest
        from swerex.runtime.local import LocalRuntime
    except Exception as e:  # noqa: BLE001 - the bench prints why the peer cannot run
        reply({"error": f"cannot import SWE-ReX: {e}"})
        return
    runtime = LocalRuntime()
    reply({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            start = time.perf_counter_ns()
            await runtime.upload(UploadRequest(source_path=request["repo"], target_path=request["work"]))
            for argv in request["commands"]:
                r = await runtime.execute(Command(command=argv, shell=False, cwd=request["work"]))
                if r.exit_code != 0:
                    raise RuntimeError(f"{argv!r} exited {r.exit_code}: {r.stderr.strip()}")
            await runtime.upload(UploadRequest(source_path=request["work"], target_path=request["out"]))
            took = time.perf_counter_ns() - start
            with open(f"{request['out']}/calc.py") as f:
                if "a + b" not in f.read():
                    raise RuntimeError("the patched calc.py did not come out")
            reply({"ns": took})
        except Exception as e:  # noqa: BLE001 - one failed loop is reported, not fatal
            reply({"error": f"{type(e).__name__}: {e}"})
        finally:
            shutil.rmtree(request["work"], ignore_errors=True)
    await runtime.close()


asyncio.run(main())
