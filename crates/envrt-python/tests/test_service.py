"""``envrt.Runtime.connect``: the embedded runtime's Lease and Process calls through a real
``envrt serve`` (started here on a state directory of its own, local driver), over its unix
socket and over loopback HTTP; the service's refusals as typed exceptions with its exact
texts; the client's own refusals for what the service has no route for."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

import envrt
from envrt import SyncFile

from service import Service


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    service = Service()
    try:
        service.start()
        yield service
    finally:
        service.remove()


@pytest.fixture(scope="module")
def token(service: Service) -> str:
    return service.token("acme")


async def test_leases_and_execute_through_the_service(service: Service, token: str) -> None:
    async with await envrt.Runtime.connect(service.url, token) as runtime:
        lease = await runtime.acquire("local")
        assert lease.id in [l.id for l in await runtime.leases(statuses=["active"])]
        result = await lease.exec(["sh", "-c", 'printf "%s:" "$X"; cat; echo oops >&2; exit 3'], env={"X": "x"}, input="in")
        assert (result.exit_code, result.stdout, result.stderr) == (3, b"x:in", b"oops\n")
        assert not result.success and not result.timed_out
        seen: list[tuple[str, bytes]] = []
        streamed = await lease.exec(["sh", "-c", "echo one; echo two >&2"], on_output=lambda s, c: seen.append((s, c)))
        assert (streamed.exit_code, streamed.stdout, streamed.stderr) == (0, b"one\n", b"two\n")
        assert b"".join(c for s, c in seen if s == "stdout") == b"one\n"
        assert b"".join(c for s, c in seen if s == "stderr") == b"two\n"
        capped = await lease.exec(["sh", "-c", "printf abcdef"], max_output=3, keep="tail")
        assert (capped.stdout, capped.stdout_truncated) == (b"def", True)
        caps = await lease.capabilities()
        assert caps is not None and caps["persistentProcessSessions"] is True
        released = await lease.release()
        assert released["status"] == "released"
        again = await runtime.lease(lease.id)
        assert again is not None and again.info["status"] == "released"
        assert lease.id not in [l.id for l in await runtime.leases(statuses=["active"])]


async def test_sync_in_and_out_as_tar_streams(service: Service, token: str, tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    (source / "a.txt").write_text("alpha")
    (source / "sub" / "b.bin").write_bytes(bytes(range(256)))
    async with await envrt.Runtime.connect(service.url, token) as runtime:
        async with await runtime.acquire("local") as lease:
            counts = await lease.sync_in(SyncFile(str(source), "data"))
            assert counts[0]["filesTransferred"] == 2
            assert (await lease.exec(["cat", "data/a.txt"])).stdout == b"alpha"
            assert await lease.read_file("data/sub/b.bin") == bytes(range(256))
            assert await lease.read_file("data/a.txt", text=True) == "alpha"
            await lease.sync_out(SyncFile("data", str(tmp_path / "out")))
            assert (tmp_path / "out" / "a.txt").read_text() == "alpha"
            assert (tmp_path / "out" / "sub" / "b.bin").read_bytes() == bytes(range(256))
            await lease.sync_out(SyncFile("data/a.txt", str(tmp_path / "one.txt"), kind="file"))
            assert (tmp_path / "one.txt").read_text() == "alpha"
            with pytest.raises(envrt.EnvrtFileNotFoundError) as missing:
                await lease.read_file("data/nothing")
            assert missing.value.kind in ("source_missing", "file_not_found")


async def test_process_sessions_through_the_service(service: Service, token: str) -> None:
    async with await envrt.Runtime.connect(service.url, token) as runtime:
        async with await runtime.acquire("local") as lease:
            process = await lease.spawn(["sh", "-c", "while read x; do echo got $x; done; echo err >&2"], stdin=True)
            assert process.id.startswith(f"{lease.id}/") and process.status.running
            await process.write("hi\n")
            await process.close_stdin()
            status = await process.wait()
            assert str(status) == "exited(0)"
            output = process.output(0)
            assert await output.read_all() == {"stdout": b"got hi\n", "stderr": b"err\n"}
            assert output.exit is not None and output.exit.exit_code == 0
            chunks = [c async for c in process.output({"stdout": 4, "stderr": 3})]
            assert [(c.stream, c.offset, c.data) for c in chunks if c.stream == "stdout"] == [("stdout", 4, b"hi\n")]
            found = await runtime.process(process.id)
            assert found.id == process.id and found.status.exit_code == 0
            assert [p.id for p in await lease.processes()] == [process.id]

            sleeper = await lease.spawn(["sleep", "600"])
            assert str(await sleeper.wait(0.05)) == "running"
            assert (await sleeper.signal("KILL")).state in ("running", "signalled")
            assert str(await sleeper.wait()) == "signalled(9)"
            with pytest.raises(envrt.EnvrtError) as no_tty:
                await process.resize(24, 80)
            assert (no_tty.value.kind, str(no_tty.value)) == ("process_no_tty", f'Process "{process.id}" has no terminal to resize.')
            with pytest.raises(envrt.EnvrtValueError) as past:
                await process.output({"stdout": 99}).read_all()
            assert past.value.kind == "process_offset_past_end"


async def test_a_terminal_through_the_service(service: Service, token: str) -> None:
    """A process with a terminal, spawned, read, written, resized and interrupted through
    the service: it has a controlling terminal of the size asked for, a resize delivers
    SIGWINCH and the new size, and Ctrl-C written to the terminal interrupts the foreground
    job (the shell's trap runs, then it exits with its own code)."""
    script = (
        "tty; stty size; trap 'stty size' WINCH; trap 'echo interrupted; exit 7' INT; "
        "echo ready; while :; do sleep 0.05; done"
    )
    async with await envrt.Runtime.connect(service.url, token) as runtime:
        async with await runtime.acquire("local") as lease:
            proc = await lease.spawn(["sh", "-c", script], tty=(30, 100))
            assert proc.tty
            seen, resized, interrupted = b"", False, False
            output = proc.output()
            async for chunk in output:
                assert chunk.stream == "tty"
                seen += chunk.data
                if not resized and b"ready\r\n" in seen:
                    await proc.resize(40, 120)
                    resized = True
                if resized and not interrupted and b"40 120\r\n" in seen:
                    await proc.write(b"\x03")
                    interrupted = True
            lines = seen.decode().split("\r\n")
            assert lines[0].startswith("/dev/pts/"), seen
            assert lines[1:3] == ["30 100", "ready"], seen
            # The terminal echoes the interrupt character as "^C" before the trap's line.
            assert lines[3:] == ["40 120", "^Cinterrupted", ""], seen
            assert output.exit == envrt.ProcessStatus("exited", code=7)
            assert (await runtime.process(proc.id)).status == envrt.ProcessStatus("exited", code=7)


async def test_refusals_keep_the_services_exact_texts(service: Service, token: str) -> None:
    async with await envrt.Runtime.connect(service.url, token) as runtime:
        assert await runtime.lease("nope") is None
        with pytest.raises(envrt.EnvrtLookupError) as unknown:
            await runtime.acquire("nowhere")
        assert (unknown.value.kind, str(unknown.value)) == ("environment_not_found", 'Environment "nowhere" was not found.')
        for bad in ("nope/1", "garbage"):
            with pytest.raises(envrt.EnvrtLookupError) as no_process:
                await runtime.process(bad)
            assert (no_process.value.kind, str(no_process.value)) == ("process_not_found", f'Process "{bad}" was not found.')
        lease = await runtime.acquire("local")
        try:
            with pytest.raises(envrt.EnvrtUnsupportedError) as write:
                await lease.write_file("x", "y")
            assert (write.value.kind, str(write.value)) == (
                "service_unsupported",
                "envrt: Lease.write_file (the service syncs whole directories in) is not available through envrt serve",
            )
            with pytest.raises(envrt.EnvrtUnsupportedError) as one_file:
                await lease.sync_in(SyncFile(__file__, "t.py", kind="file"))
            assert str(one_file.value) == (
                "envrt: sync_in of a single file (the service syncs whole directories in) is not available through envrt serve"
            )
            with pytest.raises(envrt.EnvrtUnsupportedError) as company:
                await runtime.acquire("local", company="other")
            assert str(company.value) == (
                "envrt: acquire(company=...) (a lease's tenant is its token's) is not available through envrt serve"
            )
            with pytest.raises(envrt.EnvrtUnsupportedError) as put:
                await runtime.put_environment("e", "local")
            assert str(put.value) == (
                "envrt: Runtime.put_environment (environments are the service's envrt.toml) is not available through envrt serve"
            )
            # Another tenant's lease and process answer as unknown ones.
            process = await lease.spawn(["true"])
            async with await envrt.Runtime.connect(service.url, service.token("other")) as other:
                assert await other.lease(lease.id) is None
                with pytest.raises(envrt.EnvrtLookupError) as theirs:
                    await other.process(process.id)
                assert str(theirs.value) == f'Process "{process.id}" was not found.'
                with pytest.raises(envrt.EnvrtLookupError) as exec_theirs:
                    await envrt.Lease(other, lease.info).exec(["true"])
                assert str(exec_theirs.value) == f'Lease "{lease.id}" was not found.'
        finally:
            await lease.release()


async def test_life_cycle_calls_without_a_route_are_refused_before_any_request(service: Service, token: str) -> None:
    def text(what: str) -> str:
        return f"envrt: {what} is not available through envrt serve"

    async with await envrt.Runtime.connect(service.url, token) as runtime:
        before = {l.id for l in await runtime.leases(statuses=["active"])}
        lease = await runtime.acquire("local")
        try:
            calls = [
                ("Lease.pause", lease.pause()),
                ("Lease.unpause", lease.unpause()),
                ("Lease.fork", lease.fork(2)),
                ("Lease.keep_alive", lease.keep_alive()),
                ("Lease.set_idle_timeout", lease.set_idle_timeout(60)),
                ("Lease.expose", lease.expose(8080)),
                ("Runtime.release_matching", runtime.release_matching(scope="agent-1")),
                ("acquire(scope=..., reuse=..., labels=...)", runtime.acquire("local", scope="a", reuse="scope")),
                ("acquire(scope=..., reuse=..., labels=...)", runtime.acquire("local", labels={"team": "red"})),
                ("acquire(idle_timeout=...)", runtime.acquire("local", idle_timeout=60)),
                (
                    "Runtime.put_environment (environments are the service's envrt.toml)",
                    runtime.put_environment("e", "local", ready_command=["true"]),
                ),
            ]
            for what, call in calls:
                with pytest.raises(envrt.EnvrtUnsupportedError) as refused:
                    await call
                assert (refused.value.kind, str(refused.value)) == ("service_unsupported", text(what))
            with pytest.raises(envrt.EnvrtUnsupportedError) as refused:
                lease.close_exposed()
            assert str(refused.value) == text("Lease.close_exposed")
            # Nothing reached the service: the lease is as it was, and the only lease.
            again = await runtime.lease(lease.id)
            assert again is not None and again.info["status"] == "active" and not again.paused
            assert {l.id for l in await runtime.leases(statuses=["active"])} == before | {lease.id}
            assert (await lease.exec(["echo", "running"])).stdout == b"running\n"
        finally:
            await lease.release()


async def test_tokens_are_refused_with_exact_texts(service: Service) -> None:
    for bad in ("", "envrt_nope_nope", "garbage"):
        async with await envrt.Runtime.connect(service.url, bad) as runtime:
            with pytest.raises(envrt.EnvrtPermissionError) as refused:
                await runtime.leases()
            assert (refused.value.kind, str(refused.value)) == ("unauthenticated", "A valid bearer token is required.")
    read_only = service.token("acme", "leases:read")
    token_id = read_only.split("_")[1]
    async with await envrt.Runtime.connect(service.url, read_only) as runtime:
        assert isinstance(await runtime.leases(), list)
        with pytest.raises(envrt.EnvrtPermissionError) as forbidden:
            await runtime.acquire("local")
        assert (forbidden.value.kind, str(forbidden.value)) == (
            "forbidden",
            f'Token "{token_id}" does not allow the operation "leases:write".',
        )


async def test_a_service_url_that_is_none_is_refused() -> None:
    with pytest.raises(envrt.EnvrtValueError) as bad:
        await envrt.Runtime.connect("ftp://x", "t")
    assert str(bad.value) == (
        'envrt: "ftp://x" is not a service URL: give unix:PATH, an absolute socket path, '
        "http://HOST:PORT or https://HOST:PORT"
    )


async def test_loopback_http_and_a_bare_socket_path() -> None:
    served = Service()
    try:
        url = served.start(listen="127.0.0.1:0")
        assert url.startswith("http://127.0.0.1:")
        async with await envrt.Runtime.connect(url, served.token("acme")) as runtime:
            async with await runtime.acquire("local") as lease:
                assert (await lease.exec(["echo", "tcp"])).stdout == b"tcp\n"
    finally:
        served.remove()


async def test_a_bare_socket_path_is_a_unix_url(service: Service, token: str) -> None:
    assert service.url == f"unix:{service.socket}"
    async with await envrt.Runtime.connect(os.fspath(service.socket), token) as runtime:
        assert isinstance(await runtime.leases(), list)


async def test_a_service_that_is_not_there_is_unavailable(tmp_path: Path) -> None:
    socket = tmp_path / "none.sock"
    async with await envrt.Runtime.connect(f"unix:{socket}", "t") as runtime:
        with pytest.raises(envrt.EnvrtError) as unreachable:
            await runtime.leases()
    assert unreachable.value.kind == "unavailable"
    assert str(unreachable.value).startswith(f"envrt: cannot reach the service at unix:{socket}: ")
