// One process, two clients, one restart: spawned through this client, the service stopped
// (SIGTERM) and started again on the same state, then reattached by id and read from
// offset 0 through the Python package (`envrt.Runtime.connect`), which also feeds its stdin
// and waits for its end. The Python is `$ENVRT_PYTHON`, else the project's venv
// (`$ENVRT_VENV`, default /opt/envrt-venv); the package is this checkout's
// (crates/envrt-python/python, built in place by `cargo xtask ci`'s pytest step). Without
// a Python the test skips loudly, and fails when CI is set.

import { test, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { Service } from "./service.js";

const here = dirname(fileURLToPath(import.meta.url));
const python = process.env.ENVRT_PYTHON ?? `${process.env.ENVRT_VENV ?? "/opt/envrt-venv"}/bin/python`;
const packageDir = resolve(here, "../../../../crates/envrt-python/python");

const service = new Service();

let token: string | undefined;

after(async () => {
  // Whatever a failed test left: its leases end, and their processes with them.
  if (token) {
    if (!service.running) await service.start();
    const client = service.client(token);
    for (const lease of await client.listLeases().catch(() => [])) {
      await client.destroyLease(lease.id).catch(() => undefined);
    }
  }
  await service.remove();
});

// Reattaches to the process named on the command line, feeds it, reads it all from 0.
const reader = `
import asyncio, json, sys, envrt
async def main(url, token, pid):
    async with await envrt.Runtime.connect(url, token) as runtime:
        process = await runtime.process(pid)
        before = str(process.status)
        await process.write("go\\n")
        output = process.output(0)
        got = await output.read_all()
        print(json.dumps({"before": before, "stdout": got.get("stdout", b"").decode(),
                          "stderr": got.get("stderr", b"").decode(), "exit": str(output.exit)}))
asyncio.run(main(*sys.argv[1:]))
`;

test("a process spawned here is read from offset 0 through the Python client after a restart", async (t) => {
  if (!existsSync(python)) {
    const message = `no Python at ${python} (set ENVRT_PYTHON or ENVRT_VENV)`;
    if (process.env.CI) assert.fail(message);
    t.skip(`SKIPPED: ${message}`);
    return;
  }
  token = service.token("acme");
  await service.start();
  const client = service.client(token);
  const lease = await client.acquireLease({ environmentId: "local" });
  const info = await client.spawn(lease.id, {
    argv: ["sh", "-c", "echo one; echo two >&2; read x; echo three $x"],
    stdin: "piped",
  });
  // Both first lines are out before the stop.
  let out = "";
  let err = "";
  for await (const event of client.output(info.id)) {
    if (event.type !== "chunk") break;
    if (event.stream === "stdout") out += event.data.toString();
    if (event.stream === "stderr") err += event.data.toString();
    if (out === "one\n" && err === "two\n") break;
  }
  assert.deepEqual([out, err], ["one\n", "two\n"]);
  assert.equal(await service.stop(), 0);
  await service.start();

  const printed = execFileSync(python, ["-c", reader, `unix:${service.socketPath}`, token, info.id], {
    env: { ...process.env, PYTHONPATH: packageDir },
  }).toString();
  const owner = token;
  assert.deepEqual(JSON.parse(printed), {
    before: "running",
    stdout: "one\nthree go\n",
    stderr: "two\n",
    exit: "exited(0)",
  });
  assert.deepEqual((await service.client(owner).process(info.id)).status, { state: "exited", code: 0 });
  await service.client(owner).releaseLease(lease.id);
});
