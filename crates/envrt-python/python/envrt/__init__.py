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

import os as _os

from . import _envrt
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
from ._process import OutputChunk, Process, ProcessOutput, ProcessStatus
from ._runtime import DuplexStream, ExposedPort, Lease, ReleaseReport, Runtime, SyncFile, SyncOperation

# The wheel installs the reference sandbox worker beside this file: a ``driver = "sandbox"``
# environment without ``[[plugin]]`` finds it there (after ``[sandbox] worker`` in
# envrt.toml, before PATH).
_envrt.add_worker_search_dir(_os.path.dirname(_os.path.abspath(__file__)))

# The wheel installs the process supervisor ``envrt-agent`` beside this file too. The local
# driver looks for it through ``ENVRT_AGENT``, then beside the running executable (here the
# interpreter) and on ``PATH``: name the packaged one unless ``ENVRT_AGENT`` is already set.
# Set at import, before the module's runtime threads exist.
_agent = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "envrt-agent")
if "ENVRT_AGENT" not in _os.environ and _os.access(_agent, _os.X_OK):
    _os.environ["ENVRT_AGENT"] = _agent


def sandbox_worker(configured: str | _os.PathLike[str] | None = None) -> str:
    """Where the reference sandbox worker ``envrt-sandbox-worker`` is: ``configured`` (as
    ``[sandbox] worker``) when given, else next to the interpreter, in this package, on
    ``PATH``. Raises :class:`EnvrtError` (kind ``unavailable``) saying which binary, where
    it looked and how to set it."""
    return _os.fspath(_envrt.locate_sandbox_worker(None if configured is None else _os.fspath(configured)))

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
    "ExposedPort",
    "Lease",
    "OutputChunk",
    "Process",
    "ProcessOutput",
    "ProcessStatus",
    "ReleaseReport",
    "Runtime",
    "SyncFile",
    "SyncOperation",
    "sandbox_worker",
]
