/**
 * A process's terminal over WebSocket (`GET /v1/leases/{id}/processes/{n}/terminal`):
 * input, output from an offset, resize; closing detaches and the process runs on. The
 * WebSocket is the `ws` package's (Node 20 has no WebSocket client of its own, and none
 * reaches a unix socket).
 */

import WebSocket from "ws";

import { EnvrtError, type ClientOptions, type ProcessInfo } from "./index.js";

/** Output chunks held for a reader before the socket is paused. */
const HELD = 64;

/** An attached terminal: `for await (const chunk of terminal)` reads its output in order until the process ends. */
export class Terminal implements AsyncIterable<Buffer> {
  readonly #socket: WebSocket;
  readonly #chunks: Buffer[] = [];
  #wake: (() => void) | undefined;
  #done = false;
  #failure: EnvrtError | undefined;
  #exit: ProcessInfo | undefined;

  /** Resolves with the process's final record when it ends; rejects with the session's error. */
  readonly ended: Promise<ProcessInfo>;

  /** @internal */
  constructor(socket: WebSocket) {
    this.#socket = socket;
    let settle!: { resolve: (p: ProcessInfo) => void; reject: (e: EnvrtError) => void };
    this.ended = new Promise<ProcessInfo>((resolve, reject) => (settle = { resolve, reject }));
    // A caller that only iterates must not see an unhandled rejection.
    this.ended.catch(() => undefined);
    socket.on("message", (data: Buffer, binary: boolean) => {
      if (binary) {
        this.#chunks.push(data);
        if (this.#chunks.length >= HELD) socket.pause();
      } else {
        const message = JSON.parse(data.toString("utf8")) as { type: string; process?: ProcessInfo; kind?: string; message?: string };
        if (message.type === "exit" && message.process) {
          this.#exit = message.process;
          settle.resolve(message.process);
        } else {
          this.#failure = new EnvrtError(500, message.kind ?? "http", message.message ?? "");
          settle.reject(this.#failure);
        }
      }
      this.#wake?.();
    });
    socket.on("close", () => {
      this.#done = true;
      if (!this.#exit && !this.#failure) {
        this.#failure = new EnvrtError(0, "detached", "The terminal was closed before the process ended.");
        settle.reject(this.#failure);
      }
      this.#wake?.();
    });
    socket.on("error", () => socket.terminate());
  }

  /** Writes bytes (a string as UTF-8) to the terminal. */
  write(data: Buffer | string): void {
    this.#socket.send(typeof data === "string" ? Buffer.from(data, "utf8") : data, { binary: true });
  }

  /** Resizes the terminal. */
  resize(rows: number, cols: number): void {
    this.#socket.send(JSON.stringify({ type: "resize", rows, cols }), { binary: false });
  }

  /** Detaches: the process keeps running. */
  close(): void {
    this.#socket.close();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Buffer> {
    for (;;) {
      const chunk = this.#chunks.shift();
      if (chunk) {
        if (this.#chunks.length < HELD / 2) this.#socket.resume();
        yield chunk;
        continue;
      }
      if (this.#done || this.#exit || this.#failure) {
        if (this.#failure && this.#failure.kind !== "detached") throw this.#failure;
        return;
      }
      await new Promise<void>((wake) => (this.#wake = wake));
      this.#wake = undefined;
    }
  }
}

/** Attaches to the terminal of process `path` (its route) from `from`; rejects with the service's refusal. */
export function attachTerminal(options: ClientOptions, path: string, from?: number): Promise<Terminal> {
  const route = `${path}/terminal${from === undefined ? "" : `?from=${from}`}`;
  const url = options.socketPath
    ? `ws+unix://${options.socketPath}:${route}`
    : new URL(route, options.baseUrl!.replace(/^http/, "ws")).toString();
  const socket = new WebSocket(url, { headers: { authorization: `Bearer ${options.token}` } });
  return new Promise((resolve, reject) => {
    socket.once("open", () => resolve(new Terminal(socket)));
    socket.once("unexpected-response", (_request, response) => {
      const chunks: Buffer[] = [];
      response.on("data", (chunk: Buffer) => chunks.push(chunk));
      response.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        try {
          const body = JSON.parse(text) as { kind: string; message: string };
          reject(new EnvrtError(response.statusCode ?? 0, body.kind, body.message));
        } catch {
          reject(new EnvrtError(response.statusCode ?? 0, "http", text));
        }
      });
    });
    socket.once("error", reject);
  });
}
