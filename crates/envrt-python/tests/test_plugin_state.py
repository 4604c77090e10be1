"""A sandbox plugin passed in code (``Runtime.create(plugins=[...])``) keeps its worker's
``ctx.state`` in the runtime's store when the runtime has one (``database=``), as an
``envrt.toml`` ``[[plugin]]`` does: a value the worker set is read back by a new worker of
a new runtime on the same database. The worker is the SDK-built host-calls fixture of the
sandbox driver's tests (Node and its installed SDK; missing, the test skips loudly and
fails when CI is set)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import envrt

FIXTURES = Path(__file__).resolve().parents[2] / "driver-plugin-sandbox" / "tests" / "fixtures"
MANIFEST = FIXTURES / "sdk-host-calls" / "manifest.json"
SDK = FIXTURES / "sdk-worker" / "node_modules" / "@paperclipai" / "plugin-sdk"


def require_fixture() -> None:
    missing = None
    if shutil.which("node") is None:
        missing = "node is not on PATH"
    elif not SDK.is_dir():
        missing = f"the SDK fixture is not installed at {SDK} (crates/driver-plugin-sandbox/scripts/install-sdk-fixture.sh)"
    if missing:
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(f"SKIPPED: {missing}")


async def run_calls(runtime: envrt.Runtime, calls: list[dict]) -> list[dict]:
    await runtime.put_environment("hc", "hostcalls")
    async with await runtime.acquire("hc") as lease:
        result = await lease.exec(["calls", json.dumps(calls)])
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)


async def test_a_plugin_passed_in_code_keeps_its_state_in_the_runtimes_store(tmp_path: Path) -> None:
    require_fixture()
    database = tmp_path / "envrt.db"
    key = {"scopeKind": "instance", "stateKey": "lease-map"}
    first = await envrt.Runtime.create(plugins=[{"manifest": MANIFEST}], database=database)
    out = await run_calls(first, [{"op": "state.set", "input": key, "value": {"l-1": "sbx-9"}}])
    assert out == [{"ok": None}]
    # Another runtime (and so another worker) on the same database reads it back.
    second = await envrt.Runtime.create(plugins=[{"manifest": MANIFEST}], database=database)
    out = await run_calls(second, [{"op": "state.get", "input": key}])
    assert out == [{"ok": {"l-1": "sbx-9"}}]
    # Without a database the state is the runtime's own: a new runtime starts empty.
    memory = await envrt.Runtime.create(plugins=[{"manifest": MANIFEST}])
    assert await run_calls(memory, [{"op": "state.get", "input": key}]) == [{"ok": None}]
