/**
 * @module @envrt/client
 *
 * A typed client of `envrt serve` (see docs/serve.md and crates/serve/openapi.json):
 * leases and their network policies, execute (buffered and streamed), sync in and out as
 * tar, templates, capabilities, and process sessions (spawn, list, output from offsets,
 * stdin, signal, resize, wait, a terminal over WebSocket), over HTTP on a unix socket (`socketPath`) or TCP
 * (`baseUrl`). Every refusal or failure rejects with an {@link EnvrtError} carrying the
 * service's status, its stable `kind` and its exact `message`.
 */

import * as http from "node:http";
import * as https from "node:https";

import { attachTerminal, Terminal } from "./terminal.js";

export { Terminal } from "./terminal.js";

/** How to reach a service. */
export interface ClientOptions {
  /** A bearer token from `envrt token create`. */
  token: string;
  /** The unix socket of `envrt serve --socket PATH`. */
  socketPath?: string;
  /** `http://127.0.0.1:PORT` or `https://HOST:PORT` for `envrt serve --listen`. */
  baseUrl?: string;
}

/** The error body of every refusal: `{kind, message}`. */
export class EnvrtError extends Error {
  constructor(
    /** The HTTP status. */
    readonly status: number,
    /** The stable snake_case kind (`lease_not_found`, `forbidden`, ...). */
    readonly kind: string,
    message: string,
  ) {
    super(message);
    this.name = "EnvrtError";
  }
}

export type LeasePolicy = "ephemeral" | "reuse_by_environment" | "reuse_by_execution_workspace" | "retain_on_failure";
export type LeaseStatus = "active" | "released" | "expired" | "failed" | "retained" | "pending_cleanup";

/** A configured environment. */
export interface Environment {
  id: string;
  name: string;
  driver: string;
  status: string;
}

/** A lease record. */
export interface Lease {
  id: string;
  companyId: string;
  environmentId: string | null;
  status: LeaseStatus;
  leasePolicy: LeasePolicy;
  provider: string | null;
  providerLeaseId: string | null;
  acquiredAt: number;
  expiresAt: number | null;
  releasedAt: number | null;
  failureReason: string | null;
  metadata: Record<string, unknown>;
  [key: string]: unknown;
}

/** What `acquireLease` takes. */
export interface AcquireOptions {
  environmentId: string;
  policy?: LeasePolicy;
  runId?: string;
  issueId?: string;
  executionWorkspaceId?: string;
  requestedCwd?: string;
  ttlMs?: number;
  template?: string;
  /** A network policy of the lease's own (needs the token's `network` operation). */
  network?: NetworkPolicy;
}

/**
 * A lease's network policy: `egress` absent means `none`; `allow` entries (`name`,
 * `*.name`, a CIDR, each with an optional `:port`) need `allow` or `open`. It must lie
 * within the environment's policy or its `grantable` list.
 */
export interface NetworkPolicy {
  egress?: "none" | "allow" | "open";
  allow?: string[];
}

/** What `spawn` takes (the facade's `SpawnRequest`). */
export interface SpawnOptions {
  /** The program (looked up in `PATH`) and its arguments. */
  argv: string[];
  cwd?: string;
  /** Variables over the environment's (kept secret by the service). */
  env?: Record<string, string>;
  /** `/dev/null` (the default) or a pipe fed with `writeStdin`. */
  stdin?: "null" | "piped";
  /** A pseudo-terminal of this size instead of pipes (one stream, `tty`). */
  tty?: { rows: number; cols: number };
  /** Bytes held per stream for replay (default 8 MiB). */
  keep?: number;
  /** Kill the whole process group this long after the start. */
  timeoutMs?: number;
  /** The same key with the same request answers the same process. */
  idempotencyKey?: string;
}

/** A process's status. */
export type ProcessStatus =
  | { state: "running" }
  | { state: "exited"; code: number }
  | { state: "signalled"; signal: number }
  | { state: "lost" };

/** One output stream of a process. */
export type ProcessStream = "stdout" | "stderr" | "tty";

/** A process: `id` is `{lease id}/{n}`. */
export interface ProcessInfo {
  id: string;
  pid: number;
  startedAt: number;
  argv: string[];
  tty: boolean;
  status: ProcessStatus;
  /** Per stream: `written` (one past the newest offset), `dropped` (the oldest offset held), `keep`. */
  streams: { stream: ProcessStream; written: number; dropped: number; keep: number }[];
}

/** Where each stream starts (absolute byte offsets); a stream left out starts at its oldest byte held. */
export type Offsets = Partial<Record<ProcessStream, number>>;

/** One event of a process's output: a chunk at its absolute offset, then the exit. */
export type OutputEvent =
  | { type: "chunk"; stream: ProcessStream; offset: number; data: Buffer }
  | { type: "exit"; process: ProcessInfo };

/** A command to run. */
export interface ExecuteOptions {
  command: string;
  args?: string[];
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string;
  stdinBase64?: string;
  timeoutMs?: number;
  maxOutputBytes?: number;
  keep?: "head" | "tail";
  user?: string;
}

/** What a command did. */
export interface ExecuteResult {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  stdout?: string;
  stdoutEncoding?: "utf8" | "base64";
  stdoutTruncated: boolean;
  stderr?: string;
  stderrEncoding?: "utf8" | "base64";
  stderrTruncated: boolean;
  durationMs: number;
}

/** One event of a streamed execute. */
export type ExecuteEvent =
  | { type: "output"; stream: "stdout" | "stderr"; data: Buffer }
  | { type: "result"; result: ExecuteResult };

/** Counts of a sync. */
export interface SyncResult {
  operations: { operationId: string; filesTransferred: number; bytesTransferred: number }[];
}

/** A template of an environment. */
export interface Template {
  id: string;
  kind: string;
  environmentId: string;
  companyId: string;
  label?: string | null;
  sourceLeaseId?: string | null;
  createdAt?: number | null;
}

interface Raw {
  status: number;
  body: Buffer;
  headers: http.IncomingHttpHeaders;
}

/** A client of one service. */
export class EnvrtClient {
  readonly #options: ClientOptions;

  constructor(options: ClientOptions) {
    if (!options.socketPath === !options.baseUrl) {
      throw new TypeError("give exactly one of socketPath and baseUrl");
    }
    this.#options = options;
  }

  #open(method: string, path: string, headers: Record<string, string | number>): http.ClientRequest {
    const auth = { ...headers, authorization: `Bearer ${this.#options.token}` };
    if (this.#options.socketPath) {
      return http.request({ socketPath: this.#options.socketPath, path, method, headers: { ...auth, host: "envrt" } });
    }
    const url = new URL(path, this.#options.baseUrl);
    const transport = url.protocol === "https:" ? https : http;
    return transport.request(url, { method, headers: auth });
  }

  #send(method: string, path: string, body?: Buffer, type = "application/json"): Promise<Raw> {
    return new Promise((resolve, reject) => {
      const headers: Record<string, string | number> = {};
      if (body) {
        headers["content-type"] = type;
        headers["content-length"] = body.length;
      }
      const request = this.#open(method, path, headers);
      request.on("error", reject);
      request.on("response", (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("error", reject);
        response.on("end", () =>
          resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks), headers: response.headers }),
        );
      });
      request.end(body);
    });
  }

  static #check(raw: Raw): Raw {
    if (raw.status >= 400) {
      let kind = "http";
      let message = raw.body.toString("utf8");
      try {
        const parsed = JSON.parse(message) as { kind?: string; message?: string };
        kind = parsed.kind ?? kind;
        message = parsed.message ?? message;
      } catch {
        // Not the error body: keep the raw text.
      }
      throw new EnvrtError(raw.status, kind, message);
    }
    return raw;
  }

  async #json<T>(method: string, path: string, body?: unknown): Promise<T> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const raw = EnvrtClient.#check(await this.#send(method, path, payload));
    return JSON.parse(raw.body.toString("utf8")) as T;
  }

  /** The configured environments. */
  listEnvironments(): Promise<Environment[]> {
    return this.#json("GET", "/v1/environments");
  }

  /** An environment's capability snapshot. */
  environmentCapabilities(id: string): Promise<Record<string, unknown>> {
    return this.#json("GET", `/v1/environments/${enc(id)}/capabilities`);
  }

  /** Acquires a lease for the token's tenant. */
  acquireLease(options: AcquireOptions): Promise<Lease> {
    return this.#json("POST", "/v1/leases", options);
  }

  /** The tenant's active and pending-cleanup leases (every one with `all`). */
  listLeases(all = false): Promise<Lease[]> {
    return this.#json("GET", all ? "/v1/leases?all=true" : "/v1/leases");
  }

  /** One lease. */
  getLease(id: string): Promise<Lease> {
    return this.#json("GET", `/v1/leases/${enc(id)}`);
  }

  /** Releases a lease (as `released` unless `status` says otherwise). */
  releaseLease(id: string, status?: "released" | "failed" | "expired"): Promise<Lease> {
    return this.#json("POST", `/v1/leases/${enc(id)}/release`, status ? { status } : {});
  }

  /** Resumes a kept lease. */
  resumeLease(id: string): Promise<Lease> {
    return this.#json("POST", `/v1/leases/${enc(id)}/resume`);
  }

  /** Destroys a lease's resource whatever its policy. */
  destroyLease(id: string): Promise<Lease> {
    return this.#json("DELETE", `/v1/leases/${enc(id)}`);
  }

  /** A lease's effective capability snapshot. */
  leaseCapabilities(id: string): Promise<Record<string, unknown>> {
    return this.#json("GET", `/v1/leases/${enc(id)}/capabilities`);
  }

  /** Runs a command and resolves with its whole result. */
  execute(leaseId: string, options: ExecuteOptions): Promise<ExecuteResult> {
    return this.#json("POST", `/v1/leases/${enc(leaseId)}/execute`, options);
  }

  /** Runs a command, yielding its output as it comes, then its result. */
  async *executeStream(leaseId: string, options: ExecuteOptions): AsyncGenerator<ExecuteEvent> {
    const body = Buffer.from(JSON.stringify(options));
    for await (const line of this.#lines("POST", `/v1/leases/${enc(leaseId)}/execute/stream`, body)) {
      if (line.result) yield { type: "result", result: line.result as ExecuteResult };
      else yield { type: "output", stream: line.stream, data: Buffer.from(line.data, "base64") };
    }
  }

  /**
   * The lines of an NDJSON response as they come; a refusal before the stream rejects as
   * every call does, and an `{error}` line in it throws as status 500 with its kind and
   * message.
   */
  async *#lines(method: string, path: string, body?: Buffer): AsyncGenerator<Record<string, any>> {
    const headers: Record<string, string | number> = {};
    if (body) {
      headers["content-type"] = "application/json";
      headers["content-length"] = body.length;
    }
    const request = this.#open(method, path, headers);
    const response = await new Promise<http.IncomingMessage>((resolve, reject) => {
      request.on("error", reject);
      request.on("response", resolve);
      request.end(body);
    });
    try {
      if ((response.statusCode ?? 0) >= 400) {
        const chunks: Buffer[] = [];
        for await (const chunk of response) chunks.push(chunk as Buffer);
        EnvrtClient.#check({ status: response.statusCode ?? 0, body: Buffer.concat(chunks), headers: response.headers });
      }
      // Decoded as a whole: a character split between two chunks stays whole.
      response.setEncoding("utf8");
      let pending = "";
      for await (const chunk of response) {
        pending += chunk as string;
        let newline: number;
        while ((newline = pending.indexOf("\n")) >= 0) {
          const line = JSON.parse(pending.slice(0, newline));
          pending = pending.slice(newline + 1);
          if (line.error) throw new EnvrtError(500, line.error.kind, line.error.message);
          yield line;
        }
      }
    } finally {
      // A caller that stops early closes the stream (the service stops reading for it).
      response.destroy();
    }
  }

  /** Unpacks a tar archive into the directory `path` of the lease. */
  async syncIn(leaseId: string, path: string, tar: Buffer): Promise<SyncResult> {
    const raw = EnvrtClient.#check(
      await this.#send("PUT", `/v1/leases/${enc(leaseId)}/files?path=${enc(path)}`, tar, "application/x-tar"),
    );
    return JSON.parse(raw.body.toString("utf8")) as SyncResult;
  }

  /** A tar archive of `path` in the lease: a directory's contents, or one file. */
  async syncOut(leaseId: string, path: string, kind: "directory" | "file" = "directory"): Promise<Buffer> {
    const query = `path=${enc(path)}${kind === "file" ? "&kind=file" : ""}`;
    return EnvrtClient.#check(await this.#send("GET", `/v1/leases/${enc(leaseId)}/files?${query}`)).body;
  }

  /** The tenant's templates of an environment. */
  listTemplates(environmentId: string): Promise<Template[]> {
    return this.#json("GET", `/v1/environments/${enc(environmentId)}/templates`);
  }

  /** Captures the lease's state as a new template. */
  captureTemplate(leaseId: string, label?: string): Promise<Template> {
    return this.#json("POST", `/v1/leases/${enc(leaseId)}/templates`, label === undefined ? {} : { label });
  }

  /** Replaces a lease's network policy (none given: `egress = "none"`); resolves with its network level (`no network`, `egress proxy (allow)`, ...). */
  async updateNetwork(leaseId: string, policy: NetworkPolicy = {}): Promise<string> {
    const answer = await this.#json<{ network: string }>("PUT", `/v1/leases/${enc(leaseId)}/network`, policy);
    return answer.network;
  }

  /** Spawns a process on the lease that outlives this client (and the service); resolves once it runs. */
  spawn(leaseId: string, options: SpawnOptions): Promise<ProcessInfo> {
    return this.#json("POST", `/v1/leases/${enc(leaseId)}/processes`, options);
  }

  /** Every process of the lease, exited ones included, in spawn order. */
  processes(leaseId: string): Promise<ProcessInfo[]> {
    return this.#json("GET", `/v1/leases/${enc(leaseId)}/processes`);
  }

  /** One process by its id (`{lease id}/{n}`). */
  process(id: string): Promise<ProcessInfo> {
    return this.#json("GET", processPath(id));
  }

  /**
   * The process's output from `from` (per stream; one left out starts at its oldest byte
   * held): each chunk with its stream and absolute offset as it comes, live until the
   * process ends, then its exit. Breaking out of the loop closes the stream. When the
   * service stops meanwhile it throws `service_stopping`: read on from the offsets reached.
   */
  async *output(id: string, from: Offsets = {}): AsyncGenerator<OutputEvent> {
    const query = (["stdout", "stderr", "tty"] as const)
      .filter((s) => from[s] !== undefined)
      .map((s) => `${s}=${from[s]}`)
      .join("&");
    for await (const line of this.#lines("GET", `${processPath(id)}/output${query ? `?${query}` : ""}`)) {
      if (line.exit) yield { type: "exit", process: line.exit as ProcessInfo };
      else yield { type: "chunk", stream: line.stream, offset: line.offset, data: Buffer.from(line.data, "base64") };
    }
  }

  /** Writes bytes (a string as UTF-8) to the process's stdin or terminal. */
  async writeStdin(id: string, data: Buffer | string): Promise<void> {
    const body = typeof data === "string" ? Buffer.from(data, "utf8") : data;
    EnvrtClient.#check(await this.#send("POST", `${processPath(id)}/stdin`, body, "application/octet-stream"));
  }

  /** Ends the process's stdin. */
  async closeStdin(id: string): Promise<void> {
    EnvrtClient.#check(await this.#send("POST", `${processPath(id)}/stdin/close`));
  }

  /** Sends a signal (a name, `TERM` or `SIGKILL`, or a number) to the process's group. */
  signal(id: string, signal: string | number = "TERM"): Promise<ProcessInfo> {
    return this.#json("POST", `${processPath(id)}/signal`, { signal: String(signal) });
  }

  /** Resizes the process's terminal. */
  async resize(id: string, rows: number, cols: number): Promise<void> {
    const body = Buffer.from(JSON.stringify({ rows, cols }));
    EnvrtClient.#check(await this.#send("POST", `${processPath(id)}/resize`, body));
  }

  /**
   * Attaches to the terminal of a process spawned with `tty`, over WebSocket: its output
   * from `from` (default: the oldest byte held) as the terminal's async iterator, `write`,
   * `resize`, `ended` (the final record); `close` detaches and the process runs on.
   */
  terminal(id: string, from?: number): Promise<Terminal> {
    return attachTerminal(this.#options, processPath(id), from);
  }

  /** Waits for the process to end, at most `timeoutMs` (forever when absent); still `running` when that passed first. */
  wait(id: string, timeoutMs?: number): Promise<ProcessStatus> {
    return this.#json("GET", `${processPath(id)}/wait${timeoutMs === undefined ? "" : `?timeoutMs=${timeoutMs}`}`);
  }

  /** Deletes a template; false when there was none by that id. */
  async deleteTemplate(environmentId: string, templateId: string): Promise<boolean> {
    const answer = await this.#json<{ deleted: boolean }>(
      "DELETE",
      `/v1/environments/${enc(environmentId)}/templates/${enc(templateId)}`,
    );
    return answer.deleted;
  }
}

function enc(part: string): string {
  return encodeURIComponent(part);
}

/** The route of process `id` (`{lease id}/{n}`): its lease and number as two segments. */
function processPath(id: string): string {
  const at = id.lastIndexOf("/");
  if (at <= 0) throw new TypeError(`not a process id (LEASE/N): ${JSON.stringify(id)}`);
  return `/v1/leases/${enc(id.slice(0, at))}/processes/${enc(id.slice(at + 1))}`;
}

