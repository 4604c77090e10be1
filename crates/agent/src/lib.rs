//! `envrt-agent`: the supervisor that runs inside a lease's isolation boundary and holds its
//! processes, so every driver gets the same process semantics from one implementation.
//!
//! # What it does
//! The agent keeps a table of the processes it spawned ([`Agent`]): each started in its own
//! process group (its own session, with a terminal), with pipes or a real pseudo-terminal,
//! a replay buffer per output stream holding the newest `keep` bytes (default 8 MiB)
//! addressed by absolute offset, stdin, signals to the group, terminal resize, and the exit
//! status, kept for the agent's life. A process's identity is its pid and its start time
//! (from `/proc/PID/stat`): a signal goes out only while both still match. A process does
//! not end when the client that spawned it goes: another client finds it by id and reads
//! from offset 0. A reader that falls behind never blocks the process: the oldest bytes are
//! dropped and counted, and a reader whose next byte was dropped is refused with a text
//! naming the first offset still held.
//!
//! Run as PID 1 (a container's main process) or with `--subreaper`
//! (`PR_SET_CHILD_SUBREAPER`), it also reaps every orphan that lands on it, counted apart
//! from its own processes' statuses ([`proto::AgentInfo::orphans_reaped`]). SIGTERM or
//! SIGINT SIGKILLs every process group it holds and ends it.
//!
//! # The wire
//! `envrt-agent --socket PATH` listens on a unix socket (its directory created 0700 when
//! missing, the socket 0600) and speaks the framed, versioned protocol of [`proto`]: every
//! frame length-prefixed and at most [`proto::MAX_FRAME`] bytes, JSON requests and
//! responses matched by a client-chosen id, output chunks as binary frames carrying the
//! stream and absolute offset. [`client::Client`] is the async client the drivers use.
//! Output ends with the process's final state once it has exited and every holder of its
//! output has closed it. The `connect` verb ([`proto::Op::Connect`], [`client::tunnel`])
//! turns a fresh connection into a raw stream to a port on the lease's loopback (exposed
//! lease ports), at most [`proto::MAX_TUNNELS`] at once.
//!
//! With `--exit-when-socket-gone` the agent looks at its socket every 2 s and ends as on
//! SIGTERM (every process group it holds killed) once the file is gone or another agent's
//! socket took its place: a lease directory removed without a release leaves nothing running.
//!
//! # Bounds
//! Per agent: at most [`proto::IDS_PER_GENERATION`] ids given over its life (2^32, from
//! `--first-id` on; a spawn past them is refused), at most `--max-processes` processes held
//! at once (default 4096; a held execute leaves the table once delivered) and `--max-buffer-bytes`
//! of replay buffers reserved (default 1 GiB; each process reserves `keep` per stream until the
//! stream ends, then only the bytes it holds, and
//! its buffers grow only with the bytes actually held). Per request: argv at most
//! [`proto::MAX_ARGS`] entries, `keep` 1 byte to [`proto::MAX_KEEP`], an idempotency key of
//! at most [`proto::MAX_KEY`] bytes, a terminal at least 1×1. Per connection: at most
//! [`server::MAX_IN_FLIGHT`] requests in flight, ids unique among them. Every refusal is an
//! exact text (the module `refuse` holds them all).
//!
//! # Security stance
//! The agent is inside the boundary, as untrusted as the command it runs: the command can
//! reach its socket, signal it, or replace it. So the host treats every frame from it as
//! hostile (the client bounds frames, checks that every response answers a request in
//! flight and that every chunk carries its stream's next offset), and the agent gives the
//! command nothing it did not already have: it runs with the command's own user and
//! privileges, holds no credentials, and only starts, feeds and signals processes the
//! command could have started itself. The socket's 0600 mode keeps other users of the same
//! host out.
//!
//! # A static binary
//! The binary builds static on the gnu target and runs in the busybox test image:
//!
//! ```text
//! RUSTFLAGS='-C target-feature=+crt-static' \
//!     cargo build -p envrt-agent --release --target x86_64-unknown-linux-gnu
//! docker run --rm --network none -v $PWD/target/x86_64-unknown-linux-gnu/release:/agent:ro \
//!     -v /tmp/lease:/run/envrt envrt-test:latest /agent/envrt-agent --socket /run/envrt/agent.sock
//! ```
//!
//! `tests/static_docker.rs` does exactly that and talks to it through the bind-mounted
//! socket.

mod check;
pub mod client;
pub mod forward;
#[doc(hidden)]
pub mod fuzzing;
pub mod proto;
mod pump;
mod refuse;
mod ring;
mod run;
pub mod server;
mod spawn;
mod table;
pub mod tunnel;
mod user;

pub use run::{Options, run};
pub use spawn::{TTY_EXEC, tty_exec};
pub use table::{Agent, Config};
