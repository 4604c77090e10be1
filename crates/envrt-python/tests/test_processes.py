"""Persistent process sessions (contract section 9) from Python, on the real local driver
and its supervisor ``envrt-agent``: replay from offset 0 and from the middle, stdin with
EOF, signals, terminal size, a process found from a second runtime on the same store, and
every refusal with the contract's exact text and kind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import envrt
from envrt import ProcessStatus

from conftest import get_site


@pytest.fixture
def local(site_root: Path):
    return get_site("local", site_root)


@pytest.fixture
def short_dir():
    """A directory with a short path: the supervisor's socket lives under the local root,
    and a unix socket's path is bounded to 107 bytes (pytest's tmp_path is too long)."""
    path = Path(tempfile.mkdtemp(prefix="envrt-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def read_until_exit(process: envrt.Process, **kwargs) -> tuple[list[envrt.OutputChunk], ProcessStatus | None]:
    output = process.output(**kwargs)
    chunks = [chunk async for chunk in output]
    return chunks, output.exit


def joined(chunks: list[envrt.OutputChunk], stream: str) -> bytes:
    return b"".join(c.data for c in chunks if c.stream == stream)


async def test_output_replays_from_zero_and_from_a_middle_offset(local) -> None:
    async with await local.acquire() as lease:
        proc = await lease.spawn(["sh", "-c", "printf 0123456789; printf ab >&2"])
        assert proc.id.startswith(f"{lease.id}/") and proc.pid > 0
        assert await proc.wait() == ProcessStatus("exited", code=0)
        chunks, exit = await read_until_exit(proc)
        assert (joined(chunks, "stdout"), joined(chunks, "stderr"), exit) == (
            b"0123456789",
            b"ab",
            ProcessStatus("exited", code=0),
        )
        assert [c.offset for c in chunks if c.stream == "stdout"][0] == 0
        # From the middle, per stream: stderr left out starts at its oldest byte held.
        chunks, exit = await read_until_exit(proc, from_offset={"stdout": 4})
        assert (joined(chunks, "stdout"), joined(chunks, "stderr")) == (b"456789", b"ab")
        assert [c.offset for c in chunks if c.stream == "stdout"][0] == 4
        assert exit is not None and exit.exit_code == 0
        # One offset for every stream the process has.
        assert await proc.output(from_offset=1).read_all() == {"stdout": b"123456789", "stderr": b"b"}
        assert proc.status == ProcessStatus("exited", code=0) and str(proc.status) == "exited(0)"


async def test_stdin_round_trip_ends_with_eof(local) -> None:
    async with await local.acquire() as lease:
        proc = await lease.spawn(["sh", "-c", "cat; echo eof"], stdin=True)
        await proc.write(b"hello ")
        await proc.write("world\n")
        await proc.close_stdin()
        chunks, exit = await read_until_exit(proc)
        assert joined(chunks, "stdout") == b"hello world\neof\n"
        assert exit == ProcessStatus("exited", code=0)


async def test_signal_term_is_reported_as_signalled(local) -> None:
    async with await local.acquire() as lease:
        proc = await lease.spawn(["sleep", "300"])
        assert proc.status.running
        assert await proc.wait(timeout=0.05) == ProcessStatus("running")
        await proc.signal("TERM")
        status = await proc.wait()
        assert (status, status.exit_code, str(status)) == (ProcessStatus("signalled", signal=15), 143, "signalled(15)")
        other = await lease.spawn(["sleep", "300"])
        await other.signal(9)
        assert await other.wait() == ProcessStatus("signalled", signal=9)
        assert [p.id for p in await lease.processes()] == [proc.id, other.id]
        assert [str(p.status) for p in await lease.processes()] == ["signalled(15)", "signalled(9)"]


async def test_a_terminal_has_its_size_and_follows_a_resize(local) -> None:
    async with await local.acquire() as lease:
        proc = await lease.spawn(["sh", "-c", "stty size; read line; stty size"], tty=(30, 100))
        assert proc.tty
        seen, resized = b"", False
        output = proc.output()
        async for chunk in output:
            assert chunk.stream == "tty"
            seen += chunk.data
            if not resized and b"30 100\r\n" in seen:
                await proc.resize(40, 120)
                await proc.write(b"go\n")
                resized = True
        assert b"30 100\r\n" in seen and seen.rstrip().endswith(b"40 120")
        assert output.exit == ProcessStatus("exited", code=0)


async def test_a_second_runtime_on_the_same_store_finds_the_process(short_dir: Path) -> None:
    database = short_dir / "leases.sqlite"
    first = await envrt.Runtime.create(local_root=short_dir / "root", database=database)
    second = await envrt.Runtime.create(local_root=short_dir / "root", database=database)
    lease = await first.acquire("local")
    try:
        proc = await lease.spawn(["sh", "-c", "echo found; cat"], stdin=True, idempotency_key="k1")
        again = await lease.spawn(["sh", "-c", "echo found; cat"], stdin=True, idempotency_key="k1")
        assert again.id == proc.id
        found = await second.process(proc.id)
        assert (found.id, found.pid, found.status.running) == (proc.id, proc.pid, True)
        other_lease = await second.lease(lease.id)
        assert other_lease is not None
        assert [p.id for p in await other_lease.processes()] == [proc.id]
        assert (await other_lease.process(proc.id)).pid == proc.pid
        await found.close_stdin()
        chunks, exit = await read_until_exit(found, from_offset=0)
        assert joined(chunks, "stdout") == b"found\n" and exit == ProcessStatus("exited", code=0)
        assert (await proc.info())["status"] == {"state": "exited", "code": 0}
    finally:
        await lease.release()


async def refused(awaitable, kind: str, cls: type = envrt.EnvrtError) -> str:
    with pytest.raises(cls) as caught:
        await awaitable
    assert caught.value.kind == kind
    return str(caught.value)


async def test_every_refusal_keeps_the_contract_text(local) -> None:
    async with await local.acquire() as lease:
        unknown = f"{lease.id}/999"
        assert await refused(local.runtime.process(unknown), "process_not_found", LookupError) == (
            f'Process "{unknown}" was not found.'
        )
        assert await refused(local.runtime.process("no-slash"), "process_not_found", envrt.EnvrtLookupError) == (
            'Process "no-slash" was not found.'
        )
        assert await refused(lease.spawn([]), "process_spawn_refused", ValueError) == (
            "Cannot spawn the process: argv is empty"
        )

        proc = await lease.spawn(["printf", "0123456789"], keep=4)
        await proc.wait()
        for verb, text in [
            (proc.write(b"x"), "write to its stdin"),
            (proc.close_stdin(), "close its stdin"),
            (proc.signal("TERM"), "signal it"),
        ]:
            assert await refused(verb, "process_exited") == f'Process "{proc.id}" has exited: cannot {text}.'
        assert await refused(proc.resize(10, 10), "process_no_tty") == (
            f'Process "{proc.id}" has no terminal to resize.'
        )
        assert await refused(proc.output(from_offset=0).read_all(), "process_offset_dropped", ValueError) == (
            f"Offset 0 of process \"{proc.id}\"'s stdout is no longer held: "
            "the first offset still held is 6 (6 bytes dropped)."
        )
        assert await proc.output().read_all() == {"stdout": b"6789"}
        assert await refused(proc.output(from_offset={"stdout": 11}).read_all(), "process_offset_past_end") == (
            f"Offset 11 of process \"{proc.id}\"'s stdout is past its end: 10 bytes written so far."
        )

        with pytest.raises(envrt.EnvrtValueError, match='^unknown stream "stdot": expected stdout, stderr or tty$'):
            proc.output(from_offset={"stdot": 1})
        with pytest.raises(ValueError, match="^an output offset is a byte count from 0, not -1$"):
            proc.output(from_offset=-1)
        with pytest.raises(ValueError, match="^an output offset is a byte count from 0, not '3'$"):
            proc.output(from_offset={"stdout": "3"})  # type: ignore[dict-item]
        for kwargs, reason in [
            ({"tty": (0, 80)}, "a terminal must be at least 1 row by 1 column"),
            ({"keep": 0}, "keep of 0 bytes is outside the bound of 1 to 1073741824 bytes"),
            ({"tty": (24, 80), "stdin": True}, "a process with a terminal reads its terminal: stdin must not be piped"),
        ]:
            assert await refused(lease.spawn(["true"], **kwargs), "process_spawn_refused", ValueError) == (
                f"Cannot spawn the process: {reason}"
            )

        keyed = await lease.spawn(["true"], idempotency_key="k2")
        assert await refused(lease.spawn(["false"], idempotency_key="k2"), "process_idempotency_conflict") == (
            f'Idempotency key "k2" was already used for process "{keyed.id}" with a different request.'
        )

        running = await lease.spawn(["sleep", "300"])
        assert await refused(running.write(b"x"), "process_stdin_not_piped") == (
            f'Process "{running.id}" was not started with piped stdin.'
        )
        assert await refused(running.signal("NOPE"), "process_unknown_signal", ValueError) == 'Unknown signal "NOPE".'
        await running.signal("KILL")
        await running.wait()

        tty = await lease.spawn(["sh", "-c", "sleep 300"], tty=(24, 80))
        assert await refused(tty.output(from_offset={"stdout": 3}).read_all(), "process_no_stream") == (
            f'Process "{tty.id}" has no stdout stream.'
        )
        with pytest.raises(ValueError, match="a terminal needs at least 1 row and 1 column, not 0x80"):
            await tty.resize(0, 80)
        await tty.signal("KILL")
        assert await tty.wait() == ProcessStatus("signalled", signal=9)
        assert await refused(tty.resize(30, 90), "process_exited") == (
            f'Process "{tty.id}" has exited: cannot resize its terminal.'
        )


def test_the_package_names_the_supervisor_it_carries(short_dir: Path) -> None:
    """Without ENVRT_AGENT and with no envrt-agent on PATH or beside the interpreter, the
    package points the local driver at the supervisor installed beside it."""
    packaged = Path(envrt.__file__).resolve().parent / "envrt-agent"
    assert os.access(packaged, os.X_OK), f"{packaged} is missing (develop.sh or xtask puts it there)"
    script = (
        "import asyncio, os, envrt\n"
        "async def main():\n"
        f"    runtime = await envrt.Runtime.create(local_root={str(short_dir)!r})\n"
        "    async with await runtime.acquire('local') as lease:\n"
        "        assert (await lease.capabilities())['persistentProcessSessions']\n"
        "        proc = await lease.spawn(['echo', 'supervised'])\n"
        "        print(os.environ['ENVRT_AGENT'])\n"
        "        print((await proc.output().read_all())['stdout'].decode(), end='')\n"
        "asyncio.run(main())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "ENVRT_AGENT"}
    env["PATH"] = "/usr/bin:/bin"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{packaged}\nsupervised\n"
