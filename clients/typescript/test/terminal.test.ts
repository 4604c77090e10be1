// A process's terminal over WebSocket through the client against a real `envrt serve`:
// output from offset 0, input, resize, the final record; a detach that leaves the process
// running and a reattach that replays from 0; the refusal of a process without a terminal.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";

import { EnvrtClient, EnvrtError, type Terminal } from "../src/index.js";
import { Service } from "./service.js";

const service = new Service();
let client: EnvrtClient;

before(async () => {
  const token = service.token("acme");
  await service.start();
  client = service.client(token);
});

after(async () => {
  for (const lease of await client.listLeases().catch(() => [])) {
    await client.destroyLease(lease.id).catch(() => undefined);
  }
  await service.remove();
});

/** Reads `terminal` into `seen` until the text holds `needle`. */
async function readUntil(reader: AsyncIterator<Buffer>, seen: { text: string }, needle: string): Promise<void> {
  while (!seen.text.includes(needle)) {
    const next = await reader.next();
    assert.ok(!next.done, `the terminal ended before ${JSON.stringify(needle)}: ${JSON.stringify(seen.text)}`);
    seen.text += next.value.toString("utf8");
  }
}

function reader(terminal: Terminal): AsyncIterator<Buffer> {
  return terminal[Symbol.asyncIterator]();
}

test("a terminal carries input, output and resize and ends with the final record", async () => {
  const lease = await client.acquireLease({ environmentId: "local" });
  const info = await client.spawn(lease.id, {
    argv: ["sh", "-c", "stty size; read a; echo got:$a; read b; stty size; exit 3"],
    tty: { rows: 24, cols: 80 },
  });
  const terminal = await client.terminal(info.id, 0);
  const out = reader(terminal);
  const seen = { text: "" };
  await readUntil(out, seen, "24 80");
  terminal.write("hi\n");
  await readUntil(out, seen, "got:hi");
  terminal.resize(30, 100);
  terminal.write(Buffer.from("go\n"));
  await readUntil(out, seen, "30 100");
  const ended = await terminal.ended;
  assert.deepEqual([ended.id, ended.status], [info.id, { state: "exited", code: 3 }]);
  await client.releaseLease(lease.id);
});

test("a detached terminal leaves its process running, and a reattach replays from offset 0", async () => {
  const lease = await client.acquireLease({ environmentId: "local" });
  const info = await client.spawn(lease.id, {
    argv: ["sh", "-c", "echo first; read a; echo second:$a"],
    tty: { rows: 24, cols: 80 },
  });
  const first = await client.terminal(info.id);
  await readUntil(reader(first), { text: "" }, "first");
  first.close();
  await assert.rejects(first.ended, (e: unknown) => e instanceof EnvrtError && e.kind === "detached");
  assert.deepEqual((await client.process(info.id)).status, { state: "running" });
  const again = await client.terminal(info.id, 0);
  const out = reader(again);
  const seen = { text: "" };
  await readUntil(out, seen, "first");
  again.write("x\n");
  await readUntil(out, seen, "second:x");
  assert.deepEqual((await again.ended).status, { state: "exited", code: 0 });
  await client.releaseLease(lease.id);
});

test("a process without a terminal is refused with the exact status, kind and message", async () => {
  const lease = await client.acquireLease({ environmentId: "local" });
  const info = await client.spawn(lease.id, { argv: ["sleep", "600"] });
  await assert.rejects(client.terminal(info.id), (e: unknown) => {
    assert.ok(e instanceof EnvrtError, String(e));
    assert.deepEqual(
      [e.status, e.kind, e.message],
      [409, "process_no_tty", `Process "${info.id}" has no terminal to attach to.`],
    );
    return true;
  });
  await client.signal(info.id, "KILL");
  await client.releaseLease(lease.id);
});
