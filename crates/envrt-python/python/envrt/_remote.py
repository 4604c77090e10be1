"""A runtime reached through ``envrt serve`` (``Runtime.connect(url, token)``).

:class:`Service` answers the calls :class:`envrt.Runtime`, :class:`envrt.Lease` and
:class:`envrt.Process` make on the extension module's runtime, over the service's
``/v1/`` HTTP API, so a connected runtime has the embedded one's shape: leases, execute,
sync as tar streams, and process sessions (spawn, output from offsets, stdin, signal,
resize, wait). The service's error bodies become the package's typed exceptions with the
service's exact text and kind (``envrt._errors``). What the service has no route for is
refused here, before any request, with an exact text (:func:`unsupported`).

The URL is ``unix:PATH`` (or ``unix://PATH``, or a bare absolute ``PATH``) for the
service's unix socket, or ``http://HOST:PORT`` / ``https://HOST:PORT`` for ``--listen``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import tempfile
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import quote

from ._errors import EnvrtError, EnvrtLookupError, EnvrtUnsupportedError, EnvrtValueError, from_native
from ._remote_files import pack_tree, unpack

_DEFAULT_MAX_OUTPUT = 16 * 1024 * 1024


def connect(cls: Any, url: str, token: str) -> Any:
    """``Runtime.connect``: a runtime of class ``cls`` whose calls go to the service. What
    the service has no route for (``put_environment``, ``write_file``, ``open_duplex``, a
    single-file ``sync_in``) raises :class:`EnvrtUnsupportedError` (kind
    ``service_unsupported``); the service's refusals raise the package's typed exceptions
    with the service's exact text."""
    runtime = cls(Service(url, token), None)
    runtime.default_environment = "local"
    return runtime


def unsupported(what: str) -> EnvrtUnsupportedError:
    """``envrt: {what} is not available through envrt serve``, kind ``service_unsupported``."""
    return EnvrtUnsupportedError(f"envrt: {what} is not available through envrt serve", "service_unsupported")


def _segment(text: str) -> str:
    return quote(text, safe="")


def _lease_path(lease_id: str) -> str:
    return f"/v1/leases/{_segment(lease_id)}"


def _process_path(process_id: str) -> str:
    """``/v1/leases/{lease}/processes/{n}``; an id that is not ``{lease}/{n}`` raises the
    facade's own text for it (``Process "{id}" was not found.``)."""
    lease, _, number = process_id.rpartition("/")
    if not lease or not number.isdigit():
        raise EnvrtLookupError(f'Process "{process_id}" was not found.', "process_not_found")
    return f"{_lease_path(lease)}/processes/{number}"


def _endpoint(url: str) -> tuple[str | None, str]:
    """``(unix socket path or None, base URL)``."""
    for prefix in ("unix://", "unix:"):
        if url.startswith(prefix):
            return url[len(prefix) :], "http://envrt"
    if url.startswith("/"):
        return url, "http://envrt"
    if url.startswith(("http://", "https://")):
        return None, url.rstrip("/")
    raise EnvrtValueError(
        f'envrt: "{url}" is not a service URL: give unix:PATH, an absolute socket path, '
        "http://HOST:PORT or https://HOST:PORT",
        "invalid_input",
    )


class RemoteExecResult:
    """A command's structured result as the service answers it (the attributes of
    :class:`envrt.ExecResult`)."""

    def __init__(self, doc: Mapping[str, Any], stdout: bytes, stderr: bytes) -> None:
        self.exit_code: int | None = doc.get("exitCode")
        self.signal: str | None = doc.get("signal")
        self.timed_out: bool = bool(doc.get("timedOut"))
        self.stdout = stdout
        self.stderr = stderr
        self.stdout_truncated: bool = bool(doc.get("stdoutTruncated"))
        self.stderr_truncated: bool = bool(doc.get("stderrTruncated"))
        self.duration: float = float(doc.get("durationMs") or 0.0) / 1000.0
        self.metadata_json = "{}"
        """The service does not carry driver metadata: always ``{}``."""

    @property
    def success(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def __repr__(self) -> str:
        signal = "None" if self.signal is None else repr(self.signal)
        return (
            f"ExecResult(exit_code={self.exit_code}, signal={signal}, timed_out={self.timed_out}, "
            f"stdout_bytes={len(self.stdout)}, stdout_truncated={self.stdout_truncated}, "
            f"stderr_bytes={len(self.stderr)}, stderr_truncated={self.stderr_truncated}, "
            f"duration={self.duration:.3f})"
        )


def _decoded(doc: Mapping[str, Any], stream: str) -> bytes:
    value = doc.get(stream) or ""
    if doc.get(f"{stream}Encoding") == "base64":
        return base64.b64decode(value)
    return str(value).encode("utf-8")


class _Kept:
    """One stream's output kept as the runtime keeps it: the first (``head``) or last
    (``tail``) ``limit`` bytes."""

    def __init__(self, limit: int, keep: str) -> None:
        self.limit = limit
        self.tail = keep == "tail"
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        if self.tail:
            self.data += chunk
            del self.data[: max(0, len(self.data) - self.limit)]
        elif len(self.data) < self.limit:
            self.data += chunk[: self.limit - len(self.data)]


class Service:
    """The calls of the extension module's runtime, answered by a service."""

    def __init__(self, url: str, token: str) -> None:
        try:
            import httpx
        except ImportError as error:  # the optional dependency of envrt[service]
            raise unsupported('Runtime.connect without httpx (pip install "envrt[service]")') from error
        self._httpx = httpx
        socket, self.base = _endpoint(url)
        transport = httpx.AsyncHTTPTransport(uds=socket) if socket else httpx.AsyncHTTPTransport()
        self._client = httpx.AsyncClient(
            transport=transport,
            base_url=self.base,
            headers={"authorization": f"Bearer {token}"} if token else {},
            timeout=httpx.Timeout(None, connect=30.0),
        )
        self.url = url

    async def aclose(self) -> None:
        await self._client.aclose()

    # -- HTTP -----------------------------------------------------------------------

    @staticmethod
    def _error(status: int, body: bytes) -> EnvrtError:
        try:
            doc = json.loads(body)
            return from_native(str(doc["kind"]), str(doc["message"]), None)
        except (ValueError, KeyError, TypeError):
            return EnvrtError(f"envrt: the service answered {status} without an error body", "service")

    def _unreachable(self, error: Exception) -> EnvrtError:
        """``envrt: cannot reach the service at {url}: {why}``, kind ``unavailable``."""
        return EnvrtError(f"envrt: cannot reach the service at {self.url}: {error}", "unavailable")

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._client.request(method, path, **kwargs)
        except self._httpx.TransportError as error:
            raise self._unreachable(error) from error
        if response.status_code >= 400:
            raise self._error(response.status_code, response.content)
        return response

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self._call(method, path, **kwargs)).json()

    async def _lines(self, method: str, path: str, **kwargs: Any) -> Any:
        """The NDJSON lines of a streamed answer, as an async iterator of documents."""
        request = self._client.build_request(method, path, **kwargs)
        try:
            response = await self._client.send(request, stream=True)
        except self._httpx.TransportError as error:
            raise self._unreachable(error) from error
        try:
            if response.status_code >= 400:
                raise self._error(response.status_code, await response.aread())
            try:
                async for line in response.aiter_lines():
                    if line.strip():
                        yield json.loads(line)
            except self._httpx.TransportError as error:
                raise self._unreachable(error) from error
        finally:
            await response.aclose()

    # -- environments and leases ----------------------------------------------------

    def driver_keys(self) -> list[str]:
        raise unsupported("Runtime.driver_keys")

    async def put_environment(self, *args: Any) -> None:
        raise unsupported("Runtime.put_environment (environments are the service's envrt.toml)")

    async def environment_capabilities(self, environment_id: str) -> str | None:
        doc = await self._json("GET", f"/v1/environments/{_segment(environment_id)}/capabilities")
        return json.dumps(doc)

    async def acquire(
        self,
        environment_id: str,
        company: str | None,
        run_id: str | None,
        policy: str,
        ttl: float | None,
        metadata: str,
        network: str | None,
        scope: str | None = None,
        reuse: str = "never",
        labels: Mapping[str, str] | None = None,
        idle_timeout: float | None = None,
    ) -> str:
        if company is not None:
            raise unsupported("acquire(company=...) (a lease's tenant is its token's)")
        if json.loads(metadata):
            raise unsupported("acquire(metadata=...)")
        if scope is not None or reuse != "never" or labels:
            raise unsupported("acquire(scope=..., reuse=..., labels=...)")
        if idle_timeout is not None:
            raise unsupported("acquire(idle_timeout=...)")
        body: dict[str, Any] = {"environmentId": environment_id, "policy": policy}
        if run_id is not None:
            body["runId"] = run_id
        if ttl is not None:
            body["ttlMs"] = round(ttl * 1000)
        if network is not None:
            body["network"] = json.loads(network)
        return json.dumps(await self._json("POST", "/v1/leases", json=body))

    async def leases(self, environment_id: str | None, statuses: Sequence[str]) -> str:
        every = await self._json("GET", "/v1/leases", params={"all": "true"})
        return json.dumps(
            [
                lease
                for lease in every
                if (environment_id is None or lease.get("environmentId") == environment_id)
                and (not statuses or lease.get("status") in statuses)
            ]
        )

    async def lease(self, lease_id: str) -> str | None:
        try:
            return json.dumps(await self._json("GET", _lease_path(lease_id)))
        except EnvrtLookupError as error:
            if error.kind == "lease_not_found":
                return None
            raise

    async def capabilities(self, lease_id: str) -> str | None:
        return json.dumps(await self._json("GET", f"{_lease_path(lease_id)}/capabilities"))

    async def release(self, lease_id: str, status: str) -> str:
        doc = await self._json("POST", f"{_lease_path(lease_id)}/release", json={"status": status})
        return json.dumps(doc)

    async def destroy(self, lease_id: str) -> str:
        return json.dumps(await self._json("DELETE", _lease_path(lease_id)))

    async def update_network(self, lease_id: str, network: str) -> str:
        doc = await self._json("PUT", f"{_lease_path(lease_id)}/network", content=network.encode())
        return str(doc["network"])

    async def open_duplex(self, lease_id: str, argv: list[str]) -> Any:
        raise unsupported("Lease.open_duplex through Runtime.connect")

    # -- execute --------------------------------------------------------------------

    async def exec(
        self,
        lease_id: str,
        argv: list[str],
        cwd: str | None,
        env: dict[str, str],
        data: bytes | None,
        timeout: float | None,
        max_output: int | None,
        sink: Callable[[str, bytes], None] | None,
        keep: str,
        user: str | None,
    ) -> RemoteExecResult:
        if not argv:
            raise EnvrtValueError("envrt: exec needs a command: argv is empty", "invalid_input")
        body: dict[str, Any] = {"command": argv[0], "args": list(argv[1:]), "env": env, "keep": keep}
        for key, value in (("cwd", cwd), ("user", user), ("maxOutputBytes", max_output)):
            if value is not None:
                body[key] = value
        if timeout is not None:
            body["timeoutMs"] = round(timeout * 1000)
        if data is not None:
            body["stdinBase64"] = base64.b64encode(data).decode()
        path = f"{_lease_path(lease_id)}/execute"
        if sink is None:
            doc = await self._json("POST", path, json=body)
            return RemoteExecResult(doc, _decoded(doc, "stdout"), _decoded(doc, "stderr"))
        limit = _DEFAULT_MAX_OUTPUT if max_output is None else max_output
        kept = {"stdout": _Kept(limit, keep), "stderr": _Kept(limit, keep)}
        async for line in self._lines("POST", f"{path}/stream", json=body):
            if "error" in line:
                raise from_native(line["error"]["kind"], line["error"]["message"], None)
            if "result" in line:
                return RemoteExecResult(line["result"], bytes(kept["stdout"].data), bytes(kept["stderr"].data))
            chunk = base64.b64decode(line["data"])
            kept[line["stream"]].add(chunk)
            sink(line["stream"], chunk)
        raise EnvrtError("envrt: the service ended the execute stream without a result", "service")

    # -- files ----------------------------------------------------------------------

    async def read_file(self, lease_id: str, path: str) -> bytes:
        response = await self._call("GET", f"{_lease_path(lease_id)}/files", params={"path": path, "kind": "file"})
        with tempfile.TemporaryDirectory(prefix="envrt-read-") as staging:
            unpack(io.BytesIO(response.content), staging)
            names = os.listdir(staging)
            with open(os.path.join(staging, names[0]), "rb") as f:
                return f.read()

    async def write_file(self, lease_id: str, path: str, data: bytes, mode: int | None) -> None:
        raise unsupported("Lease.write_file (the service syncs whole directories in)")

    async def sync_in(self, lease_id: str, operations: str) -> str:
        results = []
        for op in json.loads(operations):
            if op.get("postUploadCommands"):
                raise unsupported("a sync operation with post-upload commands")
            counts = {"operationId": op["operationId"], "filesTransferred": 0, "bytesTransferred": 0}
            for file in op["files"]:
                if file.get("kind") != "directory":
                    raise unsupported("sync_in of a single file (the service syncs whole directories in)")
                if file.get("exclude") or file.get("mode") is not None or file.get("followSymlinks"):
                    raise unsupported("sync_in with exclude, mode or follow_symlinks")
                doc = await self._json(
                    "PUT",
                    f"{_lease_path(lease_id)}/files",
                    params={"path": file["targetPath"]},
                    content=pack_tree(file["sourcePath"]),
                    headers={"content-type": "application/x-tar"},
                )
                for done in doc.get("operations", []):
                    counts["filesTransferred"] += int(done.get("filesTransferred") or 0)
                    counts["bytesTransferred"] += int(done.get("bytesTransferred") or 0)
            results.append(counts)
        return json.dumps({"operations": results})

    async def sync_out(self, lease_id: str, operations: str) -> str:
        results = []
        for op in json.loads(operations):
            counts = {"operationId": op["operationId"], "filesTransferred": 0, "bytesTransferred": 0}
            for file in op["files"]:
                if file.get("exclude") or file.get("followSymlinks"):
                    raise unsupported("sync_out with exclude or follow_symlinks")
                kind = file.get("kind", "directory")
                response = await self._call(
                    "GET", f"{_lease_path(lease_id)}/files", params={"path": file["sourcePath"], "kind": kind}
                )
                target = file["targetPath"]
                if kind == "directory":
                    counts["filesTransferred"] += unpack(io.BytesIO(response.content), target)
                else:
                    with tempfile.TemporaryDirectory(prefix="envrt-out-", dir=os.path.dirname(os.path.abspath(target))) as staging:
                        counts["filesTransferred"] += unpack(io.BytesIO(response.content), staging)
                        (name,) = os.listdir(staging)
                        os.replace(os.path.join(staging, name), target)
                counts["bytesTransferred"] += len(response.content)
            results.append(counts)
        return json.dumps({"operations": results})

    # -- processes ------------------------------------------------------------------

    def lifecycle_verbs(self) -> "LifecycleVerbs":
        return LifecycleVerbs()

    def process_verbs(self) -> "ProcessVerbs":
        return ProcessVerbs(self)


class LifecycleVerbs:
    """The life-cycle v2 calls and exposed ports: ``envrt serve`` has no route for any of
    them yet, so each is refused before any request, with its exact text."""

    async def pause(self, lease_id: str) -> str:
        raise unsupported("Lease.pause")

    async def unpause(self, lease_id: str) -> str:
        raise unsupported("Lease.unpause")

    async def fork(self, lease_id: str, count: int) -> str:
        raise unsupported("Lease.fork")

    async def set_idle_timeout(self, lease_id: str, idle: float) -> str:
        raise unsupported("Lease.set_idle_timeout")

    async def keep_alive(self, lease_id: str) -> str:
        raise unsupported("Lease.keep_alive")

    async def release_matching(self, *args: Any) -> str:
        raise unsupported("Runtime.release_matching")

    async def expose(self, *args: Any) -> Any:
        raise unsupported("Lease.expose")

    def close_exposed(self, lease_id: str) -> None:
        raise unsupported("Lease.close_exposed")


class ProcessVerbs:
    """The process calls of :class:`envrt.Process` and :class:`envrt.Lease`, through the
    service."""

    def __init__(self, service: Service) -> None:
        self._service = service

    async def spawn(
        self,
        lease_id: str,
        argv: list[str],
        tty: tuple[int, int] | None,
        keep: int | None,
        stdin: bool,
        env: dict[str, str],
        cwd: str | None,
        timeout: float | None,
        idempotency_key: str | None,
        user: str | None = None,
    ) -> str:
        body: dict[str, Any] = {"argv": argv, "env": env, "stdin": "piped" if stdin else "null"}
        if tty is not None:
            body["tty"] = {"rows": tty[0], "cols": tty[1]}
        for key, value in (("keep", keep), ("cwd", cwd), ("idempotencyKey", idempotency_key), ("user", user)):
            if value is not None:
                body[key] = value
        if timeout is not None:
            body["timeoutMs"] = round(timeout * 1000)
        return json.dumps(await self._service._json("POST", f"{_lease_path(lease_id)}/processes", json=body))

    async def processes(self, lease_id: str) -> str:
        return json.dumps(await self._service._json("GET", f"{_lease_path(lease_id)}/processes"))

    async def process(self, process_id: str) -> str:
        return json.dumps(await self._service._json("GET", _process_path(process_id)))

    async def output(self, process_id: str, every: int | None, per_stream: str | None) -> "OutputLines":
        offsets: dict[str, int] = json.loads(per_stream) if per_stream else {}
        if every is not None:
            record = json.loads(await self.process(process_id))
            offsets = {info["stream"]: every for info in record.get("streams") or []}
        lines = self._service._lines("GET", f"{_process_path(process_id)}/output", params=offsets)
        return OutputLines(lines)

    async def write_stdin(self, process_id: str, data: bytes) -> None:
        await self._service._call("POST", f"{_process_path(process_id)}/stdin", content=data)

    async def close_stdin(self, process_id: str) -> None:
        await self._service._call("POST", f"{_process_path(process_id)}/stdin/close")

    async def signal(self, process_id: str, signal: str) -> str:
        doc = await self._service._json("POST", f"{_process_path(process_id)}/signal", json={"signal": signal})
        return json.dumps(doc)

    async def resize(self, process_id: str, rows: int, cols: int) -> None:
        await self._service._call("POST", f"{_process_path(process_id)}/resize", json={"rows": rows, "cols": cols})

    async def wait(self, process_id: str, timeout: float | None) -> str:
        params = {} if timeout is None else {"timeoutMs": round(timeout * 1000)}
        return json.dumps(await self._service._json("GET", f"{_process_path(process_id)}/wait", params=params))


class OutputLines:
    """A process's output lines, as the extension module's output events:
    ``(kind, stream, offset, data, info)`` with kind ``chunk`` or ``exit``; ``None`` at
    the end."""

    def __init__(self, lines: Any) -> None:
        self._lines = lines
        self._done = False

    async def next(self) -> tuple[str, str | None, int, bytes, str | None] | None:
        if self._done:
            return None
        async for line in self._lines:
            if "exit" in line:
                self._done = True
                return ("exit", None, 0, b"", json.dumps(line["exit"]))
            if "error" in line:
                self._done = True
                raise from_native(line["error"]["kind"], line["error"]["message"], None)
            return ("chunk", line["stream"], int(line["offset"]), base64.b64decode(line["data"]), None)
        self._done = True
        return None
