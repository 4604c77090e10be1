"""envrt: lease an execution environment — a local process, a Docker container, a
sandbox run by a plugin worker — run commands there, move files in and out, and open
live two-way channels, through one asyncio API backed by the Rust runtime.

>>> import asyncio, envrt
>>> async def main():
...     runtime = await envrt.Runtime.create()
...     async with await runtime.acquire("local") as lease:
...         result = await lease.exec(["echo", "hi"])
...         return result.exit_code, result.stdout
>>> asyncio.run(main())
(0, b'hi\\n')

The Inspect AI sandbox provider registers as ``"envrt"`` (see ``envrt._inspect``).
"""

from ._envrt import ExecResult, known_drivers
from ._errors import (
    EnvrtError,
    EnvrtFileNotFoundError,
    EnvrtIsADirectoryError,
    EnvrtLookupError,
    EnvrtNotADirectoryError,
    EnvrtPermissionError,
    EnvrtTimeoutError,
    EnvrtUnsupportedError,
    EnvrtUserRefusedError,
    EnvrtValueError,
)
from ._runtime import DuplexStream, Lease, Runtime, SyncFile, SyncOperation

__all__ = [
    "known_drivers",
    "DuplexStream",
    "EnvrtError",
    "EnvrtFileNotFoundError",
    "EnvrtIsADirectoryError",
    "EnvrtLookupError",
    "EnvrtNotADirectoryError",
    "EnvrtPermissionError",
    "EnvrtTimeoutError",
    "EnvrtUnsupportedError",
    "EnvrtUserRefusedError",
    "EnvrtValueError",
    "ExecResult",
    "Lease",
    "Runtime",
    "SyncFile",
    "SyncOperation",
]
