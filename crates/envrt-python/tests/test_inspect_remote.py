"""Inspect's ``exec_remote`` on the provider where the lease grants
``persistentProcessSessions`` (the local driver): the command runs as an envrt process,
with no tool binary injected; events, stdin, ``kill()``, cancellation and the awaitable
form's timeout behave as Inspect documents them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from inspect_ai.util._sandbox.exec_remote import (
    ExecCompleted,
    ExecRemoteAwaitableOptions,
    ExecRemoteStreamingOptions,
    ExecStderr,
    ExecStdout,
)

from conftest import get_site
from envrt import ProcessStatus
from envrt._inspect import EnvrtSandboxConfig, EnvrtSandboxEnvironment
from inspect_sites import write_config


@pytest.fixture
async def local_sample(site_root: Path):
    get_site("local", site_root)
    config_path, state_dir = write_config(site_root, "local")
    config = EnvrtSandboxConfig(config=str(config_path), state_dir=str(state_dir))
    environments = await EnvrtSandboxEnvironment.sample_init("remote", config, {})
    try:
        yield environments["default"]
    finally:
        await EnvrtSandboxEnvironment.sample_cleanup("remote", config, environments, False)


async def test_exec_remote_streams_events_of_a_spawned_process(local_sample) -> None:
    proc = await local_sample.exec_remote(["sh", "-c", "echo out; echo err >&2; exit 3"])
    events = [event async for event in proc]
    assert "".join(e.data for e in events if isinstance(e, ExecStdout)) == "out\n"
    assert "".join(e.data for e in events if isinstance(e, ExecStderr)) == "err\n"
    assert events[-1] == ExecCompleted(exit_code=3)
    with pytest.raises(RuntimeError, match="can only be iterated once"):
        proc.__aiter__()
    # Spawned through envrt: no tools binary was injected, and the lease lists the process.
    assert local_sample._tools_injected is False
    assert [p.pid for p in await local_sample.lease.processes()] == [proc.pid]
    result = await local_sample.exec_remote(["sh", "-c", "echo out; echo err >&2; exit 3"], stream=False)
    assert (result.returncode, result.stdout, result.stderr, result.success) == (3, "out\n", "err\n", False)


async def test_exec_remote_feeds_stdin(local_sample) -> None:
    proc = await local_sample.exec_remote(["cat"], ExecRemoteStreamingOptions(stdin_open=True))
    await proc.write_stdin("hello ")
    await proc.write_stdin(b"world\n")
    await proc.close_stdin()
    events = [event async for event in proc]
    assert "".join(e.data for e in events if isinstance(e, ExecStdout)) == "hello world\n"
    assert events[-1] == ExecCompleted(exit_code=0)
    await proc.close_stdin()  # idempotent after the end
    with pytest.raises(RuntimeError, match="^Cannot write to stdin: process has terminated$"):
        await proc.write_stdin("late")
    closed = await local_sample.exec_remote(["cat"])
    with pytest.raises(RuntimeError, match=r"^write_stdin\(\) requires stdin_open=True"):
        await closed.write_stdin("x")
    result = await local_sample.exec_remote(["cat"], ExecRemoteAwaitableOptions(input="fed"), stream=False)
    assert (result.returncode, result.stdout) == (0, "fed")


async def test_kill_ends_the_process_without_a_completion(local_sample) -> None:
    proc = await local_sample.exec_remote(["sh", "-c", "echo started; exec sleep 300"])
    events = proc.__aiter__()
    assert await events.__anext__() == ExecStdout(data="started\n")
    await proc.kill()
    rest = []
    while True:
        try:
            rest.append(await events.__anext__())
        except StopAsyncIteration:
            break
    assert not any(isinstance(e, ExecCompleted) for e in rest)
    assert await proc.process.wait() == ProcessStatus("signalled", signal=9)
    await proc.kill()  # a no-op once killed


async def test_cancelling_the_reader_kills_the_process(local_sample) -> None:
    proc = await local_sample.exec_remote(["sh", "-c", "echo started; exec sleep 300"])
    started = asyncio.Event()

    async def read() -> None:
        async for _event in proc:
            started.set()

    task = asyncio.create_task(read())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await proc.process.wait() == ProcessStatus("signalled", signal=9)


async def test_the_awaitable_form_times_out_and_kills(local_sample) -> None:
    with pytest.raises(TimeoutError):
        await local_sample.exec_remote(
            ["sh", "-c", "exec sleep 300"], ExecRemoteAwaitableOptions(timeout=0.5), stream=False
        )
    [spawned] = await local_sample.lease.processes()
    assert await spawned.wait() == ProcessStatus("signalled", signal=9)
