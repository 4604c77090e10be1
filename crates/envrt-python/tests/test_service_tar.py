"""What ``Runtime.connect`` unpacks from a service's tar (``envrt._remote_files``): the
lease's files are hostile, so no entry may land outside the target, through a link, or as
anything but a file, a directory or a link; each refusal has its exact text."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from envrt import EnvrtValueError
from envrt._remote_files import pack_tree, unpack


def tar_of(*members: tuple[tarfile.TarInfo, bytes | None]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    buffer.seek(0)
    return buffer


def entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info


def test_a_packed_tree_unpacks_the_same(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "d").mkdir(parents=True)
    (source / "d" / "f").write_bytes(b"x" * 70000)
    (source / "l").symlink_to("d/f")
    assert unpack(io.BytesIO(pack_tree(str(source))), str(tmp_path / "out")) == 1
    assert (tmp_path / "out" / "d" / "f").read_bytes() == b"x" * 70000
    assert (tmp_path / "out" / "l").readlink() == Path("d/f")


@pytest.mark.parametrize(
    ("members", "name", "why"),
    [
        ([(entry("/etc/x"), b"no")], "/etc/x", "is an absolute path"),
        ([(entry("a/../../x"), b"no")], "a/../../x", 'has a ".." component'),
        ([(entry("h", tarfile.LNKTYPE, "/etc/passwd"), None)], "h", "is not a file, a directory or a symbolic link"),
        ([(entry("fifo", tarfile.FIFOTYPE), None)], "fifo", "is not a file, a directory or a symbolic link"),
        (
            [(entry("out", tarfile.SYMTYPE, "../outside"), None), (entry("out/x"), b"no")],
            "out/x",
            "goes through a path that is not a directory",
        ),
        (
            [(entry("f"), b"a"), (entry("f", tarfile.SYMTYPE, "/etc/passwd"), None)],
            "f",
            "would replace an existing path with a link",
        ),
        (
            [(entry("l", tarfile.SYMTYPE, "/etc/passwd"), None), (entry("l"), b"no")],
            "l",
            "would replace a path that is not a regular file",
        ),
    ],
)
def test_a_hostile_entry_is_refused_with_its_text(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], name: str, why: str
) -> None:
    target = tmp_path / "t"
    (tmp_path / "outside").mkdir()
    with pytest.raises(EnvrtValueError) as refused:
        unpack(tar_of(*members), str(target))
    assert (refused.value.kind, str(refused.value)) == (
        "invalid_input",
        f'envrt: the service\'s tar entry "{name}" {why}; nothing more was unpacked',
    )
    assert list((tmp_path / "outside").iterdir()) == []
    assert not (tmp_path / "x").exists()
