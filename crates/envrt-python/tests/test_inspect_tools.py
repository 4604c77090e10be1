"""Inspect AI's injected tools (``text_editor``, ``bash_session``, ``exec_remote``) through the ``envrt``
provider: Inspect detects the OS (``/etc/os-release``, glibc), unpacks its tools binary into
``/var/tmp`` and runs it through the provider's exec. On the sandbox (the worker binds the
host's os-release and gives each lease its own ``/var/tmp``) and on the Docker image that
meets the prerequisites (``envrt-test-glibc:latest``, built by
``scripts/docker-glibc-image.sh``: glibc, os-release, bash). Where the lease grants ``persistentProcessSessions`` (the sandbox), the provider runs the
tools CLI as envrt processes in the lease's long-lived supervisor, so the server one exec
starts serves the next ones."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from inspect_ai.tool import bash_session, text_editor
from inspect_ai.util._sandbox._cli import SANDBOX_CLI
from inspect_ai.util._sandbox.events import SandboxEnvironmentProxy
from inspect_ai.util._store import Store, _subtask_store
from inspect_ai.util._sandbox.context import (
    sandbox_default_context_var,
    sandbox_environments_context_var,
    sandbox_with_environments_context_var,
)

from conftest import get_site, required
from envrt._inspect import EnvrtSandboxConfig, EnvrtSandboxEnvironment
from inspect_sites import write_config

GLIBC_IMAGE = os.environ.get("ENVRT_TEST_GLIBC_IMAGE", "envrt-test-glibc:latest")

def _glibc_image_present() -> bool:
    import subprocess

    probe = subprocess.run(["docker", "image", "inspect", GLIBC_IMAGE], capture_output=True)
    return probe.returncode == 0


def _docker_glibc_config(root: Path) -> tuple[Path, Path]:
    folder = root / "inspect-docker-glibc"
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "envrt.toml"
    config.write_text(
        f'default = "docker"\n[local]\nroot = "{folder / "workspaces"}"\n'
        "[[environment]]\nid = \"docker\"\ndriver = \"docker\"\n[environment.config]\n"
        f'image = "{GLIBC_IMAGE}"\nuser = "65534:65534"\n'
    )
    return config, folder / "state"


@pytest.fixture(params=["sandbox", "docker-glibc"])
async def tools_sample(request: pytest.FixtureRequest, site_root: Path):
    """A sample's sandbox on the provider, installed where Inspect's tools look for it."""
    kind = request.param
    if kind == "sandbox":
        get_site("sandbox", site_root)
        config_path, state_dir = write_config(site_root, "sandbox")
    else:
        get_site("docker", site_root)
        if not _glibc_image_present():
            message = f"the image {GLIBC_IMAGE} is missing; build it with scripts/docker-glibc-image.sh"
            if required("ENVRT_REQUIRE_DOCKER"):
                pytest.fail(f"ENVRT_REQUIRE_DOCKER=1 but {message}")
            pytest.skip(f"SKIPPED: {message}")
        config_path, state_dir = _docker_glibc_config(site_root)
    config = EnvrtSandboxConfig(config=str(config_path), state_dir=str(state_dir))
    environments = await EnvrtSandboxEnvironment.sample_init("tools", config, {})
    # A sample's own store too: bash_session keeps its session's name there.
    tokens = (
        sandbox_environments_context_var.set(environments),
        sandbox_with_environments_context_var.set({}),
        sandbox_default_context_var.set("default"),
        _subtask_store.set(Store()),
    )
    try:
        yield kind, environments["default"]
    finally:
        _subtask_store.reset(tokens[3])
        sandbox_default_context_var.reset(tokens[2])
        sandbox_with_environments_context_var.reset(tokens[1])
        sandbox_environments_context_var.reset(tokens[0])
        await EnvrtSandboxEnvironment.sample_cleanup("tools", config, environments, False)


async def test_text_editor_creates_and_edits_a_file(tools_sample) -> None:
    kind, environment = tools_sample
    editor = text_editor()
    created = await editor(command="create", path="/tmp/edited.txt", file_text="one\ntwo\n")
    assert created == "File created successfully at: /tmp/edited.txt"
    edited = await editor(command="str_replace", path="/tmp/edited.txt", old_str="two", new_str="deux")
    assert str(edited).startswith("The file /tmp/edited.txt has been edited."), edited
    on_disk = await environment.exec(["cat", "/tmp/edited.txt"])
    assert (on_disk.returncode, on_disk.stdout) == (0, "one\ndeux\n"), on_disk
    listing = await editor(command="view", path="/tmp")
    assert "/tmp/edited.txt" in str(listing), listing
    viewed = await editor(command="view", path="/tmp/edited.txt")
    assert "     1\tone\n     2\tdeux" in str(viewed), viewed


async def test_bash_session_keeps_its_shell_between_calls(tools_sample) -> None:
    kind, provider = tools_sample
    session = bash_session()
    await session(action="type_submit", input="cd /tmp && X=41")
    answer = await session(action="type_submit", input='echo "$((X + 1)) $PWD"')
    assert "42 /tmp" in str(answer), answer
    if kind == "sandbox":
        # The tools CLI ran as envrt processes in the lease's supervisor (one long-lived
        # bwrap of the lease): the server the first one started outlived it.
        argvs = [p.record["argv"] for p in await provider.lease.processes()]
        assert argvs[0] == [SANDBOX_CLI, "start-server"], argvs
        assert all(argv[0] == SANDBOX_CLI for argv in argvs), argvs


async def test_exec_remote_runs_a_command_through_the_tools_server(tools_sample) -> None:
    """exec_remote runs the command as a process that outlives the call that started it: an
    envrt process where the lease grants ``persistentProcessSessions`` (the sandbox), else
    Inspect's tools server, started in one exec and polled from the next ones."""
    kind, provider = tools_sample
    # As in an eval, the sample's sandbox is the provider behind Inspect's recording proxy.
    environment = SandboxEnvironmentProxy(provider)
    command = ["sh", "-c", "echo out; echo err >&2; exit 3"]
    result = await environment.exec_remote(command, stream=False)
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n"), result
    if kind == "sandbox":
        # Through the proxy, Inspect's tools server ran it: the server and every poll ran in
        # the lease's supervisor (the CLI's execs are envrt processes there).
        argvs = [p.record["argv"] for p in await provider.lease.processes()]
        assert argvs[0] == [SANDBOX_CLI, "start-server"], argvs
        # Called on the provider itself, exec_remote spawns the command as an envrt process.
        direct = await provider.exec_remote(command, stream=False)
        assert (direct.returncode, direct.stdout, direct.stderr) == (3, "out\n", "err\n"), direct
        assert (await provider.lease.processes())[-1].record["argv"] == command
