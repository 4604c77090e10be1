"""Inspect's ``exec_remote`` on envrt's own persistent processes (contract section 9),
where the lease grants ``persistentProcessSessions``: the command is spawned with
:meth:`envrt.Lease.spawn` and its output streamed from the process's held output, with no
tool binary injected into the sandbox and no polling. Events, ``write_stdin``,
``close_stdin``, ``kill()`` and cancellation (which kills the process) follow Inspect's
``ExecRemoteProcess``; Inspect's own implementation serves every other lease."""

from __future__ import annotations

import codecs
from typing import Any

import anyio
from inspect_ai.util import ExecResult
from inspect_ai.util._sandbox.exec_remote import (
    ExecCompleted,
    ExecOutput,
    ExecRemoteAwaitableOptions,
    ExecRemoteCommonOptions,
    ExecRemoteProcess,
    ExecRemoteStreamingOptions,
    ExecStderr,
    ExecStdout,
)

from ._errors import EnvrtError
from ._process import Process
from ._runtime import Lease


class SpawnedProcess(ExecRemoteProcess):
    """An :class:`ExecRemoteProcess` backed by an envrt process (its output read from
    offset 0, a terminal's stream reported as stdout)."""

    def __init__(self, process: Process, stdin_open: bool) -> None:  # noqa: D107 - no RPC transport
        self._process = process
        self._pid = process.pid
        self._stdin_open = stdin_open
        self._output = process.output(from_offset=0)
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")(errors="replace") for name in ("stdout", "stderr")}
        self._completed = False
        self._killed = False
        self._iteration_started = False
        self._pending_events: list[ExecOutput] = []

    @property
    def process(self) -> Process:
        """The envrt process behind this handle."""
        return self._process

    def __aiter__(self) -> "SpawnedProcess":
        if self._iteration_started:
            raise RuntimeError("ExecRemoteProcess can only be iterated once")
        self._iteration_started = True
        return self

    def _event(self, stream: str, text: str) -> ExecOutput:
        return ExecStderr(data=text) if stream == "stderr" else ExecStdout(data=text)

    async def __anext__(self) -> ExecOutput:
        if self._pending_events:
            return self._pending_events.pop(0)
        if self._completed or self._killed:
            raise StopAsyncIteration
        try:
            while True:
                try:
                    chunk = await self._output.__anext__()
                except StopAsyncIteration:
                    return self._finish()
                stream = "stderr" if chunk.stream == "stderr" else "stdout"
                text = self._decoders[stream].decode(chunk.data)
                if text:
                    return self._event(stream, text)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self.kill()
            raise

    def _finish(self) -> ExecOutput:
        """The end of the output: what the decoders still hold, then the completion (none
        for a process this handle killed, as Inspect's ``kill()`` says)."""
        events: list[ExecOutput] = []
        for stream, decoder in self._decoders.items():
            rest = decoder.decode(b"", final=True)
            if rest:
                events.append(self._event(stream, rest))
        if not self._killed:
            self._completed = True
            status = self._output.exit
            code = status.exit_code if status is not None else None
            events.append(ExecCompleted(exit_code=-1 if code is None else code))
        if not events:
            raise StopAsyncIteration
        self._pending_events = events[1:]
        return events[0]

    def _require_stdin(self, verb: str) -> None:
        if not self._stdin_open:
            raise RuntimeError(f"{verb}() requires stdin_open=True in ExecRemoteStreamingOptions")

    async def write_stdin(self, data: str | bytes) -> None:
        self._require_stdin("write_stdin")
        if self._completed or self._killed:
            raise RuntimeError("Cannot write to stdin: process has terminated")
        try:
            await self._process.write(data)
        except EnvrtError as error:
            if error.kind == "process_exited":
                raise RuntimeError("Cannot write to stdin: process has terminated") from error
            raise

    async def close_stdin(self) -> None:
        self._require_stdin("close_stdin")
        if self._completed or self._killed:
            return
        try:
            await self._process.close_stdin()
        except EnvrtError as error:
            if error.kind != "process_exited":
                raise

    async def kill(self) -> None:
        if self._completed or self._killed:
            return
        self._killed = True
        try:
            await self._process.signal("KILL")
        except EnvrtError as error:
            if error.kind != "process_exited":
                raise


async def spawn_remote(lease: Lease, cmd: list[str], options: ExecRemoteCommonOptions) -> SpawnedProcess:
    """Starts ``cmd`` on the lease; answers once it runs. ``input`` is written to its stdin
    and the stdin closed, unless the options keep it open."""
    stdin_open = isinstance(options, ExecRemoteStreamingOptions) and options.stdin_open
    process = await lease.spawn(
        cmd, stdin=stdin_open or options.input is not None, env=options.env, cwd=options.cwd
    )
    handle = SpawnedProcess(process, stdin_open)
    if options.input is not None:
        await process.write(options.input)
        if not stdin_open:
            await process.close_stdin()
    return handle


async def run_remote(lease: Lease, cmd: list[str], options: ExecRemoteCommonOptions) -> ExecResult[str]:
    """``exec_remote(..., stream=False)``: the output kept to Inspect's limit (its newest
    bytes), ``TimeoutError`` after ``timeout`` with the process killed."""
    from inspect_ai.util._sandbox.limits import SandboxEnvironmentLimits
    from inspect_ai.util._subprocess import CircularByteBuffer

    proc = await spawn_remote(lease, cmd, options)
    limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
    buffers: dict[str, Any] = {"stdout": CircularByteBuffer(limit), "stderr": CircularByteBuffer(limit)}
    timeout = options.timeout if isinstance(options, ExecRemoteAwaitableOptions) else None

    def text(name: str) -> str:
        return buffers[name].getvalue().decode("utf-8", errors="replace")

    try:
        with anyio.fail_after(timeout):
            async for event in proc:
                if isinstance(event, ExecCompleted):
                    return ExecResult[str](
                        success=event.success, returncode=event.exit_code, stdout=text("stdout"), stderr=text("stderr")
                    )
                buffers[event.type].write(event.data.encode("utf-8"))
    except TimeoutError:
        with anyio.CancelScope(shield=True):
            await proc.kill()
        raise
    return ExecResult[str](success=False, returncode=-1, stdout=text("stdout"), stderr=text("stderr"))
