"""The Python face of the runtime: :class:`Runtime`, :class:`Lease`, :class:`DuplexStream`."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, AsyncIterator, Callable, Literal, Mapping, Sequence, overload

from . import _envrt
from ._envrt import ExecResult
from ._errors import EnvrtError, EnvrtValueError, from_native
from ._lifecycle import ExposedPort, LifecycleMixin
from ._process import Process
from ._sync import SyncFile, SyncOperation, _files, _MergeOut, _operations

__all__ = ["DuplexStream", "ExposedPort", "Lease", "ReleaseReport", "Runtime", "SyncFile", "SyncOperation"]

OutputCallback = Callable[[str, bytes], Any]
"""``on_output(stream, chunk)``: ``stream`` is ``"stdout"`` or ``"stderr"``."""


def _skipped_driver_error(error: EnvrtError, skipped: Mapping[str, str]) -> EnvrtError:
    """A driver the configuration enables but that could not be set up (a missing sandbox
    worker) is refused by the facade as not registered; say why instead, as the CLI does."""
    if error.kind == "driver_not_registered":
        for key, why in skipped.items():
            if str(error) == f'Environment driver "{key}" is not registered in the environment runtime yet.':
                return EnvrtError(f'Environment driver "{key}" could not be set up: {why}', "unavailable")
    return error


class Runtime:
    """An envrt runtime in this process: its drivers, environments and leases.

    Build one with :meth:`create` (drivers from code) or :meth:`from_config`
    (an ``envrt.toml``).
    """

    def __init__(self, native: Any, company: str = "local", default_environment: str | None = None) -> None:
        self._native = native
        self.company = company
        self.default_environment = default_environment
        self.default_ttls: dict[str, float] = {}
        """Default lease TTL (seconds) per environment, from ``ttl`` in ``envrt.toml``."""
        self.default_idle_timeouts: dict[str, float] = {}
        """Default idle timeout (seconds) per environment, from ``idle_timeout`` in
        ``envrt.toml``."""
        self.config_path: str | None = None
        self.state_dir: str | None = None
        self.skipped_drivers: dict[str, str] = {}
        """Drivers the configuration enables that could not be set up, with why."""

    @classmethod
    async def from_config(
        cls,
        config: str | os.PathLike[str] | None = None,
        *,
        state_dir: str | os.PathLike[str] | None = None,
        driver: str | None = None,
    ) -> "Runtime":
        """The runtime an ``envrt.toml`` describes, assembled as the ``envrt`` CLI does:
        leases in the SQLite store of the state directory (so ``envrt lease list`` sees
        them), the configured environments, tenant and default environment.

        ``config``: the file (``None``: ``$ENVRT_CONFIG``, else ``./envrt.toml`` when it
        exists, else only the implicit ``local`` environment). ``state_dir``: ``None`` is
        ``$ENVRT_STATE_DIR``, else ``$XDG_STATE_HOME/envrt``, else ``~/.local/state/envrt``.
        ``driver`` is set up even when no configured environment uses it."""
        native, company, default, ttls, idles, resolved_state, skipped = await _envrt.open_config(
            None if config is None else os.fspath(config),
            None if state_dir is None else os.fspath(state_dir),
            driver,
        )
        runtime = cls(native, company, default)
        runtime.default_ttls = dict(ttls)
        runtime.default_idle_timeouts = dict(idles)
        runtime.config_path = None if config is None else os.path.abspath(os.fspath(config))
        runtime.state_dir = os.fspath(resolved_state)
        runtime.skipped_drivers = dict(skipped)
        return runtime

    @classmethod
    async def create(
        cls,
        *,
        local_root: str | os.PathLike[str] | None = None,
        docker: bool | Mapping[str, Any] = False,
        docker_host: str | None = None,
        sandbox_worker: str | os.PathLike[str] | None = None,
        sandbox_root: str | os.PathLike[str] | None = None,
        plugins: Sequence[Mapping[str, Any]] = (),
        database: str | os.PathLike[str] | None = None,
        company: str = "local",
        **drivers: Mapping[str, Any],
    ) -> "Runtime":
        """A runtime with every driver this build knows (``envrt.known_drivers()``), each
        keyword of ``drivers`` configuring the driver of that key with its settings in the
        form of its ``envrt.toml`` section (``local={"root": "/x"}``,
        ``docker={"host": "unix:///run/docker.sock"}``, ``ssh={}``): a driver that connects
        somewhere (Docker) is set up only when named (``docker=True`` is ``docker={}``).
        ``local_root`` and ``docker_host`` are the older spellings of ``local={"root": ...}``
        and ``docker={"host": ...}``. Then the reference sandbox worker when
        ``sandbox_worker`` names it (leases under ``sandbox_root``), and one sandbox driver
        per plugin ``{"manifest": path, "driver_key": ..., "config": {...}}``. Leases live
        in memory, or in the SQLite file ``database``. The runtime is bound to tenant
        ``company``: another tenant's leases in a shared ``database`` are not found. A key
        no driver has is a ``ValueError`` naming the known ones."""
        sections: dict[str, dict[str, Any]] = {key: dict(value) for key, value in drivers.items()}
        if local_root is not None:
            sections.setdefault("local", {})["root"] = os.fspath(local_root)
        if isinstance(docker, Mapping):
            sections["docker"] = dict(docker)
        elif docker:
            sections["docker"] = {} if docker_host is None else {"host": docker_host}
        specs: list[tuple[str, str | None, str | None, str]] = []
        if sandbox_worker is not None:
            command = [os.fspath(sandbox_worker)]
            if sandbox_root is not None:
                command += ["--root", os.fspath(sandbox_root)]
            manifest = {
                "id": "envrt-sandbox",
                "worker": {"command": command},
                "environmentDrivers": [
                    {
                        "driverKey": "sandbox",
                        "kind": "sandbox_provider",
                        "displayName": "bwrap sandbox",
                        "sandboxCapabilities": {
                            "incrementalSessionOutput": True,
                            "concurrentSyncOperations": True,
                            "duplexCommandStream": True,
                        },
                    }
                ],
            }
            specs.append((json.dumps(manifest), None, None, "{}"))
        for plugin in plugins:
            path = os.fspath(plugin["manifest"])
            with open(path, encoding="utf-8") as f:
                text = f.read()
            specs.append(
                (text, os.path.dirname(os.path.abspath(path)), plugin.get("driver_key"), json.dumps(plugin.get("config", {})))
            )
        native = await _envrt.build_runtime(
            drivers=json.dumps(sections),
            plugins=specs,
            database=None if database is None else os.fspath(database),
            tenant=company,
        )
        runtime = cls(native, company)
        # As with the CLI, an environment "local" exists without any configuration.
        await runtime.put_environment("local", "local", name="local")
        return runtime

    @classmethod
    async def connect(cls, url: str, token: str) -> "Runtime":
        """A runtime reached through ``envrt serve`` at ``url`` (``unix:PATH``,
        ``http://HOST:PORT``, ``https://HOST:PORT``) with a bearer ``token``: the same
        :class:`Lease` and :class:`Process` calls, bound to the token's tenant (see
        ``envrt._remote``). Needs ``httpx``; close it with :meth:`close` or ``async with``."""
        from ._remote import connect

        return connect(cls, url, token)

    async def close(self) -> None:
        """Closes a connection to a service; nothing for an embedded runtime."""
        if hasattr(self._native, "aclose"):
            await self._native.aclose()

    async def __aenter__(self) -> "Runtime":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def driver_keys(self) -> list[str]:
        """The registered driver keys."""
        return list(self._native.driver_keys())

    async def put_environment(
        self,
        id: str,
        driver: str,
        *,
        name: str | None = None,
        config: Mapping[str, Any] | None = None,
        active: bool = True,
        ready_command: Sequence[str] | None = None,
        ready_timeout: float | None = None,
    ) -> None:
        """Adds or replaces an environment (``config`` is the driver's configuration).
        ``ready_command`` (argv, no shell) must exit 0 on every new lease within
        ``ready_timeout`` seconds (default 60, at most 600) before ``acquire`` returns;
        otherwise the lease is ended (recorded ``failed``, ``not_ready``) and ``acquire``
        raises ``Lease "{id}" is not ready: {reason}.`` (kind ``lease_not_ready``)."""
        if ready_command is None and ready_timeout is not None:
            raise EnvrtValueError("Invalid input: ready_timeout needs ready_command", "invalid_input")
        if isinstance(ready_command, (str, bytes)):
            raise EnvrtValueError("Invalid input: ready_command is an argv (a list of strings), not a string", "invalid_input")
        timeout_ms = 60_000 if ready_timeout is None else _ready_timeout_ms(ready_timeout)
        await self._native.put_environment(
            id,
            driver,
            name,
            json.dumps(dict(config or {})),
            active,
            None if ready_command is None else [str(word) for word in ready_command],
            timeout_ms,
        )

    async def environment_capabilities(self, environment_id: str) -> dict[str, bool] | None:
        """The environment's capability snapshot before any lease."""
        text = await self._native.environment_capabilities(environment_id)
        return None if text is None else json.loads(text)

    async def acquire(
        self,
        environment_id: str | None = None,
        *,
        company: str | None = None,
        run_id: str | None = None,
        policy: str = "ephemeral",
        ttl: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        network: Mapping[str, Any] | None = None,
        scope: str | None = None,
        reuse: Literal["never", "scope"] = "never",
        labels: Mapping[str, str] | None = None,
        idle_timeout: float | None = None,
    ) -> "Lease":
        """Acquires a lease on ``environment_id`` (the configured default when ``None``);
        ``ttl`` seconds asks for an expiry the driver must guarantee (default: the
        environment's ``ttl`` in ``envrt.toml``); ``network`` is a policy of the lease's own
        (``{"egress": "allow", "allow": ["pypi.org:443"]}``), within the environment's
        policy or its ``grantable`` list (contract section 10).

        ``scope`` (an owner key: tenant, agent, workspace) is recorded on the lease; with
        ``reuse="scope"`` a live lease of that scope and the same configuration
        fingerprint is handed back instead of a new one, and one whose fingerprint changed
        is ended and replaced; :attr:`Lease.scope_outcome` says which (``created``,
        ``resumed``, ``replaced``). ``labels`` are recorded for
        :meth:`release_matching`. ``idle_timeout`` seconds arms the lease's idle timeout
        right after the acquire (default: the environment's ``idle_timeout`` in
        ``envrt.toml``); when the driver refuses it the new lease is released again and
        the refusal raised."""
        environment_id = environment_id or self.default_environment or "local"
        if ttl is None:
            ttl = self.default_ttls.get(environment_id)
        if idle_timeout is None:
            idle_timeout = self.default_idle_timeouts.get(environment_id)
        try:
            text = await self._native.acquire(
                environment_id,
                company or self.company,
                run_id,
                policy,
                ttl,
                json.dumps(dict(metadata or {})),
                None if network is None else json.dumps(dict(network)),
                scope,
                reuse,
                {str(k): str(v) for k, v in (labels or {}).items()},
                idle_timeout,
            )
        except EnvrtError as error:
            raise _skipped_driver_error(error, self.skipped_drivers) from error
        return Lease(self, json.loads(text))

    async def leases(self, environment_id: str | None = None, statuses: Sequence[str] = ()) -> list["Lease"]:
        """The stored leases, of ``environment_id`` and with one of ``statuses`` when given."""
        text = await self._native.leases(environment_id, list(statuses))
        return [Lease(self, info) for info in json.loads(text)]

    async def process(self, process_id: str) -> Process:
        """The process ``process_id`` (``{lease id}/{n}``), spawned by any program on the
        same lease store; an unknown id raises :class:`EnvrtLookupError`."""
        verbs = self._native.process_verbs()
        return Process(verbs, json.loads(await verbs.process(process_id)))

    async def lease(self, lease_id: str) -> "Lease | None":
        """The stored lease ``lease_id``, or ``None``."""
        text = await self._native.lease(lease_id)
        return None if text is None else Lease(self, json.loads(text))

    async def release_matching(
        self,
        *,
        scope: str | None = None,
        label: tuple[str, str] | None = None,
        status: str = "released",
        company: str | None = None,
    ) -> "ReleaseReport":
        """Releases every active lease of the tenant acquired under owner ``scope``, or
        with ``label=(key, value)`` (exactly one of the two), each in isolation, and says
        which it released and which it could not (:class:`ReleaseReport`). Idempotent: a
        second call finds nothing. Another tenant's leases are never touched."""
        if (scope is None) == (label is None):
            raise EnvrtValueError("envrt: release_matching needs exactly one of scope= and label=", "invalid_input")
        text = await self._native.lifecycle_verbs().release_matching(
            company or self.company, scope, None if label is None else (str(label[0]), str(label[1])), status
        )
        report = json.loads(text)
        return ReleaseReport(
            [Lease(self, info) for info in report["released"]],
            [(f["leaseId"], from_native(f["kind"], f["message"], None)) for f in report["failures"]],
        )


class Lease(LifecycleMixin):
    """A lease on an environment. ``async with`` releases it at the end."""

    def __init__(self, runtime: Runtime, info: dict[str, Any]) -> None:
        self.runtime = runtime
        self.info = info
        """The lease record (the contract's field names)."""

    @property
    def id(self) -> str:
        return str(self.info["id"])

    @property
    def provider(self) -> str | None:
        return self.info.get("provider")

    @property
    def workspace(self) -> str | None:
        """The lease's workspace path inside the environment, where the driver tells it."""
        metadata = self.info.get("metadata") or {}
        for key in ("workspace", "workspaceDir", "remoteCwd"):
            value = metadata.get(key)
            if isinstance(value, str):
                return value
        return None

    def __repr__(self) -> str:
        return f"Lease(id={self.id!r}, provider={self.provider!r}, status={self.info.get('status')!r})"

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release("failed" if exc[0] is not None else "released")

    async def exec(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        input: str | bytes | None = None,
        timeout: float | None = None,
        max_output: int | None = None,
        keep: Literal["head", "tail"] = "head",
        on_output: OutputCallback | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Runs ``argv`` (no shell) and returns its structured result. Each stream keeps
        at most ``max_output`` bytes (16 MiB by default): its first bytes, or with
        ``keep="tail"`` its last. ``on_output`` is called on this event loop with each
        chunk as it arrives. ``user`` (``NAME``, ``UID``, ``NAME:GROUP``, ``UID:GID``)
        runs it as another user where the driver allows it; a driver that cannot raises
        :class:`EnvrtUserRefusedError` and runs nothing."""
        data = input.encode("utf-8") if isinstance(input, str) else input
        sink = None
        if on_output is not None:
            loop = asyncio.get_running_loop()
            callback = on_output

            def sink(stream: str, chunk: bytes) -> None:
                loop.call_soon_threadsafe(callback, stream, chunk)

        result = await self.runtime._native.exec(
            self.id, list(argv), cwd, dict(env or {}), data, timeout, max_output, sink, keep, user
        )
        if sink is not None:
            # Let the chunks scheduled before the result arrived run first.
            await asyncio.sleep(0)
        return result

    @overload
    async def read_file(self, path: str, *, text: Literal[False] = False) -> bytes: ...
    @overload
    async def read_file(self, path: str, *, text: Literal[True]) -> str: ...
    async def read_file(self, path: str, *, text: bool = False) -> bytes | str:
        """The content of one file of the lease (text decodes UTF-8), read if the lease's
        command user may read it: a directory raises :class:`IsADirectoryError`, a file
        that user may not read :class:`PermissionError`, a missing one
        :class:`FileNotFoundError` (each naming the path)."""
        data = await self.runtime._native.read_file(self.id, path)
        return data.decode("utf-8") if text else data

    async def write_file(self, path: str, data: str | bytes, *, mode: int | None = None) -> None:
        """Writes one file of the lease (text is encoded as UTF-8); parents are created.
        A directory there is not replaced (:class:`IsADirectoryError`), nor a file the
        lease's command user may not write (:class:`PermissionError`)."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        await self.runtime._native.write_file(self.id, path, raw, mode)

    async def sync_in(self, *items: SyncOperation | SyncFile) -> list[dict[str, Any]]:
        """Copies host files and trees into the lease; returns per-operation counts. A
        directory whose target already exists in the lease is refused
        (:class:`EnvrtValueError`, nothing is copied) unless it says ``replace=True``: the
        sync would replace that directory whole."""
        for file in _files(items):
            if file.kind == "directory" and not file.replace:
                await self._refuse_existing(file.target)
        return json.loads(await self.runtime._native.sync_in(self.id, _operations(items)))["operations"]

    async def sync_out(self, *items: SyncOperation | SyncFile) -> list[dict[str, Any]]:
        """Copies files and trees of the lease to the host; returns per-operation counts. A
        directory copied to a host directory that already exists is merged into it (files
        of the same name are replaced, nothing else there is touched) unless it says
        ``replace=True``; over an existing host path that is not a directory it is refused."""
        with _MergeOut(items) as merge:
            return json.loads(await self.runtime._native.sync_out(self.id, _operations(merge.items)))["operations"]

    async def _refuse_existing(self, target: str) -> None:
        probe = 'if [ -e "$1" ] || [ -L "$1" ]; then echo exists; else echo missing; fi'
        try:
            seen = await self.exec(["sh", "-c", probe, "sh", target])
            answer = seen.stdout.decode().strip() if seen.exit_code == 0 else ""
        except EnvrtError:
            answer = ""
        if answer == "missing":
            return
        if answer == "exists":
            raise EnvrtValueError(
                f'envrt: "{target}" already exists in the lease and sync_in would replace it whole; '
                "pass SyncFile(..., replace=True) to replace it, or sync into a path that does not exist",
                "invalid_input",
            )
        raise EnvrtValueError(
            f'envrt: cannot look at "{target}" in the lease (it runs no sh probe), so sync_in does not '
            "replace it; pass SyncFile(..., replace=True) to replace it whole",
            "invalid_input",
        )

    async def open_duplex(self, argv: Sequence[str]) -> "DuplexStream":
        """Starts ``argv`` with a live two-way byte channel (needs ``duplexCommandStream``)."""
        return DuplexStream(await self.runtime._native.open_duplex(self.id, list(argv)))

    async def update_network(self, network: Mapping[str, Any]) -> str:
        """Replaces the lease's network policy (the form :meth:`Runtime.acquire` takes);
        answers the level it now has, such as ``"egress proxy (allow)"`` or ``"no network"``.
        New connections follow it at once and open ones it denies are cut."""
        return str(await self.runtime._native.update_network(self.id, json.dumps(dict(network))))

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        tty: tuple[int, int] | None = None,
        keep: int | None = None,
        stdin: bool = False,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        idempotency_key: str | None = None,
        user: str | None = None,
    ) -> Process:
        """Starts ``argv`` as a persistent process (needs ``persistentProcessSessions``)
        that outlives this program; answers once it runs. ``tty=(rows, cols)`` gives it a
        terminal, ``keep`` bytes per stream are held for replay (8 MiB by default),
        ``stdin=True`` makes its stdin a pipe for :meth:`Process.write`, ``timeout`` kills
        its group that many seconds after the start, the same ``idempotency_key`` with
        the same request returns the same process, and ``user`` (``NAME``, ``UID``,
        ``NAME:GROUP``, ``UID:GID``) runs it as that user of the environment (refused with
        ``Cannot run as user "{user}": {reason}`` where the driver cannot)."""
        verbs = self.runtime._native.process_verbs()
        text = await verbs.spawn(
            self.id, list(argv), tty, keep, stdin, dict(env or {}), cwd, timeout, idempotency_key, user
        )
        return Process(verbs, json.loads(text))

    async def processes(self) -> list[Process]:
        """Every process of the lease, exited ones included, in spawn order."""
        verbs = self.runtime._native.process_verbs()
        return [Process(verbs, record) for record in json.loads(await verbs.processes(self.id))]

    async def process(self, process_id: str) -> Process:
        """The process ``process_id`` (see :meth:`Runtime.process`)."""
        return await self.runtime.process(process_id)

    async def capabilities(self) -> dict[str, bool] | None:
        """The lease's effective capability snapshot (nine keys)."""
        text = await self.runtime._native.capabilities(self.id)
        return None if text is None else json.loads(text)

    async def release(self, status: str = "released") -> dict[str, Any]:
        """Ends the lease (``released``, ``failed`` or ``expired``); returns the record."""
        self.info = json.loads(await self.runtime._native.release(self.id, status))
        return self.info

    async def destroy(self) -> dict[str, Any]:
        """Removes the lease's resource whatever its policy; returns the record."""
        self.info = json.loads(await self.runtime._native.destroy(self.id))
        return self.info


def _ready_timeout_ms(seconds: float) -> int:
    """``ready_timeout`` in whole milliseconds; the facade refuses 0 and above 600 s with
    the same text as here."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 600:
        raise EnvrtValueError("Invalid input: ready_timeout must be from 1 ms to 600 s", "invalid_input")
    return round(seconds * 1000)


class ReleaseReport:
    """What :meth:`Runtime.release_matching` did: the leases it released, in order, and
    for each lease it could not release, its id and the error (the others were still
    released)."""

    def __init__(self, released: "list[Lease]", failures: "list[tuple[str, EnvrtError]]") -> None:
        self.released = released
        self.failures = failures

    def __repr__(self) -> str:
        return f"ReleaseReport(released={[l.id for l in self.released]!r}, failures={self.failures!r})"


class DuplexStream:
    """A duplex channel: ``async for chunk in stream`` reads output until it ends."""

    def __init__(self, native: Any) -> None:
        self._native = native

    async def write(self, data: str | bytes) -> None:
        await self._native.write(data.encode("utf-8") if isinstance(data, str) else bytes(data))

    async def read(self) -> bytes | None:
        """The next chunk of output; ``None`` once it has ended."""
        return await self._native.read()

    async def close_input(self) -> None:
        await self._native.close_input()

    async def stop(self) -> None:
        await self._native.stop()

    async def close(self) -> None:
        await self._native.close()

    async def wait(self) -> int | None:
        """The command's exit code; ``None`` when the host ended the channel."""
        code, _transport_closed = await self._native.wait()
        return code

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self.read()
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def __aenter__(self) -> "DuplexStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
