"""The envrt package against real drivers: structured exec, files, sync, duplex,
capabilities, life cycle, and exceptions that carry the contract's exact texts."""

from __future__ import annotations

from pathlib import Path

import pytest

import envrt
from envrt._errors import from_native


async def test_exec_gives_a_structured_result(site) -> None:
    async with await site.acquire() as lease:
        result = await lease.exec(["sh", "-c", "printf out; printf err >&2; exit 7"])
        assert (result.exit_code, result.signal, result.timed_out) == (7, None, False)
        assert (result.stdout, result.stderr) == (b"out", b"err")
        assert (result.stdout_truncated, result.stderr_truncated) == (False, False)
        assert result.duration > 0
        assert not result.success
        assert "exit_code=7" in repr(result)


async def test_exec_reports_signal_and_timeout(site) -> None:
    async with await site.acquire() as lease:
        killed = await lease.exec(["sh", "-c", "kill -KILL $$"])
        # The Docker engine reports a signal death as 128 + the signal number.
        expected = (137, None) if site.driver == "docker" else (None, "SIGKILL")
        assert (killed.exit_code, killed.signal, killed.timed_out) == (*expected, False)
        slow = await lease.exec(["sleep", "30"], timeout=0.5)
        assert slow.timed_out
        assert not slow.success


async def test_truncation_is_reported_per_stream(site) -> None:
    async with await site.acquire() as lease:
        result = await lease.exec(["sh", "-c", "printf 0123456789; printf ab >&2"], max_output=4)
        assert (result.stdout, result.stdout_truncated) == (b"0123", True)
        assert (result.stderr, result.stderr_truncated) == (b"ab", False)


async def test_truncation_can_keep_the_tail(site) -> None:
    async with await site.acquire() as lease:
        result = await lease.exec(["sh", "-c", "printf 0123456789; printf ab >&2"], max_output=4, keep="tail")
        assert (result.stdout, result.stdout_truncated) == (b"6789", True)
        assert (result.stderr, result.stderr_truncated) == (b"ab", False)
        with pytest.raises(ValueError, match='unknown output part "middle"'):
            await lease.exec(["true"], keep="middle")  # type: ignore[arg-type]


async def test_streaming_callback_sees_every_chunk_in_order(site) -> None:
    chunks: list[tuple[str, bytes]] = []
    async with await site.acquire() as lease:
        result = await lease.exec(
            ["sh", "-c", "for i in 1 2 3; do echo line$i; done; echo oops >&2"],
            on_output=lambda stream, chunk: chunks.append((stream, chunk)),
        )
    assert b"".join(c for s, c in chunks if s == "stdout") == result.stdout == b"line1\nline2\nline3\n"
    assert b"".join(c for s, c in chunks if s == "stderr") == b"oops\n"


async def test_exec_takes_input_env_and_cwd(site) -> None:
    async with await site.acquire() as lease:
        await lease.exec(["mkdir", "-p", "sub"])
        result = await lease.exec(
            ["sh", "-c", 'cat; printf " $GREETING "; basename "$PWD"'],
            input="piped",
            env={"GREETING": "hello"},
            cwd="sub",
        )
        assert result.stdout == b"piped hello sub\n"


async def test_files_round_trip_as_bytes_and_text(site) -> None:
    every_byte = bytes(range(256)) * 64
    async with await site.acquire() as lease:
        await lease.write_file("deep/dir/blob.bin", every_byte)
        assert await lease.read_file("deep/dir/blob.bin") == every_byte
        await lease.write_file("text.txt", "grüße ✓\n")
        assert await lease.read_file("text.txt", text=True) == "grüße ✓\n"
        await lease.write_file("empty", b"")
        assert await lease.read_file("empty") == b""
        await lease.write_file("script.sh", "#!/bin/sh\necho ran\n", mode=0o755)
        assert (await lease.exec(["./script.sh"])).stdout == b"ran\n"


async def test_file_errors_are_python_classes_with_the_contract_texts(site) -> None:
    async with await site.acquire() as lease:
        for name in ("nonexistent", "no/such/parent"):
            with pytest.raises(FileNotFoundError) as missing:
                await lease.read_file(name)
            assert str(missing.value) == f'File "{name}" does not exist.'
            assert missing.value.kind == "file_not_found"

        await lease.exec(["mkdir", "adir"])
        await lease.write_file("adir/keep", "kept")
        with pytest.raises(IsADirectoryError) as directory:
            await lease.read_file("adir")
        assert str(directory.value) == 'Path "adir" is a directory, not a file.'
        assert directory.value.kind == "is_a_directory"
        # A file does not replace a directory: the tree is still there.
        with pytest.raises(IsADirectoryError) as over:
            await lease.write_file("adir", "lost")
        assert str(over.value) == 'Path "adir" is a directory, not a file.'
        assert await lease.read_file("adir/keep", text=True) == "kept"

        with pytest.raises(PermissionError) as outside:
            await lease.read_file("../escape")
        assert str(outside.value) == 'Path "../escape" is outside the lease workspace.'
        assert outside.value.kind == "path_outside_workspace"
        assert isinstance(outside.value, envrt.EnvrtError)
        if site.driver == "local":
            # The local driver's default path scope still refuses the host's own files.
            with pytest.raises(PermissionError) as host:
                await lease.read_file("/etc/hostname")
            assert str(host.value) == 'Path "/etc/hostname" is outside the lease workspace.'


async def test_files_are_read_and_written_with_the_lease_users_permissions(site) -> None:
    async with await site.acquire() as lease:
        if (await lease.exec(["id", "-u"])).stdout.strip() == b"0":
            pytest.skip("SKIPPED: this lease's commands run as root, whom file modes do not stop")
        await lease.write_file("ro.txt", "keep")
        await lease.exec(["chmod", "a-w", "ro.txt"])
        with pytest.raises(PermissionError) as write:
            await lease.write_file("ro.txt", "lost")
        assert str(write.value) == 'The lease\'s user may not write "ro.txt".'
        assert write.value.kind == "permission_denied"
        await lease.exec(["chmod", "u+w,a-r", "ro.txt"])
        with pytest.raises(PermissionError) as read:
            await lease.read_file("ro.txt")
        assert str(read.value) == 'The lease\'s user may not read "ro.txt".'
        await lease.exec(["chmod", "u+r", "ro.txt"])
        assert await lease.read_file("ro.txt", text=True) == "keep"


async def test_sync_in_and_out_move_trees(site, tmp_path: Path) -> None:
    source = tmp_path / "in"
    (source / "nested").mkdir(parents=True)
    (source / "a.txt").write_text("A")
    (source / "nested" / "b.txt").write_text("BB")
    (source / "skip.log").write_text("no")
    async with await site.acquire() as lease:
        counts = await lease.sync_in(envrt.SyncFile(str(source), "project", exclude=["*.log"]))
        assert counts[0]["filesTransferred"] == 2
        assert counts[0]["bytesTransferred"] == 3
        await lease.exec(["sh", "-c", "echo made > project/nested/c.txt"])
        out = tmp_path / "out"
        await lease.sync_out(envrt.SyncOperation([envrt.SyncFile("project", str(out))], operation_id="back"))
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "a.txt",
        "nested/b.txt",
        "nested/c.txt",
    ]
    assert (out / "nested" / "c.txt").read_text() == "made\n"


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


async def test_sync_out_merges_into_a_host_directory_and_sync_in_will_not_replace_one(site, tmp_path: Path) -> None:
    """Like cp -r and docker cp (and envrt cp): what the user did not name is not deleted;
    replace=True is the contract's whole replacement."""
    host = tmp_path / "hostdir"
    (host / "sub").mkdir(parents=True)
    (host / "precious.txt").write_text("mine")
    (host / "sub" / "mine.txt").write_text("m")
    (tmp_path / "a-file").write_text("f")
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.txt").write_text("A")
    async with await site.acquire() as lease:
        made = await lease.exec(["sh", "-c", "mkdir -p d/sub dest && echo new > d/new.txt && echo n > d/sub/n.txt && echo old > dest/old.txt"])
        assert made.exit_code == 0, made.stderr
        await lease.sync_out(envrt.SyncFile("d", str(host)))
        assert _tree(host) == {"new.txt": "new\n", "precious.txt": "mine", "sub/mine.txt": "m", "sub/n.txt": "n\n"}
        assert [p.name for p in host.iterdir() if p.name.startswith(".envrt-sync-")] == []
        with pytest.raises(envrt.EnvrtValueError) as over_file:
            await lease.sync_out(envrt.SyncFile("d", str(tmp_path / "a-file")))
        assert str(over_file.value) == (
            f'envrt: "{tmp_path / "a-file"}" exists and is not a directory: sync_out does not replace it; '
            "pass SyncFile(..., replace=True) to replace it"
        )
        await lease.sync_out(envrt.SyncFile("d", str(host), replace=True))
        assert _tree(host) == {"new.txt": "new\n", "sub/n.txt": "n\n"}

        with pytest.raises(envrt.EnvrtValueError) as refused:
            await lease.sync_in(envrt.SyncFile(str(source), "dest"))
        assert str(refused.value) == (
            'envrt: "dest" already exists in the lease and sync_in would replace it whole; '
            "pass SyncFile(..., replace=True) to replace it, or sync into a path that does not exist"
        )
        assert await lease.read_file("dest/old.txt", text=True) == "old\n"
        await lease.sync_in(envrt.SyncFile(str(source), "fresh"))
        await lease.sync_in(envrt.SyncFile(str(source), "dest", replace=True))
        listed = await lease.exec(["ls", "dest", "fresh"])
        assert listed.stdout == b"dest:\na.txt\n\nfresh:\na.txt\n", listed


async def test_duplex_is_an_async_stream_where_granted(site) -> None:
    async with await site.acquire() as lease:
        capabilities = await lease.capabilities()
        assert capabilities is not None and len(capabilities) == 9
        if not capabilities["duplexCommandStream"]:
            with pytest.raises(NotImplementedError) as refused:
                await lease.open_duplex(["cat"])
            assert str(refused.value) == f'Environment driver "{site.driver}" does not support duplex channels.'
            return
        async with await lease.open_duplex(["cat"]) as stream:
            await stream.write("ping\n")
            echoed = b""
            async for chunk in stream:
                echoed += chunk
                if echoed.endswith(b"ping\n"):
                    break
            await stream.close_input()
            assert echoed == b"ping\n"
            assert await stream.wait() == 0


async def test_release_destroy_and_lookup_errors(site) -> None:
    lease = await site.acquire()
    assert lease.provider == site.driver
    assert lease.workspace
    info = await lease.release()
    assert info["status"] == "released"
    with pytest.raises(envrt.EnvrtError) as inactive:
        await lease.exec(["true"])
    assert str(inactive.value) == f'Lease "{lease.id}" is not active (status: released).'
    assert inactive.value.kind == "lease_not_active"

    second = await site.acquire()
    destroyed = await second.destroy()
    assert destroyed["id"] == second.id

    assert await site.runtime.lease("no-such-lease") is None
    with pytest.raises(LookupError) as unknown:
        await site.runtime.acquire("no-such-environment")
    assert str(unknown.value) == 'Environment "no-such-environment" was not found.'


async def test_bad_input_is_refused_with_clear_errors(site) -> None:
    async with await site.acquire() as lease:
        with pytest.raises(ValueError, match="a command needs at least a program"):
            await lease.exec([])
        with pytest.raises(ValueError, match="invalid duration -1 s"):
            await lease.exec(["true"], timeout=-1)
        with pytest.raises(ValueError) as status:
            await lease.release("active")
        assert str(status.value) == 'A lease cannot be released with status "active"; use released, failed or expired.'


def test_error_kinds_pick_python_classes() -> None:
    cases = {
        ("source_missing", None): FileNotFoundError,
        ("io", "not_found"): FileNotFoundError,
        ("io", "permission_denied"): PermissionError,
        ("tenant_mismatch", None): PermissionError,
        ("source_kind", "is_a_directory"): IsADirectoryError,
        ("source_kind", "not_a_directory"): NotADirectoryError,
        ("lease_expired", None): TimeoutError,
        ("lease_not_found", None): LookupError,
        ("sync_unsupported", None): NotImplementedError,
        ("invalid_input", None): ValueError,
    }
    for (kind, os_class), expected in cases.items():
        error = from_native(kind, "exact text", os_class)
        assert isinstance(error, expected) and isinstance(error, envrt.EnvrtError), (kind, os_class)
        assert (str(error), error.kind) == ("exact text", kind)
    plain = from_native("store", "disk full", None)
    assert type(plain) is envrt.EnvrtError


async def test_a_runtime_refuses_to_acquire_for_another_tenant(tmp_path: Path) -> None:
    runtime = await envrt.Runtime.create(local_root=tmp_path / "leases", database=tmp_path / "leases.db", company="acme")
    with pytest.raises(PermissionError) as refused:
        await runtime.acquire("local", company="globex")
    assert (str(refused.value), refused.value.kind) == (
        'Tenant "globex" is not this runtime\'s tenant "acme".',
        "tenant_mismatch",
    )
    assert await runtime.leases() == []
    async with await runtime.acquire("local") as lease:
        assert (await lease.exec(["echo", "ok"])).stdout == b"ok\n"


def _running_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


async def test_cancelling_an_exec_stops_the_command_on_local(site_root: Path) -> None:
    import asyncio
    import uuid

    from conftest import get_site

    site = get_site("local", site_root)
    marker = f"envrt-cancel-{uuid.uuid4().hex}"
    async with await site.acquire() as lease:
        task = asyncio.ensure_future(lease.exec(["sh", "-c", f"sleep 30 # {marker}"]))
        for _ in range(100):  # bounded: until the command is running
            if _running_with(marker):
                break
            await asyncio.sleep(0.05)
        assert _running_with(marker), "the command never started"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(200):  # bounded: the dropped call kills the command
            if not _running_with(marker):
                break
            await asyncio.sleep(0.05)
        assert _running_with(marker) == []


async def test_an_exec_cancelled_by_wait_for_stops_the_command_on_docker(site_root: Path) -> None:
    import asyncio

    from conftest import get_site

    site = get_site("docker", site_root)
    async with await site.acquire() as lease:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(lease.exec(["sleep", "301"]), 1)
        # The contract's bound for a dropped execute: 10 s.
        for _ in range(100):
            left = await lease.exec(["sh", "-c", "ps -o args | grep -x 'sleep 301' || true"])
            if left.stdout == b"":
                break
            await asyncio.sleep(0.1)
        assert left.stdout == b""
        assert (await lease.exec(["echo", "ok"])).stdout == b"ok\n"
