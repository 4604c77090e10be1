"""The provider's own behaviour beyond Inspect's checks: its configuration, its errors,
and ``connection()``, whose command opens a shell on the sample's lease through the
``envrt`` CLI (the same store) where the lease grants duplex."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from inspect_ai.util import OutputLimitExceededError, SandboxUserUnsupportedError
from inspect_ai.util._sandbox.limits import override_max_exec_output_size

from conftest import REPO, get_site
from envrt._inspect import EnvrtSandboxConfig, EnvrtSandboxEnvironment, _normalize
from inspect_sites import write_config


def envrt_cli() -> Path | None:
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    candidate = target / "debug" / "envrt"
    return candidate if candidate.is_file() else None


@pytest.fixture(params=["local", "docker", "sandbox"])
async def sample(request: pytest.FixtureRequest, site_root: Path):
    get_site(request.param, site_root)
    config_path, state_dir = write_config(site_root, request.param)
    config = EnvrtSandboxConfig(config=str(config_path), state_dir=str(state_dir))
    environments = await EnvrtSandboxEnvironment.sample_init("provider", config, {})
    try:
        yield request.param, environments["default"]
    finally:
        await EnvrtSandboxEnvironment.sample_cleanup("provider", config, environments, False)


async def test_connection_opens_a_shell_on_the_lease_where_duplex_is_granted(sample) -> None:
    driver, environment = sample
    if driver == "local":
        with pytest.raises(NotImplementedError) as refused:
            await environment.connection()
        assert str(refused.value) == f"the envrt lease {environment.lease.id} does not grant duplexCommandStream"
        return
    connection = await environment.connection()
    assert connection.type == "envrt"
    argv = shlex.split(connection.command)
    assert argv[-2:] == ["--lease", environment.lease.id]
    cli = envrt_cli()
    if cli is None:
        pytest.skip("SKIPPED: the envrt CLI is not built (cargo build --bin envrt)")
    await environment.write_file("marker.txt", "through the connection")
    run = subprocess.run(
        [str(cli), *argv[1:], "--", "cat", "marker.txt"], capture_output=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert (run.returncode, run.stdout) == (0, b"through the connection"), run.stderr


async def test_exec_errors_follow_inspect(sample) -> None:
    driver, environment = sample
    with pytest.raises(SandboxUserUnsupportedError):
        await environment.exec(["true"], user="no-such-user")
    me = (await environment.exec(["id", "-un"])).stdout.strip()
    if me == "root" and driver == "local":
        # Root always goes through the driver's gate: the local driver runs as another
        # user (root included) only when the environment's allowedUsers lists it.
        with pytest.raises(SandboxUserUnsupportedError) as refused:
            await environment.exec(["true"], user=me)
        assert str(refused.value) == (
            'Cannot run as user "root": the environment config "allowedUsers" does not list it.'
        )
    else:
        assert (await environment.exec(["true"], user=me)).success
    with override_max_exec_output_size(16):
        with pytest.raises(OutputLimitExceededError) as limited:
            await environment.exec(["sh", "-c", "printf '%040d' 0"])
    assert limited.value.truncated_output == "0" * 16
    with pytest.raises(TimeoutError):
        await environment.exec(["sleep", "30"], timeout=1)


def test_configuration_forms() -> None:
    assert _normalize(None) == EnvrtSandboxConfig()
    assert _normalize("envrt.toml") == EnvrtSandboxConfig(config="envrt.toml")
    assert EnvrtSandboxEnvironment.config_deserialize({"environment": "dev"}) == EnvrtSandboxConfig(environment="dev")
    with pytest.raises(ValueError) as wrong:
        _normalize(3)  # type: ignore[arg-type]
    assert str(wrong.value) == "the envrt sandbox takes an envrt.toml path or EnvrtSandboxConfig, not int"
    assert EnvrtSandboxEnvironment.config_files() == ["envrt.toml"]


async def test_a_bad_envrt_toml_is_refused_with_its_text(tmp_path: Path) -> None:
    bad = tmp_path / "envrt.toml"
    bad.write_text("nonsense = [\n")
    config = EnvrtSandboxConfig(config=str(bad), state_dir=str(tmp_path / "state"))
    with pytest.raises(Exception) as refused:
        await EnvrtSandboxEnvironment.sample_init("provider", config, {})
    assert str(refused.value).startswith(f'envrt: config "{bad}": ')
    assert getattr(refused.value, "kind", None) == "invalid_config"


async def test_task_cleanup_releases_what_sample_cleanup_did_not(site_root: Path) -> None:
    get_site("local", site_root)
    config_path, state_dir = write_config(site_root, "local")
    config = EnvrtSandboxConfig(config=str(config_path), state_dir=str(state_dir))
    kept = await EnvrtSandboxEnvironment.sample_init("leftover-task", config, {})
    left = await EnvrtSandboxEnvironment.sample_init("leftover-task", config, {})
    await EnvrtSandboxEnvironment.sample_cleanup("leftover-task", config, kept, False)
    await EnvrtSandboxEnvironment.task_cleanup("leftover-task", config, cleanup=True)
    runtime = kept["default"].lease.runtime
    statuses = {
        (await runtime.lease(env["default"].lease.id)).info["status"] for env in (kept, left)  # type: ignore[union-attr]
    }
    assert statuses == {"released", "failed"}
