"""A lease's life-cycle v2 calls (contract section 8: pause and unpause, fork, idle timeout
and keep-alive, scope reuse) and exposed ports (section 10), mixed into
:class:`envrt.Lease`. Each is one facade call; its refusals raise the package's typed
exceptions with the facade's exact texts (``envrt._errors``)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._runtime import Lease, Runtime

__all__ = ["ExposedPort"]

_PAUSED_KEY = "envrtPausedAt"
_IDLE_TIMEOUT_KEY = "envrtIdleTimeoutMs"
_SCOPE_KEY = "envrtScope"
_SCOPE_OUTCOME_KEY = "envrtScopeOutcome"


class ExposedPort:
    """A lease port served on the host (:meth:`Lease.expose`)."""

    def __init__(self, lease_id: str, port: int, address: str, token: str | None) -> None:
        self.lease_id = lease_id
        self.port = port
        """The port inside the lease."""
        self.address = address
        """Where it listens: ``tcp://127.0.0.1:N`` or ``unix:///path``."""
        self.token = token
        """What a connection must send first (then ``\\n``), for an endpoint beyond
        loopback (``listen=``); ``None`` otherwise."""

    @property
    def host(self) -> str | None:
        """The TCP host (``None`` for a unix socket)."""
        if not self.address.startswith("tcp://"):
            return None
        host = self.address[len("tcp://") :].rpartition(":")[0]
        return host[1:-1] if host.startswith("[") else host

    @property
    def host_port(self) -> int | None:
        """The TCP port on the host (``None`` for a unix socket)."""
        if not self.address.startswith("tcp://"):
            return None
        return int(self.address.rpartition(":")[2])

    @property
    def path(self) -> str | None:
        """The unix socket's path (``None`` for TCP)."""
        return self.address[len("unix://") :] if self.address.startswith("unix://") else None

    def __repr__(self) -> str:
        return f"ExposedPort(lease_id={self.lease_id!r}, port={self.port}, address={self.address!r})"


class LifecycleMixin:
    """The calls :class:`envrt.Lease` gets from this module."""

    runtime: "Runtime"
    info: dict[str, Any]

    if TYPE_CHECKING:

        @property
        def id(self) -> str: ...

    def _metadata(self) -> dict[str, Any]:
        return self.info.get("metadata") or {}

    @property
    def paused(self) -> bool:
        """Whether the lease was paused when this record was read (:meth:`pause`)."""
        return _PAUSED_KEY in self._metadata()

    @property
    def idle_timeout(self) -> float | None:
        """The lease's armed idle timeout in seconds, if any."""
        value = self._metadata().get(_IDLE_TIMEOUT_KEY)
        return None if value is None else float(value) / 1000.0

    @property
    def scope(self) -> str | None:
        """The owner scope the lease was acquired under (``acquire(scope=...)``)."""
        value = self._metadata().get(_SCOPE_KEY)
        return value if isinstance(value, str) else None

    @property
    def scope_outcome(self) -> str | None:
        """What the scoped acquire (``reuse="scope"``) that handed out this lease did:
        ``"created"``, ``"resumed"`` or ``"replaced"`` (the Rust ``ScopeOutcome``);
        ``None`` for a lease acquired without scope reuse."""
        recorded = self._metadata().get(_SCOPE_OUTCOME_KEY)
        outcome = recorded.get("outcome") if isinstance(recorded, dict) else None
        return outcome if outcome in ("created", "resumed", "replaced") else None

    @property
    def scope_outcome_reason(self) -> str | None:
        """Why a ``"replaced"`` lease was replaced: ``the fingerprint changed: {parts}``
        or ``its provider resource is gone``; ``None`` otherwise."""
        recorded = self._metadata().get(_SCOPE_OUTCOME_KEY)
        if self.scope_outcome != "replaced" or not isinstance(recorded, dict):
            return None
        reason = recorded.get("reason")
        return reason if isinstance(reason, str) else None

    @property
    def forked_from(self) -> str | None:
        """The lease this one was forked from (:meth:`fork`), if any."""
        value = self._metadata().get("forkedFrom")
        return value if isinstance(value, str) else None

    async def pause(self) -> None:
        """Stops every process of the lease without ending it (the driver's pause group:
        ``local``, ``docker``, ``ssh``; else :class:`EnvrtUnsupportedError`
        ``Environment driver "{key}" does not support pause.``). While paused the lease
        refuses exec, sync, duplex and the process verbs with ``Lease "{id}" is paused.``
        (kind ``lease_paused``); release, destroy and listing work; its expiry keeps
        running, its idle time does not. Pausing a paused lease changes nothing."""
        self.info = json.loads(await self.runtime._native.lifecycle_verbs().pause(self.id))

    async def unpause(self) -> None:
        """Continues every process :meth:`pause` stopped (their handles and buffers are
        intact). Unpausing a running lease changes nothing."""
        self.info = json.loads(await self.runtime._native.lifecycle_verbs().unpause(self.id))

    async def fork(self, count: int = 1) -> "list[Lease]":
        """``count`` (1 to 16) new leases whose workspace (on Docker, the container's file
        system) is this lease's state now; this lease is unchanged and keeps running, and
        its processes are not copied. All or nothing. Refused by a driver without fork
        (``sandbox``: ``Environment driver "{key}" does not support lease fork.``),
        and with ``Invalid input: a fork needs a count of at least 1`` /
        ``Invalid input: a fork makes at most 16 copies, not {count}``."""
        from ._runtime import Lease

        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            from ._errors import EnvrtValueError

            raise EnvrtValueError(f"envrt: fork needs a whole count from 1 to 16, not {count!r}", "invalid_input")
        text = await self.runtime._native.lifecycle_verbs().fork(self.id, count)
        return [Lease(self.runtime, info) for info in json.loads(text)]

    async def keep_alive(self) -> None:
        """Resets the lease's idle clock (a lease acquired with ``idle_timeout=``). Refused
        with ``Invalid input: lease "{id}" has no idle timeout`` without one, and with
        ``Lease "{id}" ended after its idle timeout.`` (kind ``lease_idle_ended``) when it
        has already ended the lease, which is then recorded ``expired``."""
        self.info = json.loads(await self.runtime._native.lifecycle_verbs().keep_alive(self.id))

    async def set_idle_timeout(self, seconds: float) -> None:
        """Arms (or re-arms) the lease's idle timeout: once it has taken no operation and
        run no process for ``seconds``, its driver ends it, holder or not (``local`` only;
        else ``Environment driver "{key}" does not support idle timeouts.``)."""
        self.info = json.loads(await self.runtime._native.lifecycle_verbs().set_idle_timeout(self.id, float(seconds)))

    async def expose(
        self,
        port: int,
        *,
        unix: str | os.PathLike[str] | None = None,
        listen: str | None = None,
    ) -> ExposedPort:
        """Serves ``port`` of the lease's loopback on the host until the lease is released
        or destroyed through this runtime (or :meth:`close_exposed`): on ``127.0.0.1``
        at a port the system picks, on a unix socket made at ``unix`` (mode 0600), or on
        ``listen`` (``"ADDR:PORT"``; beyond loopback each connection must first send the
        returned token and a newline). Drivers ``docker`` and ``sandbox``; ``local`` and
        ``ssh`` refuse with ``Environment driver "{key}" does not support exposed lease
        ports.``"""
        address, token = await self.runtime._native.lifecycle_verbs().expose(
            self.id, port, None if unix is None else os.fspath(unix), listen
        )
        return ExposedPort(self.id, port, address, token)

    def close_exposed(self) -> None:
        """Closes every port :meth:`expose` opened for this lease."""
        self.runtime._native.lifecycle_verbs().close_exposed(self.id)
