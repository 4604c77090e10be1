"""Tar streams for a runtime reached through ``envrt serve`` (``Runtime.connect``): what a
sync in sends (a host tree or one file, packed here) and what a sync out receives
(unpacked here, with no entry allowed to leave the target).

The service packs what the lease holds, and the lease is hostile: every entry is checked
before it is written. An absolute name, a ``..`` component, a hard link, a device or a
FIFO is refused; a symbolic link is written as a link and never followed, and no later
entry is written through one (each parent is checked to be a real directory below the
target).
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from typing import BinaryIO

from ._errors import EnvrtValueError


def pack_tree(source: str) -> bytes:
    """A tar of the contents of the host directory ``source`` (names relative to it);
    symbolic links are packed as links."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(os.listdir(source)):
            tar.add(os.path.join(source, name), arcname=name, recursive=True)
    return buffer.getvalue()


def refused(name: str, why: str) -> EnvrtValueError:
    """``envrt: the service's tar entry "{name}" {why}; nothing more was unpacked``."""
    return EnvrtValueError(
        f'envrt: the service\'s tar entry "{name}" {why}; nothing more was unpacked', "invalid_input"
    )


def _parts(name: str) -> list[str]:
    if name.startswith("/"):
        raise refused(name, "is an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise refused(name, "has a \"..\" component")
    return parts


def _parent(root: str, parts: list[str], name: str) -> str:
    """The real directory the entry ``parts`` goes into, created as needed; refuses a path
    through anything but a real directory (a link written by an earlier entry)."""
    here = root
    for part in parts[:-1]:
        here = os.path.join(here, part)
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            os.mkdir(here, 0o755)
            continue
        if not stat.S_ISDIR(mode):
            raise refused(name, "goes through a path that is not a directory")
    return here


def unpack(data: BinaryIO, target: str) -> int:
    """Unpacks the tar ``data`` into the host directory ``target`` (created when missing);
    answers the number of files written."""
    os.makedirs(target, exist_ok=True)
    root = os.path.realpath(target)
    files = 0
    with tarfile.open(fileobj=data, mode="r|") as tar:
        for member in tar:
            parts = _parts(member.name)
            if not parts:
                continue
            path = os.path.join(_parent(root, parts, member.name), parts[-1])
            if member.isdir():
                if not os.path.lexists(path):
                    os.mkdir(path, 0o755)
                elif not stat.S_ISDIR(os.lstat(path).st_mode):
                    raise refused(member.name, "would replace a path that is not a directory")
                os.chmod(path, (member.mode & 0o777) | 0o700)
            elif member.isfile():
                source = tar.extractfile(member)
                assert source is not None
                if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
                    raise refused(member.name, "would replace a path that is not a regular file")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as out:
                    while chunk := source.read(1 << 16):
                        out.write(chunk)
                os.chmod(path, member.mode & 0o777)
                files += 1
            elif member.issym():
                if os.path.lexists(path):
                    raise refused(member.name, "would replace an existing path with a link")
                os.symlink(member.linkname, path)
            else:
                raise refused(member.name, "is not a file, a directory or a symbolic link")
    return files
