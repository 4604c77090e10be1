"""Inspect AI's own sandbox self-checks (``inspect_ai/util/_sandbox/self_check.py``)
against the ``envrt`` provider on each driver, and against Inspect's built-in ``local``
provider as the baseline, in the same run. Checks a configuration cannot pass are strict
xfails with the reason, so a check that starts passing fails until it is moved."""

from __future__ import annotations

import os
from pathlib import Path
from typing import AsyncIterator

import pytest
from inspect_ai.util._sandbox.local import LocalSandboxEnvironment
from inspect_ai.util._sandbox.self_check import *  # noqa: F403

from conftest import get_site
from envrt._inspect import EnvrtSandboxConfig, EnvrtSandboxEnvironment
from inspect_sites import write_config

ROOT = os.geteuid() == 0

# Why a check fails, per configuration (strict xfails).
SANDBOX_AS_USER = (
    "whoami as root works (the worker takes names of the sandbox's /etc/passwd), but adduser "
    "cannot: the sandbox's /etc is the host's, bound read-only, and its user namespace maps one uid"
)
AS_ROOT = "runs as root, whom chmod does not stop"
LOCAL_AS_USER = (
    "the local driver runs a command as another user (root included) only when envrt runs as root "
    "and the environment's allowedUsers lists it; the test site lists none, since this check runs "
    "adduser and would create an account on the host itself"
)
DOCKER_AS_USER = (
    "the test image (Debian's busybox-static) has no adduser applet; and root in an exec of a "
    "container whose user is nobody has no capabilities (the driver's no-new-privileges), so even "
    "an adduser could not chown the new user's home"
)

KNOWN: dict[str, dict[str, str]] = {
    # The local site opts in to host paths (inspect_sites.py), so absolute paths and cwd
    # (e.g. /tmp, /usr/bin, /etc) pass as they do with Inspect's own local provider.
    "envrt-local": {"test_exec_as_user": LOCAL_AS_USER},
    "envrt-docker": {"test_exec_as_user": DOCKER_AS_USER},
    "envrt-sandbox": {
        # The library's one-file probe runs as the sandbox user, so unreadable, read-only
        # and directory targets are refused as Inspect expects.
        "test_exec_as_user": SANDBOX_AS_USER,
    },
    "inspect-local": {
        "test_exec_timeout_not_raised_on_fast_signal_death": "Inspect's subprocess gives -15, not 143, for a SIGTERM death",
        "test_exec_as_user": "Inspect's local provider runs as the current user only",
    },
}
if ROOT:
    KNOWN["envrt-local"].update(
        {
            "test_read_file_not_allowed": AS_ROOT,
            "test_write_text_file_without_permissions": AS_ROOT,
            "test_write_binary_file_without_permissions": AS_ROOT,
        }
    )
    KNOWN["inspect-local"].update(
        {
            "test_read_file_not_allowed": AS_ROOT,
            "test_write_text_file_without_permissions": AS_ROOT,
            "test_write_binary_file_without_permissions": AS_ROOT,
        }
    )

CONFIGURATIONS = list(KNOWN)


@pytest.fixture(params=CONFIGURATIONS)
async def sandbox_env(request: pytest.FixtureRequest, site_root: Path) -> AsyncIterator[object]:
    name: str = request.param
    reason = KNOWN[name].get(request.node.originalname)
    if reason:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    if name == "inspect-local":
        environments = await LocalSandboxEnvironment.sample_init("self-check", None, {})
        try:
            yield environments["default"]
        finally:
            await LocalSandboxEnvironment.sample_cleanup("self-check", None, environments, False)
        return
    driver = name.removeprefix("envrt-")
    get_site(driver, site_root)  # skips, or fails when required, without the driver
    config_path, state_dir = write_config(site_root, driver)
    config = EnvrtSandboxConfig(config=str(config_path), state_dir=str(state_dir))
    environments = await EnvrtSandboxEnvironment.sample_init("self-check", config, {})
    try:
        yield environments["default"]
    finally:
        await EnvrtSandboxEnvironment.sample_cleanup("self-check", config, environments, False)


async def test_self_checks_ran_unprivileged(sandbox_env) -> None:
    """Docker and the sandbox run commands as nobody here; local as this process's user."""
    result = await sandbox_env.exec(["id", "-u"])
    expected = "65534" if type(sandbox_env).__name__ == "EnvrtSandboxEnvironment" and sandbox_env.lease.provider != "local" else str(os.geteuid())
    assert result.stdout.strip() == expected
