"""Life-cycle v2 through the package (contract section 8): pause and unpause, fork, and
their refusals, on real drivers (local always; Docker as the rest of the suite runs it;
the sandbox's refusals with the reference worker)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import envrt
from conftest import get_site

@pytest.fixture
def local(site_root: Path):
    return get_site("local", site_root)


# A loop that notices its own freeze: each turn it compares the clock with the last turn
# and writes `gap` when at least 4 s passed (a turn takes about 1 s; only a stopped process
# misses four). It counts into `counter` and ends when `stop` exists, printing the gaps.
WITNESS = (
    "prev=$(date +%s); i=0; : > started; "
    'while [ ! -e stop ]; do now=$(date +%s); if [ $((now - prev)) -ge 4 ]; then echo gap >> gaps; fi; '
    "prev=$now; i=$((i + 1)); echo $i > counter; sleep 1; done; cat gaps 2>/dev/null; echo done"
)
# How long the lease stays paused: four turns of WITNESS and a margin.
PAUSE_WINDOW = 6.0


async def _until_file(lease: envrt.Lease, name: str, deadline: float = 60.0) -> None:
    """Polls (bounded) until the lease's workspace has `name`."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while (await lease.exec(["sh", "-c", f"test -e {name}"])).exit_code != 0:
        assert loop.time() < end, f"{name} did not appear within {deadline} s"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("driver", ["local", "docker"])
async def test_pause_stops_a_counter_and_unpause_continues_it(driver: str, site_root: Path) -> None:
    site = get_site(driver, site_root)
    async with await site.acquire() as lease:
        loop_task = asyncio.ensure_future(lease.exec(["sh", "-c", WITNESS]))
        await _until_file(lease, "counter")
        await lease.pause()
        assert lease.paused
        stored = await site.runtime.lease(lease.id)
        assert stored is not None and stored.paused and stored.info["status"] == "active"
        if driver == "local" and lease.workspace:
            # The host sees the workspace: the counter does not move while paused.
            counter = Path(lease.workspace) / "counter"
            before = counter.read_text()
            await asyncio.sleep(PAUSE_WINDOW)
            assert counter.read_text() == before
        else:
            await asyncio.sleep(PAUSE_WINDOW)
        await lease.unpause()
        assert not lease.paused
        # It continues: the counter moves again, and the loop saw its own freeze.
        first = (await lease.exec(["cat", "counter"])).stdout
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while (await lease.exec(["cat", "counter"])).stdout == first:
            assert loop.time() < end, "the counter did not move after unpause"
            await asyncio.sleep(0.2)
        await lease.exec(["touch", "stop"])
        result = await asyncio.wait_for(loop_task, 60)
        assert result.exit_code == 0
        assert b"gap\n" in result.stdout and result.stdout.endswith(b"done\n")


@pytest.mark.parametrize("driver", ["local", "docker"])
async def test_a_paused_lease_refuses_work_with_the_exact_text_and_can_be_released(
    driver: str, site_root: Path
) -> None:
    site = get_site(driver, site_root)
    lease = await site.acquire()
    await lease.pause()
    await lease.pause()  # pausing a paused lease changes nothing
    paused = f'Lease "{lease.id}" is paused.'
    with pytest.raises(envrt.EnvrtError) as refused:
        await lease.exec(["true"])
    assert (str(refused.value), refused.value.kind) == (paused, "lease_paused")
    with pytest.raises(envrt.EnvrtError) as refused:
        await lease.read_file("anything")
    assert (str(refused.value), refused.value.kind) == (paused, "lease_paused")
    with pytest.raises(envrt.EnvrtError) as refused:
        await lease.fork(1)
    assert (str(refused.value), refused.value.kind) == (paused, "lease_paused")
    released = await lease.release()
    assert released["status"] == "released"
    assert not lease.paused


@pytest.mark.parametrize("driver", ["local", "docker"])
async def test_fork_copies_see_the_fork_point_and_not_each_others_writes(driver: str, site_root: Path) -> None:
    site = get_site(driver, site_root)
    async with await site.acquire() as source:
        await source.exec(["sh", "-c", "echo fork-point > state"])
        copies = await source.fork(2)
        try:
            assert len({c.id for c in copies} | {source.id}) == 3
            assert [c.forked_from for c in copies] == [source.id, source.id]
            for copy in copies:
                assert (await copy.exec(["cat", "state"])).stdout == b"fork-point\n"
            await copies[0].exec(["sh", "-c", "echo first > state; echo mine > only-first"])
            await source.exec(["sh", "-c", "echo source-later > state"])
            assert (await copies[1].exec(["cat", "state"])).stdout == b"fork-point\n"
            assert (await copies[1].exec(["test", "-e", "only-first"])).exit_code == 1
            assert (await copies[0].exec(["cat", "state"])).stdout == b"first\n"
            assert (await source.exec(["cat", "state"])).stdout == b"source-later\n"
            assert (await source.exec(["test", "-e", "only-first"])).exit_code == 1
        finally:
            for copy in copies:
                await copy.destroy()


async def test_fork_counts_out_of_bounds_are_refused_with_the_facade_texts(local) -> None:
    async with await local.acquire() as lease:
        with pytest.raises(envrt.EnvrtValueError) as refused:
            await lease.fork(0)
        assert str(refused.value) == "Invalid input: a fork needs a count of at least 1"
        with pytest.raises(envrt.EnvrtValueError) as refused:
            await lease.fork(17)
        assert str(refused.value) == "Invalid input: a fork makes at most 16 copies, not 17"
        with pytest.raises(envrt.EnvrtValueError) as refused:
            await lease.fork(-1)
        assert str(refused.value) == "envrt: fork needs a whole count from 1 to 16, not -1"
        assert [l.id for l in await local.runtime.leases(local.environment, ["active"])].count(lease.id) == 1


async def test_the_sandbox_refuses_pause_and_fork_with_the_facade_texts(site_root: Path) -> None:
    sandbox = get_site("sandbox", site_root)
    async with await sandbox.acquire() as lease:
        with pytest.raises(envrt.EnvrtUnsupportedError) as refused:
            await lease.pause()
        assert (str(refused.value), refused.value.kind) == (
            'Environment driver "sandbox" does not support pause.',
            "pause_unsupported",
        )
        with pytest.raises(envrt.EnvrtUnsupportedError) as refused:
            await lease.unpause()
        assert str(refused.value) == 'Environment driver "sandbox" does not support pause.'
        with pytest.raises(envrt.EnvrtUnsupportedError) as refused:
            await lease.fork(2)
        assert (str(refused.value), refused.value.kind) == (
            'Environment driver "sandbox" does not support lease fork.',
            "fork_unsupported",
        )
        # Refused, nothing changed: the lease still runs commands.
        assert (await lease.exec(["echo", "on"])).stdout == b"on\n"
