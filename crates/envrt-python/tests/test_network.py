"""A lease's network policy from Python (contract section 10): ``Runtime.acquire(network=...)``
and ``Lease.update_network(...)``, refused with the contract's exact texts (as
:class:`envrt.EnvrtPermissionError`, kind ``network_refused``) where the driver cannot
enforce the policy or the environment does not grant it, and a policy the grammar refuses
as a ``ValueError`` naming the entry."""

from __future__ import annotations

from pathlib import Path

import pytest

import envrt
from conftest import get_site

SHARES_HOST = (
    'Network policy refused: driver "local" cannot enforce a network policy: its commands share the '
    'host\'s network; drop the policy, or set network = "host" to run on the host network unrestricted'
)


async def test_a_policy_on_a_driver_that_shares_the_host_network_is_refused(site_root: Path) -> None:
    local = get_site("local", site_root)
    with pytest.raises(envrt.EnvrtPermissionError) as refused:
        await local.acquire(network={"egress": "none"})
    assert str(refused.value) == SHARES_HOST
    assert refused.value.kind == "network_refused"
    async with await local.acquire() as lease:
        with pytest.raises(envrt.EnvrtPermissionError) as refused:
            await lease.update_network({"egress": "none"})
        assert str(refused.value) == SHARES_HOST


async def test_a_policy_the_grammar_refuses_is_a_value_error_naming_the_entry(site_root: Path) -> None:
    local = get_site("local", site_root)
    with pytest.raises(ValueError, match=r'^network policy: allow: "py\*\.org": bad wildcard'):
        await local.acquire(network={"egress": "allow", "allow": ["py*.org"]})


async def test_an_isolated_lease_narrows_to_none_and_is_refused_what_it_was_not_granted(site_root: Path) -> None:
    docker = get_site("docker", site_root)
    async with await docker.acquire(network={"egress": "none"}) as lease:
        assert await lease.update_network({"egress": "none"}) == "no network"
        with pytest.raises(envrt.EnvrtPermissionError) as refused:
            await lease.update_network({"egress": "allow", "allow": ["pypi.org:443"]})
        assert str(refused.value) == (
            'Network policy refused: the lease asks for "pypi.org:443", which the environment\'s policy '
            "neither allows nor lists as grantable"
        )
