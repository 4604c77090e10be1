// Process sessions and network policies through the client against a real `envrt serve`
// (the local driver's supervisor, `envrt-agent`, beside the `envrt` binary): spawn, list,
// output from offsets as chunks then the exit, stdin, signal, resize, wait; a process that
// outlives a stop (SIGTERM) of the service and is read again from offset 0 by the next
// one; and the exact refusals.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";

import { EnvrtClient, EnvrtError, type OutputEvent, type ProcessInfo } from "../src/index.js";
import { Service } from "./service.js";

const service = new Service();
let token: string;
let client: EnvrtClient;

before(async () => {
  token = service.token("acme");
  await service.start();
  client = service.client(token);
});

after(async () => {
  // Whatever a failed test left: its leases end, and their processes with them (through a
  // service again if a test stopped it).
  if (!service.running) await service.start();
  for (const lease of await client.listLeases().catch(() => [])) {
    await client.destroyLease(lease.id).catch(() => undefined);
  }
  await service.remove();
});

/** Every event of `id`'s output from `from` until the exit. */
async function drain(c: EnvrtClient, id: string, from = {}): Promise<OutputEvent[]> {
  const events: OutputEvent[] = [];
  for await (const event of c.output(id, from)) events.push(event);
  return events;
}

/** The bytes of `stream` in `events`, checking each chunk starts where the last ended (from `start`). */
function bytesOf(events: OutputEvent[], stream: string, start = 0): Buffer {
  const parts: Buffer[] = [];
  let next = start;
  for (const event of events) {
    if (event.type !== "chunk" || event.stream !== stream) continue;
    assert.equal(event.offset, next, `${stream} chunk at ${event.offset}, expected ${next}`);
    parts.push(event.data);
    next += event.data.length;
  }
  return Buffer.concat(parts);
}

function rejectsWith(status: number, kind: string, message: string) {
  return (e: unknown) => {
    assert.ok(e instanceof EnvrtError, String(e));
    assert.deepEqual([e.status, e.kind, e.message], [status, kind, message]);
    return true;
  };
}

test("a process is spawned, fed binary stdin, read from offsets and waited", async () => {
  const lease = await client.acquireLease({ environmentId: "local" });
  const info = await client.spawn(lease.id, { argv: ["sh", "-c", "cat; printf done >&2"], stdin: "piped" });
  assert.equal(info.id, `${lease.id}/1`);
  assert.deepEqual(info.status, { state: "running" });
  assert.deepEqual(
    (await client.processes(lease.id)).map((p) => p.id),
    [info.id],
  );
  const binary = Buffer.from([0, 255, 254, 10, 104, 105]);
  await client.writeStdin(info.id, binary);
  await client.writeStdin(info.id, "text\n");
  await client.closeStdin(info.id);
  assert.deepEqual(await client.wait(info.id, 30_000), { state: "exited", code: 0 });
  const events = await drain(client, info.id);
  assert.deepEqual(bytesOf(events, "stdout"), Buffer.concat([binary, Buffer.from("text\n")]));
  assert.equal(bytesOf(events, "stderr").toString(), "done");
  const last = events[events.length - 1];
  assert.ok(last.type === "exit");
  assert.deepEqual(last.process.status, { state: "exited", code: 0 });
  const middle = await drain(client, info.id, { stdout: 4, stderr: 2 });
  assert.deepEqual(bytesOf(middle, "stdout", 4), Buffer.from("hitext\n"));
  assert.equal(bytesOf(middle, "stderr", 2).toString(), "ne");
  assert.deepEqual((await client.process(info.id)).streams.find((s) => s.stream === "stdout")?.written, 11);
  await client.destroyLease(lease.id);
});

test("a process outlives a stop of the service and is read again from offset 0, then killed", async () => {
  const lease = await client.acquireLease({ environmentId: "local" });
  const info = await client.spawn(lease.id, {
    argv: ["sh", "-c", "echo one; echo two >&2; read x; echo three; sleep 300"],
    stdin: "piped",
  });
  // A reader live at the stop is told to carry on elsewhere, from the offsets it reached.
  const seen: OutputEvent[] = [];
  const reading = (async () => {
    for await (const event of client.output(info.id)) seen.push(event);
  })().then(
    () => assert.fail("the output ended without the stop"),
    (e: unknown) => e,
  );
  while (bytesOf(seen, "stdout").length < 4 || bytesOf(seen, "stderr").length < 4) {
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(await service.stop(), 0);
  rejectsWith(500, "service_stopping", "The service is stopping: read on from the next offsets once it is back.")(
    await reading,
  );
  await service.start();
  const again = service.client(token);
  const listed = await again.processes(lease.id);
  assert.deepEqual(
    listed.map((p: ProcessInfo) => [p.id, p.status.state]),
    [[info.id, "running"]],
  );
  await again.writeStdin(info.id, "go\n");
  // Reattached: the whole output from offset 0, live, until the kill ends it.
  const events: OutputEvent[] = [];
  let killed = false;
  for await (const event of again.output(info.id, { stdout: 0, stderr: 0 })) {
    events.push(event);
    if (!killed && bytesOf(events, "stdout").toString() === "one\nthree\n") {
      killed = true;
      const signalled = await again.signal(info.id, "KILL");
      assert.equal(signalled.id, info.id);
    }
  }
  assert.equal(bytesOf(events, "stdout").toString(), "one\nthree\n");
  assert.equal(bytesOf(events, "stderr").toString(), "two\n");
  const last = events[events.length - 1];
  assert.ok(last.type === "exit");
  assert.deepEqual(last.process.status, { state: "signalled", signal: 9 });
  assert.deepEqual((await again.process(info.id)).status, { state: "signalled", signal: 9 });
  assert.deepEqual(await again.wait(info.id), { state: "signalled", signal: 9 });
  await again.destroyLease(lease.id);
});

test("a terminal is resized and a running process waited with a timeout", async () => {
  const lease = await client.acquireLease({ environmentId: "local" });
  const info = await client.spawn(lease.id, { argv: ["sh", "-c", "read x; stty size"], tty: { rows: 24, cols: 80 } });
  assert.equal(info.tty, true);
  assert.deepEqual(await client.wait(info.id, 50), { state: "running" });
  await client.resize(info.id, 33, 99);
  await client.writeStdin(info.id, "go\n");
  const events = await drain(client, info.id);
  assert.match(bytesOf(events, "tty").toString(), /33 99/);
  await client.destroyLease(lease.id);
});

test("process and network refusals reject with the exact status, kind and message", async () => {
  const lease = await client.acquireLease({ environmentId: "local" });
  const info = await client.spawn(lease.id, { argv: ["true"] });
  await client.wait(info.id);
  await assert.rejects(
    client.writeStdin(info.id, "x"),
    rejectsWith(409, "process_exited", `Process "${info.id}" has exited: cannot write to its stdin.`),
  );
  await assert.rejects(
    client.signal(info.id),
    rejectsWith(409, "process_exited", `Process "${info.id}" has exited: cannot signal it.`),
  );
  await assert.rejects(
    client.resize(info.id, 10, 10),
    rejectsWith(409, "process_no_tty", `Process "${info.id}" has no terminal to resize.`),
  );
  await assert.rejects(
    drain(client, info.id, { stdout: 5 }),
    rejectsWith(
      400,
      "process_offset_past_end",
      `Offset 5 of process "${info.id}"'s stdout is past its end: 0 bytes written so far.`,
    ),
  );
  await assert.rejects(
    client.process(`${lease.id}/7`),
    rejectsWith(404, "process_not_found", `Process "${lease.id}/7" was not found.`),
  );
  await assert.rejects(
    client.spawn(lease.id, { argv: [] }),
    rejectsWith(400, "process_spawn_refused", "Cannot spawn the process: argv is empty"),
  );
  // Another tenant's process is an unknown one.
  const other = service.client(service.token("globex"));
  await assert.rejects(
    other.process(info.id),
    rejectsWith(404, "process_not_found", `Process "${info.id}" was not found.`),
  );
  await assert.rejects(
    other.signal(info.id, "KILL"),
    rejectsWith(404, "process_not_found", `Process "${info.id}" was not found.`),
  );
  // The local driver shares the host's network: no policy can be enforced there.
  const sharesHost =
    'Network policy refused: driver "local" cannot enforce a network policy: its commands share the ' +
    'host\'s network; drop the policy, or set network = "host" to run on the host network unrestricted';
  await assert.rejects(client.updateNetwork(lease.id, { egress: "none" }), rejectsWith(409, "network_refused", sharesHost));
  await assert.rejects(
    client.acquireLease({ environmentId: "local", network: { egress: "allow", allow: ["example.org:443"] } }),
    rejectsWith(409, "network_refused", sharesHost),
  );
  await assert.rejects(
    client.updateNetwork(lease.id, { egress: "none", allow: ["example.org"] }),
    rejectsWith(
      400,
      "invalid_request",
      'Invalid network policy: allow: entries need egress = "allow" or "open" (egress is "none")',
    ),
  );
  // A token without the operation.
  const reader = service.client(service.token("acme", ["leases:read", "processes:read"]));
  assert.equal((await reader.process(info.id)).id, info.id);
  await assert.rejects(reader.spawn(lease.id, { argv: ["true"] }), (e: unknown) => {
    assert.ok(e instanceof EnvrtError);
    assert.deepEqual([e.status, e.kind], [403, "forbidden"]);
    assert.match(e.message, /^Token "[0-9a-f]{16}" does not allow the operation "processes:write"\.$/);
    return true;
  });
  await client.destroyLease(lease.id);
});
