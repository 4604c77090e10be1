"""Leases that find their owner again, readiness and idle timeouts through the package
(contract section 8): scope reuse (created / resumed / replaced, one lease for concurrent
acquirers), release by scope or label, a readiness command that fails or times out, and
an idle timeout that ends a lease nobody touches while keep-alive keeps another; each
refusal with the facade's exact text."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import envrt
from conftest import get_site


@pytest.fixture
def local(site_root: Path):
    return get_site("local", site_root)


async def _active_ids(runtime: envrt.Runtime, environment: str) -> list[str]:
    return [l.id for l in await runtime.leases(environment, ["active"])]


async def test_scope_reuse_resumes_the_same_lease_and_replaces_it_on_a_changed_config(local) -> None:
    runtime = local.runtime
    await runtime.put_environment("owned", "local", config={"allowedUsers": ["root"]})
    first = await runtime.acquire("owned", scope="agent-1", reuse="scope", labels={"team": "red"})
    assert (first.scope, first.scope_outcome, first.scope_outcome_reason) == ("agent-1", "created", None)
    await first.exec(["sh", "-c", "echo kept > note"])
    again = await runtime.acquire("owned", scope="agent-1", reuse="scope")
    assert (again.id, again.scope_outcome) == (first.id, "resumed")
    assert (await again.exec(["cat", "note"])).stdout == b"kept\n"

    await runtime.put_environment("owned", "local", config={"allowedUsers": ["root", "nobody"]})
    replaced = await runtime.acquire("owned", scope="agent-1", reuse="scope")
    assert replaced.id != first.id
    assert (replaced.scope_outcome, replaced.scope_outcome_reason) == ("replaced", "the fingerprint changed: config")
    old = await runtime.lease(first.id)
    assert old is not None and old.info["status"] != "active"
    assert await _active_ids(runtime, "owned") == [replaced.id]

    # Without reuse a scope is only recorded: a second lease, no outcome.
    plain = await runtime.acquire("owned", scope="agent-1")
    assert (plain.scope, plain.scope_outcome) == ("agent-1", None) and plain.id != replaced.id

    report = await runtime.release_matching(scope="agent-1")
    assert sorted(l.id for l in report.released) == sorted([replaced.id, plain.id])
    assert [l.info["status"] for l in report.released] == ["released", "released"]
    assert report.failures == []
    again_report = await runtime.release_matching(scope="agent-1")
    assert (again_report.released, again_report.failures) == ([], [])  # idempotent
    assert await _active_ids(runtime, "owned") == []


async def test_concurrent_scoped_acquires_get_one_lease(local) -> None:
    runtime = local.runtime
    leases = await asyncio.gather(
        *(runtime.acquire("local", scope="racer", reuse="scope") for _ in range(4))
    )
    try:
        assert len({l.id for l in leases}) == 1
        assert sorted(l.scope_outcome or "" for l in leases) == ["created", "resumed", "resumed", "resumed"]
    finally:
        await runtime.release_matching(scope="racer")


async def test_release_by_label_ends_only_the_matching_leases(local) -> None:
    runtime = local.runtime
    red = await runtime.acquire("local", labels={"team": "red"})
    blue = await runtime.acquire("local", labels={"team": "blue"})
    report = await runtime.release_matching(label=("team", "red"))
    assert [l.id for l in report.released] == [red.id]
    assert blue.id in await _active_ids(runtime, "local")
    assert (await runtime.release_matching(label=("team", "red"))).released == []
    await blue.release()


async def test_scope_and_release_refusals_keep_their_texts(local) -> None:
    runtime = local.runtime
    before = await _active_ids(runtime, "local")
    with pytest.raises(envrt.EnvrtValueError) as refused:
        await runtime.acquire("local", reuse="scope")
    assert (str(refused.value), refused.value.kind) == ('Invalid input: reuse = "scope" needs a scope', "invalid_input")
    bad_scope = "Invalid input: a lease scope must be 1 to 256 bytes without control characters"
    for scope in ("", "x" * 257, "a\nb"):
        with pytest.raises(envrt.EnvrtValueError) as refused:
            await runtime.acquire("local", scope=scope, reuse="scope")
        assert str(refused.value) == bad_scope
    with pytest.raises(ValueError) as refused:
        await runtime.acquire("local", scope="s", reuse="always")  # type: ignore[arg-type]
    assert str(refused.value) == 'unknown reuse "always" (expected "never" or "scope")'
    for kwargs in ({}, {"scope": "s", "label": ("k", "v")}):
        with pytest.raises(envrt.EnvrtValueError) as refused:
            await runtime.release_matching(**kwargs)  # type: ignore[arg-type]
        assert str(refused.value) == "envrt: release_matching needs exactly one of scope= and label="
    assert await _active_ids(runtime, "local") == before


async def test_a_failing_readiness_command_raises_its_text_and_leaves_no_lease(local) -> None:
    runtime = local.runtime
    await runtime.put_environment("unready", "local", ready_command=["sh", "-c", "exit 3"])
    with pytest.raises(envrt.EnvrtError) as refused:
        await runtime.acquire("unready")
    (record,) = await runtime.leases("unready")
    assert (str(refused.value), refused.value.kind) == (
        f'Lease "{record.id}" is not ready: its readiness command exited with code 3.',
        "lease_not_ready",
    )
    assert (record.info["status"], record.info.get("failureReason")) == ("failed", "not_ready")
    assert record.workspace is not None and not os.path.exists(record.workspace)

    await runtime.put_environment("slow", "local", ready_command=["sleep", "30"], ready_timeout=0.5)
    with pytest.raises(envrt.EnvrtError) as refused:
        await runtime.acquire("slow")
    (record,) = await runtime.leases("slow")
    assert str(refused.value) == f'Lease "{record.id}" is not ready: its readiness command did not finish within 500 ms.'
    assert record.info["status"] == "failed"
    assert await _active_ids(runtime, "slow") == []

    await runtime.put_environment("ready", "local", ready_command=["test", "-d", "."], ready_timeout=30)
    async with await runtime.acquire("ready") as lease:
        assert (await lease.exec(["echo", "ready"])).stdout == b"ready\n"


async def test_bad_readiness_declarations_are_refused_with_their_texts(local) -> None:
    runtime = local.runtime
    cases = [
        ({"ready_command": []}, "Invalid input: ready_command needs a program"),
        ({"ready_command": [""]}, "Invalid input: ready_command needs a program"),
        ({"ready_command": ["x"] * 65}, "Invalid input: ready_command has more than 64 words"),
        ({"ready_command": ["true"], "ready_timeout": 0}, "Invalid input: ready_timeout must be from 1 ms to 600 s"),
        ({"ready_command": ["true"], "ready_timeout": 601}, "Invalid input: ready_timeout must be from 1 ms to 600 s"),
        ({"ready_command": ["true"], "ready_timeout": -1}, "Invalid input: ready_timeout must be from 1 ms to 600 s"),
        ({"ready_timeout": 5}, "Invalid input: ready_timeout needs ready_command"),
        ({"ready_command": "true"}, "Invalid input: ready_command is an argv (a list of strings), not a string"),
    ]
    for kwargs, text in cases:
        with pytest.raises(envrt.EnvrtValueError) as refused:
            await runtime.put_environment("never-stored", "local", **kwargs)  # type: ignore[arg-type]
        assert str(refused.value) == text, kwargs
    with pytest.raises(envrt.EnvrtLookupError) as missing:
        await runtime.environment_capabilities("never-stored")
    assert str(missing.value) == 'Environment "never-stored" was not found.'


async def test_an_idle_lease_ends_and_a_kept_alive_one_stays(local) -> None:
    runtime = local.runtime
    idle = await runtime.acquire("local", idle_timeout=1)
    kept = await runtime.acquire("local", idle_timeout=1)
    assert (idle.idle_timeout, kept.idle_timeout) == (1.0, 1.0)
    assert idle.workspace is not None
    # Nobody touches `idle`: its driver ends it (its workspace goes) with no call of ours;
    # `kept` is kept alive meanwhile. Bounded: the contract says about 3 s after the timeout.
    loop = asyncio.get_running_loop()
    end = loop.time() + 60
    while os.path.exists(idle.workspace):
        assert loop.time() < end, "the idle lease was not ended within 60 s"
        await kept.keep_alive()
        await asyncio.sleep(0.25)
    ended = f'Lease "{idle.id}" ended after its idle timeout.'
    with pytest.raises(envrt.EnvrtTimeoutError) as refused:
        await idle.exec(["true"])
    assert (str(refused.value), refused.value.kind) == (ended, "lease_idle_ended")
    with pytest.raises(envrt.EnvrtTimeoutError) as refused:
        await idle.keep_alive()
    assert str(refused.value) == ended
    record = await runtime.lease(idle.id)
    assert record is not None and record.info["status"] == "expired"
    # The kept one still works.
    assert (await kept.exec(["echo", "alive"])).stdout == b"alive\n"
    await kept.release()


async def test_idle_timeout_refusals_keep_their_texts_and_leave_no_lease(local, site_root: Path) -> None:
    runtime = local.runtime
    before = await _active_ids(runtime, "local")
    with pytest.raises(envrt.EnvrtValueError) as refused:
        await runtime.acquire("local", idle_timeout=0.5)
    assert str(refused.value) == "Invalid input: the local driver's idle timeout lies between 1 s and 30 days, not 500 ms"
    assert await _active_ids(runtime, "local") == before
    with pytest.raises(ValueError) as refused:
        await runtime.acquire("local", idle_timeout=-1)
    assert str(refused.value) == "invalid duration -1 s"
    async with await runtime.acquire("local") as lease:
        with pytest.raises(envrt.EnvrtValueError) as refused:
            await lease.keep_alive()
        assert str(refused.value) == f'Invalid input: lease "{lease.id}" has no idle timeout'
        await lease.set_idle_timeout(30)
        assert lease.idle_timeout == 30.0
        await lease.keep_alive()

    sandbox = get_site("sandbox", site_root)
    before = await _active_ids(sandbox.runtime, "sandbox")
    with pytest.raises(envrt.EnvrtUnsupportedError) as refused:
        await sandbox.acquire(idle_timeout=60)
    assert (str(refused.value), refused.value.kind) == (
        'Environment driver "sandbox" does not support idle timeouts.',
        "idle_timeout_unsupported",
    )
    assert await _active_ids(sandbox.runtime, "sandbox") == before


async def test_docker_takes_an_idle_timeout_and_keep_alive(site_root: Path) -> None:
    # Docker enforces idle timeouts with a host watchdog (contract section 8); the refusal
    # of a driver without them is pinned on the sandbox above.
    docker = get_site("docker", site_root)
    before = await _active_ids(docker.runtime, "docker")
    async with await docker.acquire(idle_timeout=60) as lease:
        assert lease.idle_timeout == 60.0
        await lease.keep_alive()
        result = await lease.exec(["true"])
        assert result.exit_code == 0
    assert await _active_ids(docker.runtime, "docker") == before


async def test_from_config_takes_each_environments_idle_timeout_and_readiness(tmp_path: Path) -> None:
    (tmp_path / "envrt.toml").write_text(
        f'[local]\nroot = "{tmp_path / "leases"}"\n\n'
        '[[environment]]\nid = "idle"\ndriver = "local"\nidle_timeout = "45s"\n\n'
        '[[environment]]\nid = "checked"\ndriver = "local"\nready_command = ["sh", "-c", "exit 4"]\n'
    )
    runtime = await envrt.Runtime.from_config(tmp_path / "envrt.toml", state_dir=tmp_path / "state")
    assert runtime.default_idle_timeouts == {"idle": 45.0}
    async with await runtime.acquire("idle") as lease:
        assert lease.idle_timeout == 45.0
        await lease.keep_alive()
    async with await runtime.acquire("idle", idle_timeout=90) as lease:
        assert lease.idle_timeout == 90.0
    with pytest.raises(envrt.EnvrtError) as refused:
        await runtime.acquire("checked")
    (record,) = await runtime.leases("checked")
    assert str(refused.value) == f'Lease "{record.id}" is not ready: its readiness command exited with code 4.'
