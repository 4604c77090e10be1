"""envrt.toml files for the Inspect provider, one per driver, in a private directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import sandbox_worker

IMAGE = os.environ.get("ENVRT_TEST_IMAGE", "envrt-test:latest")

# The local site opts in to host paths (`[local] paths = "host"`), as Inspect's own local
# provider reads and writes anywhere on the host; the default (the workspace) is pinned by
# test_runtime.py. Docker runs its commands as an unprivileged user (nobody), as the issue
# asks.
LOCAL_SECTION = {"local": 'paths = "host"\n'}
ENVIRONMENTS = {
    "local": "",
    "docker": f"""
[[environment]]
id = "docker"
driver = "docker"
[environment.config]
image = "{IMAGE}"
user = "65534:65534"
""",
    # The reference worker runs each sandbox as nobody (--sandbox-uid/--sandbox-gid).
    "sandbox": """
[[plugin]]
manifest = "sandbox-plugin.json"
[[environment]]
id = "sandbox"
driver = "sandbox"
""",
}


def _sandbox_manifest(folder: Path) -> str:
    worker = sandbox_worker()
    command = [str(worker), "--root", str(folder / "sandbox-leases"), "--sandbox-uid", "65534", "--sandbox-gid", "65534"]
    return json.dumps(
        {
            "id": "envrt-sandbox-nobody",
            "worker": {"command": command},
            "environmentDrivers": [
                {
                    "driverKey": "sandbox",
                    "kind": "sandbox_provider",
                    "displayName": "bwrap sandbox as nobody",
                    "sandboxCapabilities": {
                        "incrementalSessionOutput": True,
                        "concurrentSyncOperations": True,
                        "duplexCommandStream": True,
                    },
                }
            ],
        }
    )


def write_config(root: Path, driver: str) -> tuple[Path, Path]:
    """The envrt.toml for ``driver`` (its default environment) and its state directory."""
    folder = root / f"inspect-{driver}"
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "envrt.toml"
    if driver == "sandbox":
        (folder / "sandbox-plugin.json").write_text(_sandbox_manifest(folder))
    local = f'[local]\nroot = "{folder / "workspaces"}"\n{LOCAL_SECTION.get(driver, "")}'
    config.write_text(f'default = "{driver}"\n{local}{ENVIRONMENTS[driver]}')
    return config, folder / "state"


