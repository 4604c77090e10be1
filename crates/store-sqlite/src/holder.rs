//! Which process holds a lease, recorded in the lease metadata so that a later process can
//! tell whether the holder is gone.
//!
//! A holder is a pid plus the process's start time (field 22 of `/proc/<pid>/stat`, in
//! clock ticks since boot). The pair survives pid reuse: a new process that happens to get
//! the same pid has a different start time, so it is not mistaken for the holder.

use std::io;

use envrt_runtime_core::JsonMap;

/// Lease metadata key of the holder's pid.
pub const HOLDER_PID_KEY: &str = "holderPid";
/// Lease metadata key of the holder's start time.
pub const HOLDER_START_TIME_KEY: &str = "holderStartTime";

/// A process identified by pid and start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    /// The process id.
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat`: start time in clock ticks after boot.
    pub start_time: u64,
}

/// What `/proc` says about a process.
struct ProcStat {
    state: char,
    start_time: u64,
}

fn read_stat(pid: u32) -> io::Result<Option<ProcStat>> {
    let text = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        // A process that exits while being read shows up as ESRCH.
        Err(e) if e.raw_os_error() == Some(3) => return Ok(None),
        Err(e) => return Err(e),
    };
    parse_stat(&text).map(Some).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat has an unexpected format"),
        )
    })
}

/// Parses the state (field 3) and start time (field 22). The command name (field 2) may
/// hold spaces and parentheses, so fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let start_time = fields.get(22 - 3)?.parse().ok()?;
    Some(ProcStat { state, start_time })
}

impl Holder {
    /// The calling process.
    pub fn current() -> io::Result<Holder> {
        Holder::of(std::process::id())?
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the current process is not in /proc"))
    }

    /// The process `pid`, or `None` when no such process runs.
    pub fn of(pid: u32) -> io::Result<Option<Holder>> {
        Ok(read_stat(pid)?.map(|stat| Holder {
            pid,
            start_time: stat.start_time,
        }))
    }

    /// The parent of the calling process (the shell that ran a command-line tool).
    pub fn parent() -> io::Result<Holder> {
        let ppid = std::os::unix::process::parent_id();
        Holder::of(ppid)?.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the parent process is gone"))
    }

    /// The holder recorded in lease metadata, when both keys are there and are numbers.
    pub fn from_metadata(metadata: &JsonMap) -> Option<Holder> {
        let pid = metadata.get(HOLDER_PID_KEY)?.as_u64()?;
        let start_time = metadata.get(HOLDER_START_TIME_KEY)?.as_u64()?;
        Some(Holder {
            pid: u32::try_from(pid).ok()?,
            start_time,
        })
    }

    /// Records this holder in lease metadata.
    pub fn write_to(&self, metadata: &mut JsonMap) {
        metadata.insert(HOLDER_PID_KEY.into(), self.pid.into());
        metadata.insert(HOLDER_START_TIME_KEY.into(), self.start_time.into());
    }

    /// Whether the holder still runs: a process with this pid exists, has this start time
    /// and is not a zombie. An unreadable `/proc` entry counts as alive (never clean up
    /// what might still be in use).
    pub fn is_alive(&self) -> bool {
        match read_stat(self.pid) {
            Ok(Some(stat)) => stat.start_time == self.start_time && !matches!(stat.state, 'Z' | 'X'),
            Ok(None) => false,
            Err(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_command_name_with_spaces_and_parentheses() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let stat = parse_stat(line).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.start_time, 987654);
        assert!(parse_stat("12 (x) S 1 2").is_none());
        assert!(parse_stat("no parenthesis").is_none());
    }

    #[test]
    fn the_current_process_is_alive_and_round_trips_through_metadata() {
        let me = Holder::current().unwrap();
        assert_eq!(me.pid, std::process::id());
        assert!(me.is_alive());
        let mut metadata = JsonMap::new();
        me.write_to(&mut metadata);
        assert_eq!(Holder::from_metadata(&metadata), Some(me));
        // Same pid, another start time: a reused pid is not the holder.
        let impostor = Holder {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!impostor.is_alive());
    }

    #[test]
    fn a_reaped_child_is_gone_and_a_zombie_counts_as_gone() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let holder = Holder::of(child.id()).unwrap().unwrap();
        assert!(holder.is_alive());
        child.kill().unwrap();
        // Not reaped yet: a zombie (or already gone); either way not a live holder.
        let mut zombie_seen_gone = false;
        for _ in 0..500 {
            if !holder.is_alive() {
                zombie_seen_gone = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(zombie_seen_gone, "a killed, unreaped child still looks alive");
        child.wait().unwrap();
        assert!(!holder.is_alive());
    }

    #[test]
    fn metadata_without_numbers_has_no_holder() {
        let mut metadata = JsonMap::new();
        assert_eq!(Holder::from_metadata(&metadata), None);
        metadata.insert(HOLDER_PID_KEY.into(), "12".into());
        metadata.insert(HOLDER_START_TIME_KEY.into(), 5.into());
        assert_eq!(Holder::from_metadata(&metadata), None);
        metadata.insert(HOLDER_PID_KEY.into(), (u64::from(u32::MAX) + 1).into());
        assert_eq!(Holder::from_metadata(&metadata), None);
    }
}
