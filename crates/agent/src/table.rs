//! The process table: every process the agent spawned, its replay buffers, stdin, terminal
//! and exit status, plus the orphans it reaped. One lock guards it; nothing awaits under it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustix::process::{Pid, WaitOptions, WaitStatus};
use tokio::net::unix::pipe;
use tokio::sync::watch;

use crate::check::check_request;
pub(crate) use crate::check::parse_signal;
use crate::proto::{
    AgentInfo, DEFAULT_MAX_PROCESSES, IDS_PER_GENERATION, ProcessInfo, SpawnRequest, Status, StdinMode, Stream,
    StreamInfo, VERSION,
};
use crate::pump::pump;
use crate::refuse;
use crate::ring::Ring;
use crate::spawn;

/// The agent's bounds and mode.
#[derive(Clone, Debug)]
pub struct Config {
    /// The most processes held at once (running or exited).
    pub max_processes: u64,
    /// The most replay bytes all processes may reserve together (`keep` per stream).
    pub buffer_bound: u64,
    /// Whether the agent reaps orphans (it is PID 1 or a subreaper).
    pub reaps_orphans: bool,
    /// The agent's own binary, run in its terminal-exec mode for a process with a tty.
    pub shim: PathBuf,
    /// The id of the first process (1 by default): a host that starts a lease's agent
    /// again (its container restarted) starts past the ids the earlier one gave, so that an
    /// id never names two processes of one lease.
    pub first_id: u64,
    /// The most ids it gives ([`IDS_PER_GENERATION`]): past `first_id + id_span - 1` it
    /// refuses to spawn (a next supervisor numbers from there).
    pub id_span: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_processes: DEFAULT_MAX_PROCESSES,
            buffer_bound: 1024 * 1024 * 1024,
            reaps_orphans: false,
            shim: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe")),
            first_id: 1,
            id_span: IDS_PER_GENERATION,
        }
    }
}

struct Proc {
    pid: i32,
    start_time: u64,
    argv: Vec<String>,
    streams: Vec<(Stream, Ring)>,
    open_outputs: usize,
    reaped: Option<Status>,
    stdin_piped: bool,
    stdin: Option<Arc<StdinPipe>>,
    master: Option<Arc<OwnedFd>>,
    changed: watch::Sender<()>,
    /// Held output (`hold`): woken when a reader was handed bytes, so the pumps read on.
    drained: Arc<tokio::sync::Notify>,
    hold: bool,
    pipes: Vec<String>,
}

impl Proc {
    fn finished(&self) -> bool {
        self.reaped.is_some() && self.open_outputs == 0
    }
}

#[derive(Default)]
struct State {
    procs: BTreeMap<u64, Proc>,
    running: HashMap<i32, u64>,
    next_id: u64,
    reserved: u64,
    keys: HashMap<String, (SpawnRequest, u64)>,
    orphans_reaped: u64,
    recent_orphans: VecDeque<i32>,
    /// Processes that ended (exited, output drained), oldest end first: the first to be
    /// evicted when the table is full, and whose buffers are freed first when a spawn
    /// needs the room. Ids no longer held are skipped.
    ended: VecDeque<u64>,
    /// The last [`EVICTED_REMEMBERED`] ids evicted, named so when asked for; any other id
    /// no longer held (a delivered held execute, an old eviction) is simply not held.
    evicted: VecDeque<u64>,
}

/// How many evicted ids the agent remembers for its refusal text.
const EVICTED_REMEMBERED: usize = 4096;

/// What an `output` reader gets next.
pub(crate) enum Next {
    /// Bytes of a stream at an offset.
    Chunk(Stream, u64, Vec<u8>),
    /// The process ended and every byte was delivered.
    Exit(ProcessInfo),
    /// Nothing yet: wait for a change.
    Pending,
}

/// The process table.
pub struct Agent {
    state: Mutex<State>,
    config: Config,
}

/// Where `write_stdin` writes and whether it is the terminal.
/// A process's stdin (the pipe, or the terminal's master) and the lock that keeps one
/// request's bytes together when several write at once.
pub(crate) struct StdinPipe {
    pub(crate) fd: pipe::Sender,
    pub(crate) order: tokio::sync::Mutex<()>,
}

pub(crate) struct StdinTarget {
    pub(crate) fd: Arc<StdinPipe>,
    pub(crate) tty: bool,
}

fn status_of(status: WaitStatus) -> Status {
    match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => Status::Exited { code },
        (None, Some(signal)) => Status::Signalled { signal },
        (None, None) => Status::Exited { code: -1 },
    }
}

impl Agent {
    /// A table with these bounds.
    pub fn new(config: Config) -> Arc<Agent> {
        Arc::new(Agent {
            state: Mutex::new(State {
                next_id: config.first_id,
                ..State::default()
            }),
            config,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn info_of(id: u64, proc: &Proc) -> ProcessInfo {
        ProcessInfo {
            id,
            pid: proc.pid,
            start_time: proc.start_time,
            argv: proc.argv.clone(),
            tty: proc.master.is_some(),
            status: proc.reaped.unwrap_or(Status::Running),
            streams: proc
                .streams
                .iter()
                .map(|(stream, ring)| StreamInfo {
                    stream: *stream,
                    written: ring.end(),
                    dropped: ring.start(),
                    keep: ring.keep() as u64,
                })
                .collect(),
            pipes: proc.pipes.clone(),
        }
    }

    fn with<T>(&self, id: u64, f: impl FnOnce(&mut Proc) -> Result<T, String>) -> Result<T, String> {
        let mut state = self.lock();
        let evicted = state.evicted.contains(&id);
        match state.procs.get_mut(&id) {
            Some(proc) => f(proc),
            None if evicted => Err(refuse::evicted(id, self.config.max_processes)),
            None => Err(refuse::unknown(id)),
        }
    }

    /// Makes room for one more process: while the table is full, the process that ended
    /// first leaves it (its status and buffers with it). Running processes, and held
    /// executes not yet delivered, are never evicted.
    fn evict_for_one(&self, state: &mut State) -> Result<(), String> {
        while state.procs.len() as u64 >= self.config.max_processes {
            let Some(oldest) = Agent::oldest_ended(state, |_| true) else {
                return Err(refuse::process_bound(self.config.max_processes));
            };
            let proc = state.procs.remove(&oldest).expect("an ended process is held");
            let held: u64 = proc.streams.iter().map(|(_, ring)| ring.end() - ring.start()).sum();
            state.reserved -= held;
            state.keys.retain(|_, (_, held_id)| *held_id != oldest);
            state.ended.retain(|id| *id != oldest);
            if state.evicted.len() == EVICTED_REMEMBERED {
                state.evicted.pop_front();
            }
            state.evicted.push_back(oldest);
        }
        Ok(())
    }

    /// The id of the process that ended first and that `also` accepts (held executes are
    /// left to their reader).
    fn oldest_ended(state: &State, also: impl Fn(&Proc) -> bool) -> Option<u64> {
        state
            .ended
            .iter()
            .copied()
            .find(|id| state.procs.get(id).is_some_and(|proc| !proc.hold && also(proc)))
    }

    /// Makes room for `need` replay bytes under `bound`: the buffers of the processes that
    /// ended first are freed (their statuses and offsets stay; every byte reads as
    /// dropped) until the reservation fits; refused when it still does not.
    fn free_for(&self, state: &mut State, need: u64, bound: u64) -> Result<(), String> {
        // Nothing is freed for a spawn that would be refused anyway.
        let freeable: u64 = state
            .ended
            .iter()
            .filter_map(|id| state.procs.get(id).filter(|proc| !proc.hold))
            .flat_map(|proc| proc.streams.iter().map(|(_, ring)| ring.end() - ring.start()))
            .sum();
        if state.reserved.saturating_sub(freeable) + need > bound {
            return Err(refuse::buffer_bound(need, state.reserved, bound));
        }
        while state.reserved + need > bound {
            let holds = |proc: &Proc| proc.streams.iter().any(|(_, ring)| ring.end() > ring.start());
            let Some(oldest) = Agent::oldest_ended(state, holds) else {
                return Err(refuse::buffer_bound(need, state.reserved, bound));
            };
            let proc = state.procs.get_mut(&oldest).expect("an ended process is held");
            let freed: u64 = proc.streams.iter_mut().map(|(_, ring)| ring.free()).sum();
            proc.changed.send_replace(());
            state.reserved -= freed;
        }
        Ok(())
    }

    /// Records that process `id` ended (exited and its output drained), once.
    fn note_ended(state: &mut State, id: u64) {
        if state.procs.get(&id).is_some_and(Proc::finished) && !state.ended.contains(&id) {
            state.ended.push_back(id);
        }
    }

    /// Starts a process, or answers the one started earlier with the same idempotency key.
    /// Must run inside the tokio runtime (it starts the output pumps).
    pub fn spawn(self: &Arc<Self>, request: SpawnRequest) -> Result<ProcessInfo, String> {
        let keep = check_request(&request)?;
        // Read before the lock: the lease's own user and group files.
        let ids = match &request.user {
            Some(user) => crate::user::resolve(user)?,
            None => None,
        };
        let mut state = self.lock();
        if let Some(key) = &request.idempotency_key
            && let Some((earlier, id)) = state.keys.get(key)
        {
            if *earlier != request {
                return Err(refuse::idempotency(key, *id));
            }
            return Ok(Agent::info_of(*id, &state.procs[id]));
        }
        if state.next_id.saturating_sub(self.config.first_id) >= self.config.id_span {
            return Err(refuse::ids_spent(self.config.id_span));
        }
        self.evict_for_one(&mut state)?;
        let need = keep * if request.tty.is_some() { 1 } else { 2 };
        let bound = request
            .replay_bound
            .map_or(self.config.buffer_bound, |lease| lease.min(self.config.buffer_bound));
        self.free_for(&mut state, need, bound)?;
        // Spawned under the lock, so the reaper (which also takes it) cannot reap the child
        // before it is in the table and count it as an orphan.
        // A failed start names the working directory when that is what is missing (the
        // error alone cannot tell it from a missing program); the start itself checks nothing.
        let started =
            spawn::start(&request, ids, &self.config.shim).map_err(|error| match (&request.cwd, &request.user) {
                // A root agent without the right to switch (a user namespace's): the child's
                // setgid or setuid was refused.
                (_, Some(user)) if ids.is_some() && error.raw_os_error() == Some(1) => {
                    refuse::user_cannot_switch(user, rustix::process::geteuid().as_raw())
                }
                (Some(cwd), _) if !std::path::Path::new(cwd).is_dir() => refuse::not_a_directory(cwd),
                _ => refuse::spawn_failed(&request.argv[0], &error),
            })?;
        let id = state.next_id;
        state.next_id += 1;
        state.reserved += need;
        let start_time = spawn::start_time(started.pid).unwrap_or(0);
        let (changed, _) = watch::channel(());
        // The unchecked constructors take a terminal's master as well as a pipe.
        let stdin = match started.stdin.map(pipe::Sender::from_owned_fd_unchecked).transpose() {
            Ok(stdin) => stdin.map(|fd| {
                Arc::new(StdinPipe {
                    fd,
                    order: tokio::sync::Mutex::new(()),
                })
            }),
            Err(_) => None,
        };
        let mut proc = Proc {
            pid: started.pid,
            start_time,
            argv: request.argv.clone(),
            streams: Vec::new(),
            open_outputs: 0,
            reaped: None,
            stdin_piped: request.stdin == StdinMode::Piped || request.tty.is_some(),
            stdin,
            master: started.master.map(Arc::new),
            changed,
            drained: Arc::default(),
            hold: request.hold,
            pipes: started.pipes,
        };
        for (stream, fd) in started.outputs {
            let ring = if request.hold {
                Ring::holding(keep as usize)
            } else {
                Ring::new(keep as usize)
            };
            proc.streams.push((stream, ring));
            match pipe::Receiver::from_owned_fd_unchecked(fd) {
                Ok(fd) => {
                    proc.open_outputs += 1;
                    let drained = Arc::clone(&proc.drained);
                    tokio::spawn(pump(Arc::clone(self), id, stream, fd, drained));
                }
                // No pump: the stream stays empty, and reserves nothing.
                Err(_) => state.reserved -= keep,
            }
        }
        let info = Agent::info_of(id, &proc);
        state.running.insert(started.pid, id);
        state.procs.insert(id, proc);
        if let Some(key) = &request.idempotency_key {
            state.keys.insert(key.clone(), (request.clone(), id));
        }
        drop(state);
        if let Some(ms) = request.timeout_ms {
            let agent = Arc::clone(self);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let _ = agent.signal(id, rustix::process::Signal::KILL);
            });
        }
        Ok(info)
    }

    /// Every process held.
    pub fn list(&self) -> Vec<ProcessInfo> {
        let state = self.lock();
        state.procs.iter().map(|(id, proc)| Agent::info_of(*id, proc)).collect()
    }

    /// One process.
    pub fn info(&self, id: u64) -> Result<ProcessInfo, String> {
        self.with(id, |proc| Ok(Agent::info_of(id, proc)))
    }

    /// The agent's own state.
    pub fn agent_info(&self) -> AgentInfo {
        let state = self.lock();
        AgentInfo {
            version: VERSION,
            pid: rustix::process::getpid().as_raw_nonzero().get(),
            reaps_orphans: self.config.reaps_orphans,
            processes: state.procs.len() as u64,
            max_processes: self.config.max_processes,
            buffer_reserved: state.reserved,
            buffer_bound: self.config.buffer_bound,
            orphans_reaped: state.orphans_reaped,
            recent_orphans: state.recent_orphans.iter().copied().collect(),
        }
    }

    /// Sends `signal` to the process's group, after checking that the pid still names the
    /// process that was started (pid and start time).
    pub fn signal(&self, id: u64, signal: rustix::process::Signal) -> Result<ProcessInfo, String> {
        self.with(id, |proc| {
            if proc.reaped.is_some() {
                return Err(refuse::exited(id, "signal it"));
            }
            // Unreaped, the pid cannot have been reused (a zombie keeps it); the start time
            // check holds the identity even so.
            if spawn::start_time(proc.pid) != Some(proc.start_time) {
                return Err(refuse::recycled(id, proc.pid));
            }
            let pid = Pid::from_raw(proc.pid).expect("a positive pid");
            // ESRCH: the whole group is gone but the leader is not reaped yet; the reaper
            // will report the exit.
            let _ = rustix::process::kill_process_group(pid, signal);
            Ok(Agent::info_of(id, proc))
        })
    }

    /// Checks that stdin can be written and hands out where to write.
    pub(crate) fn stdin_target(&self, id: u64, what: &str) -> Result<StdinTarget, String> {
        self.with(id, |proc| {
            if proc.reaped.is_some() {
                return Err(refuse::exited(id, what));
            }
            if !proc.stdin_piped {
                return Err(refuse::not_piped(id));
            }
            let fd = proc.stdin.clone().ok_or_else(|| refuse::stdin_closed(id))?;
            Ok(StdinTarget {
                fd,
                tty: proc.master.is_some(),
            })
        })
    }

    /// Drops the agent's end of the stdin pipe (EOF once no write holds it).
    pub(crate) fn drop_stdin(&self, id: u64) -> Result<(), String> {
        self.with(id, |proc| {
            proc.stdin = None;
            Ok(())
        })
    }

    /// Resizes the terminal.
    pub fn resize(&self, id: u64, rows: u16, cols: u16) -> Result<(), String> {
        self.with(id, |proc| {
            if proc.reaped.is_some() {
                return Err(refuse::exited(id, "resize its terminal"));
            }
            let master = proc.master.as_ref().ok_or_else(|| refuse::no_tty(id))?;
            if rows == 0 || cols == 0 {
                return Err(refuse::tty_size());
            }
            rustix::termios::tcsetwinsize(&**master, spawn::winsize(rows, cols))
                .map_err(|error| format!("resize failed: {error}"))
        })
    }

    /// A receiver of the process's changes (bytes, exit).
    pub(crate) fn subscribe(&self, id: u64) -> Result<watch::Receiver<()>, String> {
        self.with(id, |proc| Ok(proc.changed.subscribe()))
    }

    /// Checks `output`'s start offsets and resolves the absent ones to the oldest byte held.
    pub(crate) fn cursors(&self, id: u64, from: &crate::proto::Offsets) -> Result<Vec<(Stream, u64)>, String> {
        self.with(id, |proc| {
            for stream in [Stream::Stdout, Stream::Stderr, Stream::Tty] {
                if from.get(stream).is_some() && !proc.streams.iter().any(|(s, _)| *s == stream) {
                    return Err(refuse::no_stream(id, stream, proc.master.is_some()));
                }
            }
            let mut cursors = Vec::new();
            for (stream, ring) in &proc.streams {
                let offset = from.get(*stream).unwrap_or(ring.start());
                ring.check(offset)
                    .map_err(|error| ring_refusal(id, *stream, offset, error))?;
                cursors.push((*stream, offset));
            }
            Ok(cursors)
        })
    }

    /// The next thing a reader at `cursors` gets.
    pub(crate) fn next(&self, id: u64, cursors: &[(Stream, u64)]) -> Result<Next, String> {
        self.with(id, |proc| {
            for (stream, offset) in cursors {
                let ring = &mut proc
                    .streams
                    .iter_mut()
                    .find(|(s, _)| s == stream)
                    .expect("a cursor's stream")
                    .1;
                let bytes = ring
                    .read(*offset, crate::proto::MAX_CHUNK)
                    .map_err(|error| ring_refusal(id, *stream, *offset, error))?;
                if !bytes.is_empty() {
                    if ring.handed(*offset + bytes.len() as u64) {
                        proc.drained.notify_waiters();
                    }
                    return Ok(Next::Chunk(*stream, *offset, bytes));
                }
            }
            Ok(if proc.finished() {
                Next::Exit(Agent::info_of(id, proc))
            } else {
                Next::Pending
            })
        })
    }

    /// The final state once the process has exited and its output is drained.
    pub(crate) fn finished(&self, id: u64) -> Result<Option<ProcessInfo>, String> {
        self.with(id, |proc| Ok(proc.finished().then(|| Agent::info_of(id, proc))))
    }

    /// The room a pump may fill in the ring of `stream` of process `id`.
    pub(crate) fn room(&self, id: u64, stream: Stream) -> usize {
        let state = self.lock();
        let ring = state
            .procs
            .get(&id)
            .and_then(|p| p.streams.iter().find(|(s, _)| *s == stream));
        ring.map_or(usize::MAX, |(_, ring)| ring.room())
    }

    /// Appends what a pump read to the ring of `stream` of process `id`.
    pub(crate) fn pushed(&self, id: u64, stream: Stream, bytes: &[u8]) {
        let mut state = self.lock();
        if let Some(proc) = state.procs.get_mut(&id) {
            let ring = proc.streams.iter_mut().find(|(s, _)| *s == stream);
            if let Some((_, ring)) = ring {
                ring.push(bytes);
            }
            proc.changed.send_replace(());
        }
    }

    /// A held process (`hold`) whose final state a reader was handed leaves the table, and
    /// the replay bytes it reserved go back to the bound.
    pub(crate) fn delivered(&self, id: u64) {
        let mut state = self.lock();
        if state.procs.get(&id).is_some_and(|proc| proc.hold && proc.finished()) {
            let proc = state.procs.remove(&id).expect("held");
            let held: u64 = proc.streams.iter().map(|(_, ring)| ring.end() - ring.start()).sum();
            state.reserved -= held;
            state.keys.retain(|_, (_, held_id)| *held_id != id);
            state.ended.retain(|ended| *ended != id);
        }
    }

    /// `stream` of process `id` reached its end: its ring can no longer grow, so its
    /// reservation shrinks from `keep` to the bytes it holds (an ended process costs the
    /// bound only what it keeps for replay, not what it could have kept).
    pub(crate) fn output_closed(&self, id: u64, stream: Stream) {
        let mut state = self.lock();
        let Some(proc) = state.procs.get_mut(&id) else {
            return;
        };
        proc.open_outputs -= 1;
        proc.changed.send_replace(());
        let unused = proc
            .streams
            .iter()
            .find(|(s, _)| *s == stream)
            .map_or(0, |(_, ring)| ring.keep() as u64 - (ring.end() - ring.start()));
        state.reserved -= unused;
        Agent::note_ended(&mut state, id);
    }

    /// Reaps every child that has exited: the agent's own processes get their status, the
    /// rest are counted as orphans. Called on each SIGCHLD.
    pub fn reap(&self) {
        let mut state = self.lock();
        while let Ok(Some((pid, status))) = rustix::process::wait(WaitOptions::NOHANG) {
            let pid = pid.as_raw_nonzero().get();
            match state.running.remove(&pid) {
                Some(id) => {
                    let proc = state.procs.get_mut(&id).expect("a running process is held");
                    proc.reaped = Some(status_of(status));
                    proc.stdin = None;
                    proc.changed.send_replace(());
                    Agent::note_ended(&mut state, id);
                }
                None => {
                    state.orphans_reaped += 1;
                    if state.recent_orphans.len() == 64 {
                        state.recent_orphans.pop_front();
                    }
                    state.recent_orphans.push_back(pid);
                }
            }
        }
    }

    /// SIGKILLs every running process group (the agent is going away).
    pub fn kill_all(&self) {
        let state = self.lock();
        for pid in state.running.keys() {
            if let Some(pid) = Pid::from_raw(*pid) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

fn ring_refusal(id: u64, stream: Stream, offset: u64, error: crate::ring::RingError) -> String {
    match error {
        crate::ring::RingError::Dropped { first } => refuse::dropped(id, stream, offset, first),
        crate::ring::RingError::PastEnd { end } => refuse::past_end(id, stream, offset, end),
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
