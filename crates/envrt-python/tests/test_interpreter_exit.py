"""The interpreter exits cleanly after using envrt: no runtime thread calls into Python
while it finalizes (that aborted with ``PyGILState_Release: thread state ... must be
current when releasing``, exit 134 or 139, in a fifth to a third of short scripts).

Each script runs ``RUNS`` times in fresh interpreters, ``PARALLEL`` at a time.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import tempfile

import pytest

RUNS = 200
PARALLEL = 8

CREATE_ONLY = "import asyncio, envrt; asyncio.run(envrt.Runtime.create())"

LEASE_AND_RUN = """
import asyncio, envrt, sys

async def main():
    runtime = await envrt.Runtime.create(local_root=sys.argv[1])
    async with await runtime.acquire("local") as lease:
        result = await lease.exec(["true"])
        assert result.exit_code == 0, result

asyncio.run(main())
"""


def run_many(script: str, *args: str) -> list[str]:
    def once(_: int) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=os.environ.copy(),
        )
        return done.returncode, done.stderr

    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        outcomes = list(pool.map(once, range(RUNS)))
    failures = [f"exit {code}:\n{stderr}" for code, stderr in outcomes if code != 0]
    for failure in failures[:5]:
        print(failure, file=sys.stderr)
    return failures


@pytest.mark.parametrize("name", ["create_only", "lease_and_run"])
def test_interpreter_exit_is_clean(name: str) -> None:
    with tempfile.TemporaryDirectory(prefix="envrt-exit-") as root:
        if name == "create_only":
            failures = run_many(CREATE_ONLY)
        else:
            failures = run_many(LEASE_AND_RUN, root)
    assert not failures, f"{len(failures)}/{RUNS} interpreters exited non-zero; first:\n{failures[0]}"
