// A real `envrt serve` for the tests: the `envrt` binary from target/debug (or
// $ENVRT_BIN), a state directory of the test's own, a token, and a service on a unix
// socket that can be stopped (SIGTERM) and started again on the same state.

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { once } from "node:events";

import { EnvrtClient } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const bin = process.env.ENVRT_BIN ?? resolve(here, "../../../../target/debug/envrt");

/** A service on a state directory of its own. */
export class Service {
  readonly dir = mkdtempSync(join(tmpdir(), "envrt-ts-"));
  readonly socketPath = join(this.dir, "serve.sock");
  #server: ChildProcess | undefined;

  /** Runs `envrt ARGS` on the service's state; its stdout. */
  envrt(args: string[]): string {
    return execFileSync(bin, args, { env: this.#env(), cwd: this.dir }).toString();
  }

  /** A new token for `tenant` (every operation unless `ops` says otherwise). */
  token(tenant: string, ops?: string[]): string {
    const args = ["token", "create", "--tenant", tenant, ...(ops ? ["--ops", ops.join(",")] : [])];
    return this.envrt(args).trim().split("\n").pop()!;
  }

  /** A client with `token`. */
  client(token: string): EnvrtClient {
    return new EnvrtClient({ socketPath: this.socketPath, token });
  }

  /** Starts `envrt serve`; resolves once it says where it listens. */
  async start(): Promise<void> {
    const server = spawn(bin, ["serve", "--socket", this.socketPath], {
      env: this.#env(),
      cwd: this.dir,
      stdio: ["ignore", "ignore", "pipe"],
    });
    this.#server = server;
    let said = "";
    server.stderr!.setEncoding("utf8");
    await new Promise<void>((ready, failed) => {
      server.once("exit", (code) => failed(new Error(`envrt serve exited with ${code}: ${said}`)));
      server.stderr!.on("data", (text: string) => {
        said += text;
        if (said.includes("envrt serve: listening on")) ready();
      });
    });
  }

  /** Whether the service runs. */
  get running(): boolean {
    return this.#server !== undefined;
  }

  /** Stops the service with SIGTERM and waits for its exit; its exit code. */
  async stop(): Promise<number | null> {
    const server = this.#server;
    this.#server = undefined;
    if (!server) return null;
    server.kill("SIGTERM");
    if (server.exitCode === null && server.signalCode === null) await once(server, "exit");
    return server.exitCode;
  }

  /** Stops the service and removes its state directory. */
  async remove(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }

  #env(): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = { ...process.env, ENVRT_STATE_DIR: join(this.dir, "state") };
    delete env.ENVRT_CONFIG;
    return env;
  }
}
