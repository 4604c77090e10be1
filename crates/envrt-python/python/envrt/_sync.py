"""Sync operations of the Python API: :class:`SyncFile`, :class:`SyncOperation`, their
contract JSON, and the merge of a ``sync_out`` into an existing host directory."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Sequence

from ._errors import EnvrtValueError

@dataclass
class SyncFile:
    """One file or directory of a sync operation (the contract's ``SyncFile``)."""

    source: str
    """Where to read: host-side for ``sync_in``, environment-side for ``sync_out``."""
    target: str
    """Where to write: environment-side for ``sync_in``, host-side for ``sync_out``."""
    kind: Literal["file", "directory"] = "directory"
    mode: int | None = None
    exclude: Sequence[str] = ()
    follow_symlinks: bool | None = None
    replace: bool = False
    """A directory that already exists at ``target`` is replaced whole (the contract's
    sync). By default it is not: ``sync_out`` merges into it (as ``cp -r`` and ``docker cp``
    do, deleting nothing the copy does not name) and ``sync_in`` refuses it."""

    def to_contract(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sourcePath": self.source, "targetPath": self.target, "kind": self.kind}
        if self.mode is not None:
            out["mode"] = self.mode
        if self.exclude:
            out["exclude"] = list(self.exclude)
        if self.follow_symlinks is not None:
            out["followSymlinks"] = self.follow_symlinks
        return out


@dataclass
class SyncOperation:
    """Files transferred together, then (sync in only) shell commands run after they land."""

    files: Sequence[SyncFile]
    operation_id: str = "sync"
    post_upload_commands: Sequence[Mapping[str, Any]] = field(default_factory=list)

    def to_contract(self) -> dict[str, Any]:
        return {
            "operationId": self.operation_id,
            "files": [f.to_contract() for f in self.files],
            "postUploadCommands": [dict(c) for c in self.post_upload_commands],
        }


def _operations(items: Iterable[SyncOperation | SyncFile]) -> str:
    ops: list[dict[str, Any]] = []
    loose: list[SyncFile] = []
    for item in items:
        if isinstance(item, SyncFile):
            loose.append(item)
        else:
            ops.append(item.to_contract())
    if loose:
        ops.insert(0, SyncOperation(loose).to_contract())
    return json.dumps(ops)


def _files(items: Iterable[SyncOperation | SyncFile]) -> list[SyncFile]:
    out: list[SyncFile] = []
    for item in items:
        out.extend([item] if isinstance(item, SyncFile) else item.files)
    return out


class _MergeOut:
    """``sync_out`` of a directory into an existing host directory without deleting what is
    there: the tree lands complete in a fresh staging directory inside the target (same
    filesystem), then each entry is moved into place by one ``rename`` (a file of the same
    name is replaced, a directory of the same name merged into). A failed transfer leaves
    the target as it was."""

    def __init__(self, items: Sequence[SyncOperation | SyncFile]) -> None:
        self.items: list[SyncOperation | SyncFile] = []
        self._staged: list[tuple[str, str]] = []
        for item in items:
            if isinstance(item, SyncFile):
                self.items.append(self._stage(item))
            else:
                self.items.append(
                    SyncOperation([self._stage(f) for f in item.files], item.operation_id, item.post_upload_commands)
                )

    def _stage(self, file: SyncFile) -> SyncFile:
        target = os.path.abspath(file.target)
        if file.kind != "directory" or file.replace or not os.path.lexists(target):
            return file
        if os.path.islink(target) or not os.path.isdir(target):
            raise EnvrtValueError(
                f'envrt: "{file.target}" exists and is not a directory: sync_out does not replace it; '
                "pass SyncFile(..., replace=True) to replace it",
                "invalid_input",
            )
        staging = os.path.join(target, f".envrt-sync-{os.getpid()}-{time.time_ns()}")
        self._staged.append((staging, target))
        return dataclasses.replace(file, target=staging)

    def __enter__(self) -> "_MergeOut":
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        for staging, target in self._staged:
            if exc_type is None and os.path.isdir(staging):
                _move_into(staging, target)
            shutil.rmtree(staging, ignore_errors=True)


def _move_into(source: str, target: str, check: bool = True) -> None:
    """Moves every entry of ``source`` into the directory ``target``, merging directories.
    A directory over a non-directory (or the reverse) is refused before anything moves."""
    if check:
        _check_merge(source, target)
    for name in os.listdir(source):
        src, dst = os.path.join(source, name), os.path.join(target, name)
        if _real_dir(src) and _real_dir(dst):
            _move_into(src, dst, check=False)
        else:
            os.replace(src, dst)


def _real_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def _check_merge(source: str, target: str) -> None:
    for name in os.listdir(source):
        src, dst = os.path.join(source, name), os.path.join(target, name)
        if _real_dir(src) and _real_dir(dst):
            _check_merge(src, dst)
        elif _real_dir(src) and os.path.lexists(dst):
            raise EnvrtValueError(
                f'envrt: "{dst}" exists and is not a directory: a copied directory does not replace it',
                "invalid_input",
            )
        elif _real_dir(dst):
            raise EnvrtValueError(
                f'envrt: "{dst}" is a directory: a copied file of that name does not replace it', "invalid_input"
            )
