"""Where the package finds the reference sandbox worker ``envrt-sandbox-worker``:
``[sandbox] worker`` in envrt.toml (only that path), else next to the interpreter, in the
package's own directory (where its wheel installs the worker), else on ``PATH``. When it is
missing, the error says which binary, where it looked and how to set it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import envrt
from conftest import required, sandbox_worker

PACKAGE_DIR = os.path.dirname(os.path.abspath(envrt.__file__))


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter whose PATH has no worker."""
    env = {k: v for k, v in os.environ.items() if k not in ("ENVRT_CONFIG", "ENVRT_STATE_DIR")}
    env["PATH"] = "/usr/bin:/bin"
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_configured_worker_is_the_only_one_tried_and_a_missing_one_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "bin" / "envrt-sandbox-worker"
    (tmp_path / "envrt.toml").write_text(
        '[sandbox]\nworker = "bin/envrt-sandbox-worker"\n[[environment]]\nid = "box"\ndriver = "sandbox"\n'
    )
    text = f'Sandbox worker "{missing}" (set by [sandbox] worker in envrt.toml) is not an executable file.'
    with pytest.raises(envrt.EnvrtError) as caught:
        envrt.sandbox_worker(missing)
    assert (str(caught.value), caught.value.kind) == (text, "unavailable")

    async def acquire() -> None:
        runtime = await envrt.Runtime.from_config(tmp_path / "envrt.toml", state_dir=tmp_path / "state")
        assert runtime.skipped_drivers == {"sandbox": text}
        with pytest.raises(envrt.EnvrtError) as refused:
            await runtime.acquire("box")
        assert str(refused.value) == f'Environment driver "sandbox" could not be set up: {text}'
        assert refused.value.kind == "unavailable"
        assert refused.value.__cause__.kind == "driver_not_registered"

    import asyncio

    asyncio.run(acquire())


def test_the_package_looks_for_the_worker_in_its_own_directory(tmp_path: Path) -> None:
    """With the worker in the package (the wheel, or develop.sh, puts it there) a sandbox
    environment without [[plugin]] runs; without, the error names the package's directory."""
    (tmp_path / "envrt.toml").write_text('default = "box"\n[[environment]]\nid = "box"\ndriver = "sandbox"\n')
    beside = os.path.join(PACKAGE_DIR, "envrt-sandbox-worker")
    probe = _run(
        """
        import asyncio, envrt
        try:
            print("found", envrt.sandbox_worker())
        except envrt.EnvrtError as error:
            print("missing", error)
        async def main():
            runtime = await envrt.Runtime.from_config("envrt.toml", state_dir="state")
            print("skipped", runtime.skipped_drivers)
            if not runtime.skipped_drivers:
                async with await runtime.acquire() as lease:
                    result = await lease.exec(["echo", "hi"])
                    print("ran", result.exit_code, result.stdout)
        asyncio.run(main())
        """,
        tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    interpreter_dir = os.path.dirname(os.path.realpath(sys.executable))
    if os.access(beside, os.X_OK) and not os.path.exists(os.path.join(interpreter_dir, "envrt-sandbox-worker")):
        assert probe.stdout == f"found {beside}\nskipped {{}}\nran 0 b'hi\\n'\n", probe.stdout
        return
    if os.path.exists(os.path.join(interpreter_dir, "envrt-sandbox-worker")):
        pytest.skip("SKIPPED: a worker next to the interpreter is found first")
    text = (
        f'Sandbox worker "envrt-sandbox-worker" was not found (looked in {interpreter_dir}, {PACKAGE_DIR}, '
        'and on PATH); set [sandbox] worker = "/path/to/envrt-sandbox-worker" in envrt.toml, or put it on PATH.'
    )
    assert probe.stdout == f"missing {text}\nskipped {{'sandbox': {text!r}}}\n", probe.stdout
    if required("ENVRT_REQUIRE_SANDBOX"):
        pytest.fail(f"ENVRT_REQUIRE_SANDBOX=1 but the package has no worker at {beside} (run develop.sh)")


def test_a_configured_worker_runs_a_sandbox_without_plugin(tmp_path: Path) -> None:
    worker = sandbox_worker()
    if worker is None:
        if required("ENVRT_REQUIRE_SANDBOX"):
            pytest.fail("ENVRT_REQUIRE_SANDBOX=1 but envrt-sandbox-worker was not found")
        pytest.skip("SKIPPED: envrt-sandbox-worker was not found")
    (tmp_path / "envrt.toml").write_text(
        f'default = "box"\n[sandbox]\nworker = "{worker}"\n[[environment]]\nid = "box"\ndriver = "sandbox"\n'
    )
    probe = _run(
        """
        import asyncio, envrt
        async def main():
            runtime = await envrt.Runtime.from_config("envrt.toml", state_dir="state")
            async with await runtime.acquire() as lease:
                result = await lease.exec(["echo", "hi"])
                print(runtime.skipped_drivers, result.exit_code, result.stdout)
        asyncio.run(main())
        """,
        tmp_path,
    )
    assert (probe.returncode, probe.stdout) == (0, "{} 0 b'hi\\n'\n"), probe.stderr
