//! The SQL side: schema, pragmas and one function per store operation. Everything here
//! blocks; the async wrapper runs it on the blocking pool.

use std::path::Path;
use std::time::{Duration, Instant};

use envrt_runtime_core::{Environment, Lease, LeaseFilter, StoreError};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params, params_from_iter};

/// The schema this code writes, kept in `PRAGMA user_version`.
pub(crate) const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS environments (
    id     TEXT PRIMARY KEY NOT NULL,
    record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS leases (
    id             TEXT PRIMARY KEY NOT NULL,
    run_id         TEXT,
    environment_id TEXT,
    status         TEXT NOT NULL,
    acquired_at    INTEGER NOT NULL,
    record         TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS leases_run ON leases (run_id);
CREATE INDEX IF NOT EXISTS leases_environment ON leases (environment_id);
CREATE INDEX IF NOT EXISTS leases_status ON leases (status);
CREATE INDEX IF NOT EXISTS leases_acquired ON leases (acquired_at, id);
";

fn err(message: impl Into<String>, source: rusqlite::Error) -> StoreError {
    StoreError {
        message: format!("{}: {source}", message.into()),
        source: Some(Box::new(source)),
    }
}

/// Opens the database, sets WAL and the busy timeout, and creates or checks the schema.
///
/// Any number of processes may do this at once on a brand-new file. Switching a new
/// database to WAL needs an exclusive lock and SQLite does not wait for it (the busy
/// handler is not called there): a second opener reading the fresh file makes the switch
/// fail with "database is locked". So openers take turns through an exclusive `flock` on
/// a sidecar file (`<db>.lock`, never the database itself: closing another descriptor of
/// the database would drop SQLite's own POSIX locks), and an opener that still meets
/// `SQLITE_BUSY` (a peer without the sidecar, a read-only directory) starts over with a
/// short backoff. Both waits end at `busy_timeout`.
pub(crate) fn open(path: &Path, busy_timeout: Duration) -> Result<Connection, StoreError> {
    crate::private::ensure_private(path)?;
    let deadline = Instant::now() + busy_timeout;
    let _turn = open_lock(path, deadline);
    let mut delay = Duration::from_millis(1);
    loop {
        match open_once(path, busy_timeout) {
            Err(Failure::Busy(_)) if Instant::now() < deadline => {
                std::thread::sleep(delay.min(deadline.saturating_duration_since(Instant::now())));
                delay = (delay * 2).min(Duration::from_millis(50));
            }
            Err(Failure::Busy(e)) | Err(Failure::Other(e)) => return Err(e),
            Ok(connection) => return Ok(connection),
        }
    }
}

/// The exclusive turn at opening `path`, held until the returned file is dropped; `None`
/// when the sidecar cannot be made (the retry on `SQLITE_BUSY` still covers that case)
/// or the turn did not come before `deadline`.
fn open_lock(path: &Path, deadline: Instant) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    path.file_name()?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(crate::private::FILE_MODE)
        .open(crate::private::sibling(path, ".lock"))
        .ok()?;
    let mut delay = Duration::from_millis(1);
    loop {
        match file.try_lock() {
            Ok(()) => return Some(file),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(20));
            }
            Err(_) => return None,
        }
    }
}

/// Why one attempt at opening failed.
enum Failure {
    /// Another connection held a lock SQLite would not wait for: worth another attempt.
    Busy(StoreError),
    /// Anything else: final.
    Other(StoreError),
}

fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Why the file system holding `path` refuses writes, when it does: `full` (no block left
/// for an unprivileged writer) or `read-only`. SQLite reports either as a bare "disk I/O
/// error" or "attempt to write a readonly database".
pub(crate) fn file_system_refusal(path: &Path) -> Option<&'static str> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let stat = rustix::fs::statvfs(dir).ok()?;
    if stat.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
        Some("read-only")
    } else if stat.f_bavail == 0 {
        Some("full")
    } else {
        None
    }
}

fn open_once(path: &Path, busy_timeout: Duration) -> Result<Connection, Failure> {
    let shown = path.display();
    let fail = |e: rusqlite::Error| {
        let busy = is_busy(&e);
        let error = match file_system_refusal(path) {
            Some(why) if !busy => StoreError {
                message: format!("cannot open \"{shown}\": its file system is {why}"),
                source: Some(Box::new(e)),
            },
            _ => err(format!("cannot open \"{shown}\""), e),
        };
        if busy {
            Failure::Busy(error)
        } else {
            Failure::Other(error)
        }
    };
    let mut connection = Connection::open(path).map_err(fail)?;
    connection.busy_timeout(busy_timeout).map_err(fail)?;
    // WAL lets readers run beside a writer; the setting is stored in the file, so only the
    // first opener actually switches it. NORMAL sync is durable across process crashes.
    let mode: String = connection
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(fail)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Failure::Other(StoreError::new(format!(
            "cannot open \"{shown}\": the database refused WAL mode (journal mode is {mode})"
        ))));
    }
    connection.execute_batch("PRAGMA synchronous = NORMAL;").map_err(fail)?;
    let tx = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(fail)?;
    let version: i64 = tx
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(fail)?;
    if version > SCHEMA_VERSION {
        return Err(Failure::Other(StoreError::new(format!(
            "\"{shown}\" has schema version {version}, newer than the {SCHEMA_VERSION} this envrt understands"
        ))));
    }
    tx.execute_batch(SCHEMA).map_err(fail)?;
    tx.execute_batch(crate::plugin_state::SCHEMA).map_err(fail)?;
    tx.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION};"))
        .map_err(fail)?;
    tx.commit().map_err(fail)?;
    Ok(connection)
}

fn to_json<T: serde::Serialize>(what: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError {
        message: format!("cannot encode {what}: {e}"),
        source: Some(Box::new(e)),
    })
}

fn from_json<T: serde::de::DeserializeOwned>(what: &str, id: &str, record: &str) -> Result<T, StoreError> {
    serde_json::from_str(record).map_err(|e| StoreError {
        message: format!("{what} \"{id}\" is corrupt: {e}"),
        source: Some(Box::new(e)),
    })
}

fn write<T>(
    connection: &mut Connection,
    what: &str,
    f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
) -> Result<T, StoreError> {
    let context = || format!("cannot write {what}");
    let tx = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| err(context(), e))?;
    let out = f(&tx).map_err(|e| err(context(), e))?;
    tx.commit().map_err(|e| err(context(), e))?;
    Ok(out)
}

pub(crate) fn put_environment(connection: &mut Connection, environment: &Environment) -> Result<(), StoreError> {
    let record = to_json("environment", environment)?;
    let what = format!("environment \"{}\"", environment.id);
    write(connection, &what, |tx| {
        tx.execute(
            "INSERT INTO environments (id, record) VALUES (?1, ?2)
             ON CONFLICT (id) DO UPDATE SET record = excluded.record",
            params![environment.id, record],
        )
        .map(drop)
    })
}

pub(crate) fn get_environment(connection: &mut Connection, id: &str) -> Result<Option<Environment>, StoreError> {
    let record: Option<String> = connection
        .query_row("SELECT record FROM environments WHERE id = ?1", [id], |row| row.get(0))
        .optional()
        .map_err(|e| err(format!("cannot read environment \"{id}\""), e))?;
    record.map(|r| from_json("environment", id, &r)).transpose()
}

pub(crate) fn list_environments(connection: &mut Connection) -> Result<Vec<Environment>, StoreError> {
    let context = "cannot list environments";
    let mut statement = connection
        .prepare("SELECT id, record FROM environments ORDER BY id")
        .map_err(|e| err(context, e))?;
    let rows = statement
        .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))
        .map_err(|e| err(context, e))?;
    let mut out = Vec::new();
    for row in rows {
        let (id, record) = row.map_err(|e| err(context, e))?;
        out.push(from_json("environment", &id, &record)?);
    }
    Ok(out)
}

pub(crate) fn put_lease(connection: &mut Connection, lease: &Lease) -> Result<(), StoreError> {
    let record = to_json("lease", lease)?;
    let acquired_at = i64::try_from(lease.acquired_at.0).unwrap_or(i64::MAX);
    let what = format!("lease \"{}\"", lease.id);
    write(connection, &what, |tx| {
        tx.execute(
            "INSERT INTO leases (id, run_id, environment_id, status, acquired_at, record)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (id) DO UPDATE SET
                run_id = excluded.run_id,
                environment_id = excluded.environment_id,
                status = excluded.status,
                acquired_at = excluded.acquired_at,
                record = excluded.record",
            params![
                lease.id,
                lease.run_id,
                lease.environment_id,
                lease.status.as_str(),
                acquired_at,
                record
            ],
        )
        .map(drop)
    })
}

pub(crate) fn get_lease(connection: &mut Connection, id: &str) -> Result<Option<Lease>, StoreError> {
    let record: Option<String> = connection
        .query_row("SELECT record FROM leases WHERE id = ?1", [id], |row| row.get(0))
        .optional()
        .map_err(|e| err(format!("cannot read lease \"{id}\""), e))?;
    record.map(|r| from_json("lease", id, &r)).transpose()
}

pub(crate) fn list_leases(connection: &mut Connection, filter: &LeaseFilter) -> Result<Vec<Lease>, StoreError> {
    let mut clauses = Vec::new();
    let mut values: Vec<String> = Vec::new();
    if let Some(run) = &filter.run_id {
        values.push(run.clone());
        clauses.push(format!("run_id = ?{}", values.len()));
    }
    if let Some(environment) = &filter.environment_id {
        values.push(environment.clone());
        clauses.push(format!("environment_id = ?{}", values.len()));
    }
    if !filter.statuses.is_empty() {
        let mut marks = Vec::new();
        for status in &filter.statuses {
            values.push(status.as_str().to_owned());
            marks.push(format!("?{}", values.len()));
        }
        clauses.push(format!("status IN ({})", marks.join(", ")));
    }
    let mut query = String::from("SELECT id, record FROM leases");
    if !clauses.is_empty() {
        query.push_str(" WHERE ");
        query.push_str(&clauses.join(" AND "));
    }
    query.push_str(" ORDER BY acquired_at, id");
    let context = "cannot list leases";
    let mut statement = connection.prepare(&query).map_err(|e| err(context, e))?;
    let rows = statement
        .query_map(params_from_iter(values.iter()), |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })
        .map_err(|e| err(context, e))?;
    let mut out = Vec::new();
    for row in rows {
        let (id, record) = row.map_err(|e| err(context, e))?;
        let lease: Lease = from_json("lease", &id, &record)?;
        // The columns are only an index; the record is the truth.
        if filter.matches(&lease) {
            out.push(lease);
        }
    }
    Ok(out)
}
