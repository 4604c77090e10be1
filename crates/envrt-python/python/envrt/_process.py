"""Persistent process sessions (contract section 9): :class:`Process`, its output as
:class:`OutputChunk` values, and its :class:`ProcessStatus`.

A process is spawned with :meth:`envrt.Lease.spawn` and outlives the program that spawned
it: any program on the same lease store finds it again by its id (``{lease id}/{n}``)
with :meth:`envrt.Runtime.process`. Refusals are :class:`envrt.EnvrtError` values whose
``str()`` is the contract's exact text and whose ``kind`` is ``process_not_found``,
``process_exited``, ``process_offset_dropped``, ...
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterator, Mapping


@dataclass(frozen=True)
class ProcessStatus:
    """A process's status: ``state`` is ``running``, ``exited``, ``signalled`` or ``lost``."""

    state: str
    code: int | None = None
    """The exit code, when ``state`` is ``exited``."""
    signal: int | None = None
    """The signal number, when ``state`` is ``signalled``."""

    @classmethod
    def from_contract(cls, value: Mapping[str, Any]) -> "ProcessStatus":
        return cls(str(value["state"]), value.get("code"), value.get("signal"))

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def exit_code(self) -> int | None:
        """The shell's view of the end: the code, ``128 + n`` for signal ``n``; ``None``
        while running or lost."""
        if self.state == "exited":
            return self.code
        if self.state == "signalled" and self.signal is not None:
            return 128 + self.signal
        return None

    def __str__(self) -> str:
        if self.state == "exited":
            return f"exited({self.code})"
        if self.state == "signalled":
            return f"signalled({self.signal})"
        return self.state


@dataclass(frozen=True)
class OutputChunk:
    """Bytes of one stream (``stdout``, ``stderr`` or ``tty``) at their absolute offset."""

    stream: str
    offset: int
    data: bytes


class Process:
    """A persistent process. ``record`` is the last process record seen (the contract's
    field names: ``id``, ``pid``, ``argv``, ``tty``, ``status``, ``streams``...)."""

    def __init__(self, verbs: Any, record: dict[str, Any]) -> None:
        self._verbs = verbs
        self.record = record

    @property
    def id(self) -> str:
        """``{lease id}/{n}``: finds the process from any program on the same store."""
        return str(self.record["id"])

    @property
    def pid(self) -> int:
        """The pid as the lease sees it (also its process group id)."""
        return int(self.record["pid"])

    @property
    def tty(self) -> bool:
        return bool(self.record.get("tty"))

    @property
    def status(self) -> ProcessStatus:
        """The status in :attr:`record` (refreshed by :meth:`info`, :meth:`signal`,
        :meth:`wait` and the end of :meth:`output`)."""
        return ProcessStatus.from_contract(self.record["status"])

    def __repr__(self) -> str:
        return f"Process(id={self.id!r}, pid={self.pid}, status={str(self.status)!r})"

    async def info(self) -> dict[str, Any]:
        """The process record as it is now (also kept in :attr:`record`)."""
        self.record = json.loads(await self._verbs.process(self.id))
        return self.record

    def output(self, from_offset: int | Mapping[str, int] | None = None) -> "ProcessOutput":
        """The output as an async iterator of :class:`OutputChunk`, live until the process
        ends. ``from_offset``: an offset for every stream the process has, or per stream
        (``{"stdout": 5}``); by default each stream starts at its oldest byte held. An
        offset no longer held, or past the end, raises :class:`envrt.EnvrtError`."""
        return ProcessOutput(self, from_offset)

    async def write(self, data: str | bytes) -> None:
        """Writes to the process's stdin (spawned with ``stdin=True``) or terminal."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        await self._verbs.write_stdin(self.id, raw)

    async def close_stdin(self) -> None:
        """Ends the process's stdin (EOF)."""
        await self._verbs.close_stdin(self.id)

    async def signal(self, signal: str | int) -> ProcessStatus:
        """Sends ``signal`` (``"TERM"``, ``"SIGTERM"`` or a number) to the process group."""
        self.record = json.loads(await self._verbs.signal(self.id, str(signal)))
        return self.status

    async def resize(self, rows: int, cols: int) -> None:
        """Resizes the process's terminal."""
        await self._verbs.resize(self.id, rows, cols)

    async def wait(self, timeout: float | None = None) -> ProcessStatus:
        """Waits for the end, at most ``timeout`` seconds (forever when ``None``); the
        status is still ``running`` when the timeout passed first."""
        status = ProcessStatus.from_contract(json.loads(await self._verbs.wait(self.id, timeout)))
        self.record = {**self.record, "status": _contract(status)}
        return status


def _contract(status: ProcessStatus) -> dict[str, Any]:
    out: dict[str, Any] = {"state": status.state}
    if status.code is not None:
        out["code"] = status.code
    if status.signal is not None:
        out["signal"] = status.signal
    return out


_STREAMS = ("stdout", "stderr", "tty")


def _check_offsets(from_offset: int | Mapping[str, int] | None) -> None:
    """Refuses what no process could hold: a stream name that is none of the three, an
    offset that is not a whole number of bytes from 0."""
    from ._errors import EnvrtValueError

    offsets = {} if from_offset is None else from_offset if isinstance(from_offset, Mapping) else {"": from_offset}
    for stream, offset in offsets.items():
        if stream and stream not in _STREAMS:
            raise EnvrtValueError(f'unknown stream "{stream}": expected stdout, stderr or tty', "invalid_input")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise EnvrtValueError(f"an output offset is a byte count from 0, not {offset!r}", "invalid_input")


class ProcessOutput:
    """``async for chunk in process.output()``: chunks in order until the process ends;
    then :attr:`exit` holds its final status (and the process's record is updated)."""

    def __init__(self, process: Process, from_offset: int | Mapping[str, int] | None) -> None:
        _check_offsets(from_offset)
        self._process = process
        self._from = from_offset
        self._native: Any = None
        self.exit: ProcessStatus | None = None
        """The final status, once the iteration ended."""

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self

    async def __anext__(self) -> OutputChunk:
        if self._native is None:
            every = self._from if isinstance(self._from, int) else None
            per_stream = None if self._from is None or every is not None else json.dumps(dict(self._from))
            self._native = await self._process._verbs.output(self._process.id, every, per_stream)
        event = await self._native.next()
        if event is None:
            raise StopAsyncIteration
        kind, stream, offset, data, info = event
        if kind == "exit":
            self._process.record = json.loads(info)
            self.exit = self._process.status
            raise StopAsyncIteration
        return OutputChunk(stream, offset, data)

    async def read_all(self) -> dict[str, bytes]:
        """Every chunk until the end, joined per stream."""
        out: dict[str, bytes] = {}
        async for chunk in self:
            out[chunk.stream] = out.get(chunk.stream, b"") + chunk.data
        return out
