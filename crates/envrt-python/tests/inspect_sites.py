"""envrt.toml files for the Inspect provider, one per driver, in a private directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import sandbox_worker

IMAGE = os.environ.get("ENVRT_TEST_IMAGE", "envrt-test:latest")

# Docker runs its commands as an unprivileged user (nobody), as the issue asks.
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
    config.write_text(f'default = "{driver}"\n[local]\nroot = "{folder / "workspaces"}"\n{ENVIRONMENTS[driver]}')
    return config, folder / "state"


