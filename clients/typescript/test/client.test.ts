// The client against a real `envrt serve` on a unix socket, started by the test with a
// state directory of its own: leases, execute (buffered and streamed), sync as tar,
// templates, and the exact error bodies.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { EnvrtClient, EnvrtError } from "../src/index.js";
import { Service } from "./service.js";

const service = new Service();
const dir = service.dir;
let client: EnvrtClient;

before(async () => {
  const token = service.token("acme");
  await service.start();
  client = service.client(token);
});

after(async () => {
  await service.remove();
});

test("a lease is acquired, listed, shown and released", async () => {
  const environments = await client.listEnvironments();
  assert.ok(environments.some((e) => e.id === "local"));
  const lease = await client.acquireLease({ environmentId: "local" });
  assert.equal(lease.status, "active");
  assert.equal(lease.companyId, "acme");
  assert.ok((await client.listLeases()).some((l) => l.id === lease.id));
  assert.equal((await client.getLease(lease.id)).id, lease.id);
  assert.equal((await client.releaseLease(lease.id)).status, "released");
  assert.ok(!(await client.listLeases()).some((l) => l.id === lease.id));
});

test("execute answers the result and the stream yields output then the result", async () => {
  const lease = await client.acquireLease({ environmentId: "local" });
  const result = await client.execute(lease.id, { command: "sh", args: ["-c", "echo out; echo err >&2; exit 4"] });
  assert.deepEqual([result.exitCode, result.stdout, result.stderr], [4, "out\n", "err\n"]);
  let stdout = "";
  let last: unknown;
  for await (const event of client.executeStream(lease.id, { command: "sh", args: ["-c", "echo a; echo b"] })) {
    if (event.type === "output" && event.stream === "stdout") stdout += event.data.toString("utf8");
    if (event.type === "result") last = event.result.exitCode;
  }
  assert.equal(stdout, "a\nb\n");
  assert.equal(last, 0);
  await client.destroyLease(lease.id);
});

test("a tar synced in comes back out", async () => {
  const lease = await client.acquireLease({ environmentId: "local" });
  const source = join(dir, "src");
  mkdirSync(join(source, "sub"), { recursive: true });
  writeFileSync(join(source, "sub", "f.txt"), "hello");
  const tar = execFileSync("tar", ["-C", source, "-cf", "-", "."]);
  const synced = await client.syncIn(lease.id, "in", tar);
  assert.equal(synced.operations[0].filesTransferred, 1);
  const ran = await client.execute(lease.id, { command: "cat", args: ["in/sub/f.txt"] });
  assert.equal(ran.stdout, "hello");
  const back = await client.syncOut(lease.id, "in");
  const out = join(dir, "out");
  mkdirSync(out);
  execFileSync("tar", ["-C", out, "-xf", "-"], { input: back });
  assert.equal(readFileSync(join(out, "sub", "f.txt"), "utf8"), "hello");
  await client.destroyLease(lease.id);
});

test("a template is captured, listed, started from and deleted", async () => {
  const lease = await client.acquireLease({ environmentId: "local" });
  await client.execute(lease.id, { command: "sh", args: ["-c", "echo t > mark"] });
  const template = await client.captureTemplate(lease.id, "ts");
  assert.ok((await client.listTemplates("local")).some((t) => t.id === template.id));
  const child = await client.acquireLease({ environmentId: "local", template: template.id });
  assert.equal((await client.execute(child.id, { command: "cat", args: ["mark"] })).stdout, "t\n");
  await client.destroyLease(child.id);
  await client.destroyLease(lease.id);
  assert.equal(await client.deleteTemplate("local", template.id), true);
  assert.equal(await client.deleteTemplate("local", template.id), false);
});

test("refusals reject with the exact status, kind and message", async () => {
  await assert.rejects(client.getLease("nope"), (e: unknown) => {
    assert.ok(e instanceof EnvrtError);
    assert.deepEqual([e.status, e.kind, e.message], [404, "lease_not_found", 'Lease "nope" was not found.']);
    return true;
  });
  const stranger = service.client("envrt_0000000000000000_" + "0".repeat(64));
  await assert.rejects(stranger.listLeases(), (e: unknown) => {
    assert.ok(e instanceof EnvrtError);
    assert.deepEqual([e.status, e.kind, e.message], [401, "unauthenticated", "A valid bearer token is required."]);
    return true;
  });
});
