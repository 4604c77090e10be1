"""``Lease.expose(port)`` (contract section 10, exposed lease ports) on the sandbox driver
(the reference worker): a server the lease runs as a persistent process is reached from
the host on loopback, on a unix socket, and beyond loopback with its token; the endpoint
closes with the lease; each refusal with the facade's exact text."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import AsyncIterator

import pytest

import envrt
from conftest import get_site

PORT = 8124
SERVER = (
    "import socket\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    f"s.bind(('127.0.0.1', {PORT})); s.listen(8); print('listening', flush=True)\n"
    "while True:\n"
    "    c, _ = s.accept(); c.sendall(b'hello from the lease\\n'); c.close()\n"
)
GREETING = b"hello from the lease\n"


@pytest.fixture
async def serving(site_root: Path) -> AsyncIterator[envrt.Lease]:
    """A sandbox lease whose persistent process listens on PORT (awaited: it says so)."""
    sandbox = get_site("sandbox", site_root)
    lease = await sandbox.acquire()
    try:
        process = await lease.spawn(["/usr/bin/python3", "-c", SERVER])
        seen = b""
        async for chunk in process.output():
            seen += chunk.data
            if b"listening\n" in seen:
                break
        assert b"listening\n" in seen, seen
        yield lease
    finally:
        await lease.release()


@pytest.fixture
def short_dir():
    """A directory with a short path (a unix socket's path is bounded to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="envrt-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def _read_all(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    try:
        return await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()


async def test_expose_reaches_a_server_in_the_lease_and_closes_with_it(serving: envrt.Lease, short_dir: Path) -> None:
    lease = serving
    exposed = await lease.expose(PORT)
    assert exposed.address.startswith("tcp://127.0.0.1:") and exposed.token is None
    assert (exposed.host, exposed.path, exposed.port) == ("127.0.0.1", None, PORT)
    assert exposed.host_port is not None
    assert await _read_all(*await asyncio.open_connection(exposed.host, exposed.host_port)) == GREETING

    socket_path = short_dir / "port.sock"
    on_unix = await lease.expose(PORT, unix=socket_path)
    assert (on_unix.address, on_unix.path, on_unix.host) == (f"unix://{socket_path}", str(socket_path), None)
    assert await _read_all(*await asyncio.open_unix_connection(str(socket_path))) == GREETING
    assert oct(socket_path.stat().st_mode & 0o777) == "0o600"

    # Beyond loopback only with the token: a connection must send it first.
    wide = await lease.expose(PORT, listen="0.0.0.0:0")
    assert wide.token is not None and len(wide.token) == 32 and wide.host_port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", wide.host_port)
    writer.write(wide.token.encode() + b"\n")
    await writer.drain()
    assert await _read_all(reader, writer) == GREETING
    reader, writer = await asyncio.open_connection("127.0.0.1", wide.host_port)
    writer.write(b"0" * 32 + b"\n")
    await writer.drain()
    assert await _read_all(reader, writer) == b"envrt expose: refused: wrong or missing token\n"

    # The endpoints close with the lease (its unix socket removed).
    await lease.release()
    with pytest.raises(OSError):
        await asyncio.open_connection(exposed.host, exposed.host_port)
    assert not socket_path.exists()


async def test_close_exposed_closes_the_leases_endpoints(serving: envrt.Lease) -> None:
    exposed = await serving.expose(PORT)
    assert exposed.host_port is not None
    serving.close_exposed()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", exposed.host_port)
    # Still serving: a new endpoint works.
    again = await serving.expose(PORT)
    assert again.host_port is not None
    assert await _read_all(*await asyncio.open_connection("127.0.0.1", again.host_port)) == GREETING


async def test_expose_refusals_keep_the_facade_texts(serving: envrt.Lease, short_dir: Path, site_root: Path) -> None:
    lease = serving
    with pytest.raises(envrt.EnvrtValueError) as refused:
        await lease.expose(0)
    assert (str(refused.value), refused.value.kind) == ("Invalid input: port 0 cannot be exposed", "invalid_input")
    taken = short_dir / "taken"
    taken.write_text("")
    with pytest.raises(envrt.EnvrtValueError) as refused:
        await lease.expose(PORT, unix=taken)
    assert str(refused.value) == f"Invalid input: cannot expose a port at {taken}: the path exists"
    with pytest.raises(ValueError) as refused:
        await lease.expose(PORT, listen="nowhere")
    assert str(refused.value) == 'expose: "nowhere" is not an ADDRESS:PORT'
    with pytest.raises(ValueError) as refused:
        await lease.expose(PORT, unix=short_dir / "x.sock", listen="127.0.0.1:0")
    assert str(refused.value) == "expose takes unix= or listen=, not both"

    # 16 endpoints per lease.
    for _ in range(16):
        await lease.expose(PORT)
    with pytest.raises(envrt.EnvrtValueError) as refused:
        await lease.expose(PORT)
    assert str(refused.value) == f'Invalid input: lease "{lease.id}" already has 16 exposed ports'

    local = get_site("local", site_root)
    async with await local.acquire() as on_host:
        with pytest.raises(envrt.EnvrtUnsupportedError) as refused:
            await on_host.expose(PORT)
        assert (str(refused.value), refused.value.kind) == (
            'Environment driver "local" does not support exposed lease ports.',
            "expose_unsupported",
        )
