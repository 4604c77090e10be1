"""Life-cycle v2 on the ssh driver through the package, against the test sshd of
``scripts/start-sshd.sh`` (settings from ``ENVRT_TEST_SSH_ENV``, default
``/var/lib/envrt-test-ssh/env``): pause, unpause and fork work, and idle timeouts and
exposed ports are refused with the facade's exact texts. Without the sshd the tests skip
loudly, and fail with ``ENVRT_REQUIRE_SSH=1`` or ``CI`` set."""

from __future__ import annotations

import os
from pathlib import Path
from typing import AsyncIterator

import pytest

import envrt


def _settings() -> dict[str, str]:
    path = Path(os.environ.get("ENVRT_TEST_SSH_ENV", "/var/lib/envrt-test-ssh/env"))
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        message = f"no test sshd ({path}: {error.strerror})"
        if os.environ.get("ENVRT_REQUIRE_SSH") == "1" or os.environ.get("CI"):
            pytest.fail(f"the ssh tests are required here but there is {message}")
        pytest.skip(f"SKIPPED: {message}; set ENVRT_REQUIRE_SSH=1 to make this a failure")
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.lstrip().startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


@pytest.fixture
async def remote() -> AsyncIterator[envrt.Lease]:
    vars = _settings()
    runtime = await envrt.Runtime.create()
    await runtime.put_environment(
        "remote",
        "ssh",
        config={
            "host": vars["ENVRT_TEST_SSH_HOST"],
            "port": int(vars["ENVRT_TEST_SSH_PORT"]),
            "user": vars["ENVRT_TEST_SSH_USER"],
            "key": vars["ENVRT_TEST_SSH_KEY"],
            "known_hosts": vars["ENVRT_TEST_SSH_KNOWN_HOSTS"],
        },
    )
    lease = await runtime.acquire("remote")
    try:
        yield lease
    finally:
        await lease.release()


async def test_ssh_pauses_forks_and_refuses_idle_and_expose_with_the_facade_texts(remote: envrt.Lease) -> None:
    lease = remote
    await lease.pause()
    with pytest.raises(envrt.EnvrtError) as refused:
        await lease.exec(["true"])
    assert (str(refused.value), refused.value.kind) == (f'Lease "{lease.id}" is paused.', "lease_paused")
    await lease.unpause()
    assert (await lease.exec(["echo", "back"])).stdout == b"back\n"

    # Fork: each copy holds the fork-point file on the remote host, and what one copy
    # writes afterwards reaches neither the source nor the other copy.
    await lease.exec(["sh", "-c", "echo fork-point > state.txt"])
    copies = await lease.fork(2)
    try:
        assert len(copies) == 2 and len({c.id for c in copies} | {lease.id}) == 3
        for copy in copies:
            assert (await copy.exec(["cat", "state.txt"])).stdout == b"fork-point\n"
        await copies[0].exec(["sh", "-c", "echo changed > state.txt"])
        assert (await copies[1].exec(["cat", "state.txt"])).stdout == b"fork-point\n"
        assert (await lease.exec(["cat", "state.txt"])).stdout == b"fork-point\n"
    finally:
        for copy in copies:
            await copy.release()

    refusals = [
        (lease.set_idle_timeout(60), "idle timeouts", "idle_timeout_unsupported"),
        (lease.keep_alive(), "idle timeouts", "idle_timeout_unsupported"),
        (lease.expose(8080), "exposed lease ports", "expose_unsupported"),
    ]
    for call, what, kind in refusals:
        with pytest.raises(envrt.EnvrtUnsupportedError) as refused:
            await call
        assert (str(refused.value), refused.value.kind) == (
            f'Environment driver "ssh" does not support {what}.',
            kind,
        )

    runtime = lease.runtime
    before = [l.id for l in await runtime.leases("remote", ["active"])]
    with pytest.raises(envrt.EnvrtUnsupportedError) as refused:
        await runtime.acquire("remote", idle_timeout=60)
    assert str(refused.value) == 'Environment driver "ssh" does not support idle timeouts.'
    assert [l.id for l in await runtime.leases("remote", ["active"])] == before
