"""``Runtime.create(**drivers)``: every keyword is a driver key with that driver's
``envrt.toml`` section, applied through the Rust driver registry; the older keywords
(``local_root``, ``docker_host``) still work, and a key no driver has is refused with
the known ones."""

from __future__ import annotations

import os

import pytest

import envrt


def test_known_drivers_are_the_registry_in_order() -> None:
    assert envrt.known_drivers() == ["local", "docker", "ssh", "sandbox"]


async def test_the_local_section_sets_the_workspace_root(tmp_path) -> None:
    runtime = await envrt.Runtime.create(local={"root": os.fspath(tmp_path / "ws")})
    assert "docker" not in runtime.driver_keys()
    assert {"local", "ssh"} <= set(runtime.driver_keys())
    async with await runtime.acquire("local") as lease:
        result = await lease.exec(["pwd"])
    assert result.stdout.decode().startswith(os.fspath(tmp_path / "ws") + "/lease-")


async def test_an_unknown_driver_key_names_the_known_ones() -> None:
    with pytest.raises(ValueError) as refused:
        await envrt.Runtime.create(zzz={})
    assert str(refused.value) == 'unknown driver "zzz"; this build knows local, docker, ssh, sandbox'


async def test_a_section_is_read_with_the_file_formats_exact_refusals() -> None:
    with pytest.raises(ValueError) as refused:
        await envrt.Runtime.create(local={"paths": "anywhere"})
    assert str(refused.value) == '[local] paths expects "workspace" or "host", got "anywhere"'
    with pytest.raises(ValueError) as refused:
        await envrt.Runtime.create(local={"rot": "/x"})
    assert str(refused.value) == "unknown field `rot`, expected `root` or `paths`"
