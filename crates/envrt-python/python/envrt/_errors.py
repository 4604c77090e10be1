"""Exceptions of the envrt package.

Every error the runtime raises is an :class:`EnvrtError` whose ``str()`` is the exact text
of envrt's contract and whose ``kind`` is the stable machine name
(``lease_not_found``, ``source_missing``, ...). Where Python has a matching built-in
class the exception is also an instance of it, so ``except FileNotFoundError`` works:

======================================  =====================================
kind (or the operating-system cause)    also an instance of
======================================  =====================================
``source_missing``, ``file_not_found``  :class:`FileNotFoundError`
``path_outside_workspace``, EACCES,
``permission_denied``,
``tenant_mismatch``, ``network_refused``,
``unauthenticated``, ``forbidden``      :class:`PermissionError`
``source_kind`` (a file was expected),
``is_a_directory``                      :class:`IsADirectoryError`
``source_kind`` (a directory expected)  :class:`NotADirectoryError`
``lease_expired``, ``lease_idle_ended``  :class:`TimeoutError`
``lease_not_found``, ``environment_…``,
``process_not_found``                   :class:`LookupError`
``…_unsupported``, ``duplex_not_granted`` :class:`NotImplementedError`
``invalid_input``, ``invalid_glob``, …,
``process_offset_dropped``,
``process_offset_past_end``,
``process_no_stream``,
``process_unknown_signal``,
``process_idempotency_conflict``,
``process_spawn_refused``,
``invalid_request``,
``body_too_large``                      :class:`ValueError`
======================================  =====================================

``user_refused`` (exec as a user the driver will not run as) is
:class:`EnvrtUserRefusedError`, with no built-in base, as are ``process_exited``, ``process_no_tty`` and
``process_stdin_not_piped`` (a verb the process's state refuses), ``lease_paused`` (a
paused lease refusing an operation) and ``lease_not_ready`` (a readiness command that
failed): plain :class:`EnvrtError`, told apart by ``kind``.
"""

from __future__ import annotations


class EnvrtError(Exception):
    """An error of envrt: ``str(error)`` is the contract's exact text."""

    kind: str
    """The stable machine name of the error's class."""

    def __init__(self, message: str, kind: str = "other") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return self.message


class EnvrtFileNotFoundError(EnvrtError, FileNotFoundError):
    """A file or sync source that does not exist."""


class EnvrtPermissionError(EnvrtError, PermissionError):
    """Access refused: a path outside the lease workspace, or a permission the OS denied."""


class EnvrtIsADirectoryError(EnvrtError, IsADirectoryError):
    """A directory where a file was expected."""


class EnvrtNotADirectoryError(EnvrtError, NotADirectoryError):
    """A file where a directory was expected."""


class EnvrtTimeoutError(EnvrtError, TimeoutError):
    """A lease past its expiry or ended by its idle timeout, or a command that timed out."""


class EnvrtLookupError(EnvrtError, LookupError):
    """An unknown lease, environment or process."""


class EnvrtUnsupportedError(EnvrtError, NotImplementedError):
    """An operation the driver, or the lease's capability snapshot, does not offer."""


class EnvrtValueError(EnvrtError, ValueError):
    """Input the runtime or a driver refuses."""


class EnvrtUserRefusedError(EnvrtError):
    """``exec(user=...)`` the driver cannot honour (the command did not run)."""


_BY_OS = {
    "not_found": EnvrtFileNotFoundError,
    "permission_denied": EnvrtPermissionError,
    "is_a_directory": EnvrtIsADirectoryError,
    "not_a_directory": EnvrtNotADirectoryError,
}

_BY_KIND = {
    "source_missing": EnvrtFileNotFoundError,
    "file_not_found": EnvrtFileNotFoundError,
    "permission_denied": EnvrtPermissionError,
    "is_a_directory": EnvrtIsADirectoryError,
    "user_refused": EnvrtUserRefusedError,
    "path_outside_workspace": EnvrtPermissionError,
    "tenant_mismatch": EnvrtPermissionError,
    "lease_expired": EnvrtTimeoutError,
    "lease_idle_ended": EnvrtTimeoutError,
    "lease_not_found": EnvrtLookupError,
    "environment_not_found": EnvrtLookupError,
    "duplex_not_granted": EnvrtUnsupportedError,
    "invalid_input": EnvrtValueError,
    "invalid_glob": EnvrtValueError,
    "invalid_release_status": EnvrtValueError,
    "post_upload_cwd": EnvrtValueError,
    "process_not_found": EnvrtLookupError,
    "process_offset_dropped": EnvrtValueError,
    "process_offset_past_end": EnvrtValueError,
    "process_no_stream": EnvrtValueError,
    "process_unknown_signal": EnvrtValueError,
    "process_idempotency_conflict": EnvrtValueError,
    "process_spawn_refused": EnvrtValueError,
    "network_refused": EnvrtPermissionError,
    # The kinds of envrt serve's own refusals (Runtime.connect).
    "unauthenticated": EnvrtPermissionError,
    "forbidden": EnvrtPermissionError,
    "invalid_request": EnvrtValueError,
    "body_too_large": EnvrtValueError,
}


def from_native(kind: str, message: str, os_class: str | None) -> EnvrtError:
    """The exception for a native error (called by the extension module)."""
    cls = _BY_OS.get(os_class or "") or _BY_KIND.get(kind)
    if cls is None:
        cls = EnvrtUnsupportedError if kind.endswith("_unsupported") else EnvrtError
    return cls(message, kind)
