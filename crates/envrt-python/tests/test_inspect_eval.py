"""``inspect eval`` of a small task with ``sandbox="envrt"`` completes on each driver,
each sample in a lease of its own, every lease released afterwards."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import envrt
from conftest import DRIVERS, get_site
from inspect_sites import write_config

TASK = Path(__file__).parent / "evals" / "envrt_task.py"


@pytest.mark.parametrize("driver", DRIVERS)
def test_inspect_eval_completes(driver: str, site_root: Path, tmp_path: Path) -> None:
    get_site(driver, site_root)  # skips, or fails when required, without the driver
    # A store of this test's own: the self-checks lease from the same environment ids, and
    # this test counts the leases the eval made.
    config, state_dir = write_config(tmp_path / "envrt", driver)
    env = dict(os.environ, ENVRT_INSPECT_CONFIG=str(config), ENVRT_STATE_DIR=str(state_dir))
    inspect = Path(sys.executable).parent / "inspect"
    shutil.copy(TASK, tmp_path / TASK.name)  # inspect eval takes a path relative to its cwd
    run = subprocess.run(
        [str(inspect), "eval", TASK.name, "--model", "mockllm/model", "--log-dir", str(tmp_path / "logs"),
         "--log-format", "json", "--no-log-images", "--display", "plain"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr

    from inspect_ai.log import read_eval_log

    logs = sorted((tmp_path / "logs").glob("*.json"))
    assert len(logs) == 1, logs
    log = read_eval_log(str(logs[0]))
    assert log.status == "success", log.error
    assert log.results is not None
    assert log.results.scores[0].metrics["accuracy"].value == 1.0
    assert [sample.scores["shouted_right"].answer for sample in log.samples or []] == [
        "ALPHA",
        "BETA",
        "GAMMA",
    ]

    async def leases() -> list[envrt.Lease]:
        runtime = await envrt.Runtime.from_config(config, state_dir=state_dir)
        return await runtime.leases(environment_id=driver)

    made = asyncio.run(leases())
    # One lease per sample, each released by the provider's cleanup.
    assert len(made) == 3
    assert {lease.info["status"] for lease in made} == {"released"}
