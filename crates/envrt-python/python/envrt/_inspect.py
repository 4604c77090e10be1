"""The Inspect AI sandbox provider ``"envrt"``.

Use it as ``sandbox="envrt"`` (``./envrt.toml`` when present, else the local driver),
``sandbox=("envrt", "envrt.toml")``, or with an :class:`EnvrtSandboxConfig` to name the
environment and the state directory. Each sample gets its own lease on the configured
default environment (or ``environment``), released when the sample ends (``failed``
when it was interrupted). ``connection()`` gives an ``envrt shell`` command where the
lease grants ``duplexCommandStream``.

Errors keep envrt's exact text, on the exception or as its ``__cause__``.
"""

from __future__ import annotations

import asyncio
import errno
import shlex
import signal
import weakref
from logging import getLogger
from typing import Any, Literal, Union, overload

from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxConnection,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUserUnsupportedError,
    sandboxenv,
)
from inspect_ai.util._sandbox._cli import SANDBOX_CLI
from inspect_ai.util._sandbox.exec_remote import (
    ExecRemoteAwaitableOptions,
    ExecRemoteProcess,
    ExecRemoteStreamingOptions,
)
from pydantic import BaseModel

from ._errors import EnvrtUserRefusedError
from ._runtime import Lease, Runtime

logger = getLogger(__name__)


class EnvrtSandboxConfig(BaseModel, frozen=True):
    """Configuration of the ``envrt`` sandbox provider."""

    config: str | None = None
    """The ``envrt.toml`` (default: ``$ENVRT_CONFIG``, else ``./envrt.toml`` when present)."""
    environment: str | None = None
    """The environment each sample leases (default: the file's ``default``)."""
    state_dir: str | None = None
    """The state directory holding the lease store (default: as the ``envrt`` CLI)."""


def _normalize(config: SandboxEnvironmentConfigType | None) -> EnvrtSandboxConfig:
    if config is None:
        return EnvrtSandboxConfig()
    if isinstance(config, str):
        return EnvrtSandboxConfig(config=config)
    if isinstance(config, EnvrtSandboxConfig):
        return config
    raise ValueError(f"the envrt sandbox takes an envrt.toml path or EnvrtSandboxConfig, not {type(config).__name__}")


_runtimes: dict[tuple[str | None, str | None, str | None], Runtime] = {}
# Leases handed out per task and not yet released by sample_cleanup, for task_cleanup.
_open_leases: dict[str, dict[str, Lease]] = {}
_locks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]" = weakref.WeakKeyDictionary()


async def _runtime(config: EnvrtSandboxConfig) -> Runtime:
    """One runtime per configuration for the whole process (it is not tied to a loop)."""
    key = (config.config, config.state_dir, config.environment)
    loop = asyncio.get_running_loop()
    lock = _locks.setdefault(loop, asyncio.Lock())
    async with lock:
        if key not in _runtimes:
            runtime = await Runtime.from_config(config.config, state_dir=config.state_dir)
            if config.environment:
                runtime.default_environment = config.environment
            _runtimes[key] = runtime
        return _runtimes[key]


def _returncode(exit_code: int | None, signal_name: str | None) -> int:
    if exit_code is not None:
        return exit_code
    try:
        return 128 + int(signal.Signals[signal_name or ""])
    except KeyError:
        return 128 + int(signal.SIGKILL)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


@sandboxenv(name="envrt")
class EnvrtSandboxEnvironment(SandboxEnvironment):
    """One sample's lease on an envrt environment."""

    def __init__(self, lease: Lease) -> None:
        super().__init__()
        self.lease = lease
        self._identity: tuple[str, str] | None = None
        self._processes: bool | None = None

    @classmethod
    def config_files(cls) -> list[str]:
        return ["envrt.toml"]

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return EnvrtSandboxConfig(**config)

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        runtime = await _runtime(_normalize(config))
        for key, why in runtime.skipped_drivers.items():
            logger.warning("envrt: driver %s is not available: %s", key, why)

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        runtime = await _runtime(_normalize(config))
        lease = await runtime.acquire(metadata={"inspectTask": task_name})
        _open_leases.setdefault(task_name, {})[lease.id] = lease
        return {"default": cls(lease)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            lease = environment.as_type(cls).lease
            _open_leases.get(task_name, {}).pop(lease.id, None)
            try:
                await lease.release("failed" if interrupted else "released")
            except Exception as error:
                logger.warning("envrt: releasing lease %s failed: %s", lease.id, error)

    @classmethod
    async def task_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool) -> None:
        """The last chance: releases (as failed) every lease of the task that no
        sample_cleanup released, unless ``--no-sandbox-cleanup`` asked to keep them."""
        leftovers = _open_leases.pop(task_name, {})
        if not cleanup:
            return
        for lease in leftovers.values():
            try:
                await lease.release("failed")
            except Exception as error:
                logger.warning("envrt: releasing lease %s failed: %s", lease.id, error)

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        if user is not None and await self._is_default_user(user):
            user = None
        if cmd and cmd[0] == SANDBOX_CLI and user is None and await self._has_processes():
            # Inspect's tools CLI: its server, started by one exec, must outlive it and be
            # reachable from the next ones. Where the lease grants persistentProcessSessions
            # the CLI runs as an envrt process, inside the lease's long-lived supervisor
            # (on the sandbox, one bwrap of the lease per command otherwise, whose pid and
            # network namespaces end with it).
            from . import _inspect_remote

            options = ExecRemoteAwaitableOptions(input=input, cwd=cwd, env=env or {}, timeout=timeout)
            return await _inspect_remote.run_remote(self.lease, cmd, options)
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        try:
            result = await self.lease.exec(
                cmd, cwd=cwd, env=env, input=input, timeout=timeout, max_output=limit, user=user
            )
        except EnvrtUserRefusedError as error:
            # The driver will not run as that user (local without allowedUsers, a user
            # the container does not have): nothing ran.
            raise SandboxUserUnsupportedError(str(error)) from error
        if result.timed_out:
            raise TimeoutError(f"Command timed out after {timeout} seconds: {shlex.join(cmd)}")
        if result.stdout_truncated or result.stderr_truncated:
            raise OutputLimitExceededError(
                limit_str=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR,
                truncated_output=_decode(result.stdout if result.stdout_truncated else result.stderr),
            )
        code = _returncode(result.exit_code, result.signal)
        stdout, stderr = _decode(result.stdout), _decode(result.stderr)
        if code == 126:
            raise PermissionError(errno.EACCES, f"Permission denied: {stderr.strip() or cmd[0]}", cmd[0])
        return ExecResult(success=code == 0, returncode=code, stdout=stdout, stderr=stderr)

    async def exec_remote(  # type: ignore[override]
        self,
        cmd: list[str],
        options: ExecRemoteStreamingOptions | ExecRemoteAwaitableOptions | None = None,
        *,
        stream: bool = True,
    ) -> ExecRemoteProcess | ExecResult[str]:
        """Where the lease grants ``persistentProcessSessions``: the command spawned as an
        envrt process (``envrt._inspect_remote``), no tool injected; else (or for another
        ``user``) Inspect's own ``exec_remote``."""
        from . import _inspect_remote

        opts = options or (ExecRemoteStreamingOptions() if stream else ExecRemoteAwaitableOptions())
        user = opts.user
        if user is not None and await self._is_default_user(user):
            user = None
        if user is not None or not await self._has_processes():
            return await super().exec_remote(cmd, options, stream=stream)  # type: ignore[call-overload,no-any-return]
        if stream:
            return await _inspect_remote.spawn_remote(self.lease, cmd, opts)
        return await _inspect_remote.run_remote(self.lease, cmd, opts)

    async def _has_processes(self) -> bool:
        if self._processes is None:
            capabilities = await self.lease.capabilities() or {}
            self._processes = bool(capabilities.get("persistentProcessSessions"))
        return self._processes

    async def _is_default_user(self, user: str) -> bool:
        """Whether ``user`` is who the lease's commands already run as, other than root:
        that one needs no switch. Root always goes through the driver's own gate (the
        local driver's allowedUsers), so that asking for root never reaches the host's
        root by accident of envrt running as root."""
        if self._identity is None:
            probe = await self.lease.exec(["sh", "-c", "id -u; id -un"])
            lines = _decode(probe.stdout).split()
            self._identity = (lines[0], lines[1]) if len(lines) >= 2 else ("", "")
        return user in self._identity and self._identity[0] != "0"

    async def write_file(self, file: str, contents: str | bytes) -> None:
        await self.lease.write_file(file, contents)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...
    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...
    async def read_file(self, file: str, text: bool = True) -> Union[str, bytes]:
        try:
            data = await self.lease.read_file(file)
        except IsADirectoryError as error:
            if "directory" in str(error):
                raise
            # The sync's own refusal, when no probe could run first ("... is not a file.").
            raise IsADirectoryError(errno.EISDIR, "Is a directory", file) from error
        if len(data) > SandboxEnvironmentLimits.MAX_READ_FILE_SIZE:
            raise OutputLimitExceededError(limit_str=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, truncated_output=None)
        return data.decode("utf-8") if text else data

    async def connection(self, *, user: str | None = None) -> SandboxConnection:
        capabilities = await self.lease.capabilities() or {}
        if not capabilities.get("duplexCommandStream"):
            raise NotImplementedError(f"the envrt lease {self.lease.id} does not grant duplexCommandStream")
        runtime = self.lease.runtime
        if runtime.state_dir is None:
            raise NotImplementedError("connection() needs a runtime made from an envrt.toml (Runtime.from_config)")
        command = ["envrt"]
        if runtime.config_path:
            command += ["--config", runtime.config_path]
        command += ["--state-dir", runtime.state_dir, "shell", "--lease", self.lease.id]
        return SandboxConnection(type="envrt", command=shlex.join(command))

    def default_polling_interval(self) -> float:
        return 0.2


__all__ = ["EnvrtSandboxConfig", "EnvrtSandboxEnvironment"]
