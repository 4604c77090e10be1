"""Shared fixtures: one envrt runtime per driver for the whole session.

Drivers: ``local`` always; ``docker`` when an engine answers and the test image
(``ENVRT_TEST_IMAGE``, default ``envrt-test:latest``) is there; ``sandbox`` when the
reference worker is found (``ENVRT_SANDBOX_WORKER``, else ``envrt-sandbox-worker`` in the
cargo target directory). A missing Docker or worker skips loudly, and fails instead with
``ENVRT_REQUIRE_DOCKER=1`` / ``ENVRT_REQUIRE_SANDBOX=1`` (as in CI).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

import envrt

REPO = Path(__file__).resolve().parents[3]
DRIVERS = ["local", "docker", "sandbox"]


def required(name: str) -> bool:
    return os.environ.get(name) == "1"


def sandbox_worker() -> Path | None:
    explicit = os.environ.get("ENVRT_SANDBOX_WORKER")
    if explicit:
        return Path(explicit)
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    for profile in ("debug", "release"):
        candidate = target / profile / "envrt-sandbox-worker"
        if candidate.is_file():
            return candidate
    found = shutil.which("envrt-sandbox-worker")
    return Path(found) if found else None


class Site:
    """A runtime with one environment ``env`` on the driver under test."""

    def __init__(self, driver: str, runtime: envrt.Runtime, environment: str) -> None:
        self.driver = driver
        self.runtime = runtime
        self.environment = environment

    async def acquire(self, **kwargs: Any) -> envrt.Lease:
        return await self.runtime.acquire(self.environment, **kwargs)


def _make_site(driver: str, root: Path) -> Site:
    async def build() -> Site:
        if driver == "local":
            runtime = await envrt.Runtime.create(local_root=root / "local")
            return Site(driver, runtime, "local")
        if driver == "docker":
            image = os.environ.get("ENVRT_TEST_IMAGE", "envrt-test:latest")
            runtime = await envrt.Runtime.create(local_root=root / "local", docker=True)
            await runtime.put_environment("docker", "docker", config={"image": image})
            lease = await runtime.acquire("docker")  # the image must be there
            await lease.release()
            return Site(driver, runtime, "docker")
        worker = sandbox_worker()
        if worker is None:
            raise FileNotFoundError("envrt-sandbox-worker was not found (build it or set ENVRT_SANDBOX_WORKER)")
        runtime = await envrt.Runtime.create(
            local_root=root / "local", sandbox_worker=worker, sandbox_root=root / "sandbox"
        )
        await runtime.put_environment("sandbox", "sandbox")
        return Site(driver, runtime, "sandbox")

    # In a thread of its own: the caller may be inside a running event loop (an async
    # fixture); the runtime itself is not tied to any loop.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, build()).result()


@pytest.fixture(scope="session")
def site_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="envrt-pytest-") as root:
        yield Path(root)


_SITES: dict[str, Site | BaseException] = {}


def get_site(driver: str, root: Path) -> Site:
    """The session's site for ``driver``; skips (or fails when required) without it."""
    if driver not in _SITES:
        try:
            _SITES[driver] = _make_site(driver, root)
        except Exception as error:  # an unreachable engine, a missing image or worker
            _SITES[driver] = error
    site = _SITES[driver]
    if isinstance(site, BaseException):
        variable = {"docker": "ENVRT_REQUIRE_DOCKER", "sandbox": "ENVRT_REQUIRE_SANDBOX"}.get(driver)
        if variable and required(variable):
            pytest.fail(f"{variable}=1 but the {driver} driver is not usable: {site}")
        if driver == "local":
            raise site
        pytest.skip(f"SKIPPED: the {driver} driver is not usable here: {site}")
    return site


@pytest.fixture(params=DRIVERS)
def site(request: pytest.FixtureRequest, site_root: Path) -> Site:
    return get_site(request.param, site_root)
