//! The agent's side of the wire: accepts connections on the unix socket and answers each
//! request in its own task, so a long `output` or `wait` never holds up the rest.

use std::collections::HashSet;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::proto::{
    Frame, Op, Reply, Request, Response, Status, VERSION, chunk_frame, json_frame, read_frame, write_frame,
};
use crate::refuse;
use crate::table::{Agent, Next, StdinPipe, parse_signal};

/// The most requests one connection may have in flight (each `output` stream is one).
pub const MAX_IN_FLIGHT: usize = 256;

/// The terminal's end-of-file character (`^D`, VEOF in the default line discipline).
const TTY_EOF: u8 = 4;

/// Accepts connections until the listener fails.
pub async fn serve(agent: Arc<Agent>, listener: UnixListener) -> io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(connection(Arc::clone(&agent), stream));
    }
}

fn respond(id: u64, result: Result<Reply, String>) -> Vec<u8> {
    json_frame(&Response { id, result })
}

async fn connection(agent: Arc<Agent>, stream: UnixStream) {
    let (mut reader, mut writer) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
    let write_task = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            if write_frame(&mut writer, &frame).await.is_err() {
                break;
            }
        }
        writer
    });
    let in_flight: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let mut tasks = JoinSet::new();
    let mut greeted = false;
    // Whether a request other than hello came: `connect` only comes first.
    let mut used = false;
    loop {
        while tasks.try_join_next().is_some() {}
        let body = match read_frame(&mut reader).await {
            Ok(Some(Frame::Json(body))) => body,
            Ok(Some(Frame::Data(_))) => {
                let _ = tx.send(respond(0, Err(refuse::data_from_client()))).await;
                break;
            }
            Ok(None) => break,
            Err(error) => {
                // A frame that breaks the framing leaves no way to find the next one.
                let _ = tx.send(respond(0, Err(error))).await;
                break;
            }
        };
        let request: Request = match serde_json::from_slice(&body) {
            Ok(request) => request,
            Err(error) => {
                let _ = tx.send(respond(0, Err(refuse::malformed(&error)))).await;
                continue;
            }
        };
        let id = request.id;
        if let Op::Hello { version } = request.op {
            let result = match (greeted, version) {
                (true, _) => Err(refuse::hello_again()),
                (false, VERSION) => Ok(Reply::Hello { version: VERSION }),
                (false, other) => Err(refuse::version(other)),
            };
            let refused = result.is_err() && !greeted;
            greeted = greeted || result.is_ok();
            let _ = tx.send(respond(id, result)).await;
            if refused {
                break;
            }
            continue;
        }
        if !greeted {
            let _ = tx.send(respond(id, Err(refuse::hello_first()))).await;
            break;
        }
        if let Op::Connect { port } = request.op {
            if used {
                let _ = tx.send(respond(id, Err(refuse::connect_not_alone()))).await;
                continue;
            }
            match crate::tunnel::open(port).await {
                Err(refusal) => {
                    let _ = tx.send(respond(id, Err(refusal))).await;
                    continue;
                }
                Ok((upstream, slot)) => {
                    let _ = tx.send(respond(id, Ok(Reply::Connected))).await;
                    drop(tx);
                    let Ok(writer) = write_task.await else { return };
                    let Ok(stream) = reader.reunite(writer) else { return };
                    crate::tunnel::carry(stream, upstream, slot).await;
                    return;
                }
            }
        }
        used = true;
        let refusal = {
            let mut flying = in_flight.lock().unwrap_or_else(|p| p.into_inner());
            if flying.contains(&id) {
                Some(refuse::in_flight(id))
            } else if flying.len() >= MAX_IN_FLIGHT {
                Some(refuse::too_many_in_flight(MAX_IN_FLIGHT))
            } else {
                flying.insert(id);
                None
            }
        };
        if let Some(refusal) = refusal {
            let _ = tx.send(respond(id, Err(refusal))).await;
            continue;
        }
        let (agent, tx, in_flight) = (Arc::clone(&agent), tx.clone(), Arc::clone(&in_flight));
        tasks.spawn(async move {
            let result = handle(&agent, id, request.op, &tx).await;
            in_flight.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            let _ = tx.send(respond(id, result)).await;
        });
    }
    // Dropping the tasks ends this connection's streams; the processes live on.
    drop(tasks);
    drop(tx);
    let _ = write_task.await;
}

async fn handle(agent: &Arc<Agent>, request: u64, op: Op, tx: &mpsc::Sender<Vec<u8>>) -> Result<Reply, String> {
    match op {
        Op::Hello { .. } => Err(refuse::hello_again()),
        Op::Connect { .. } => Err(refuse::connect_not_alone()),
        Op::Spawn(spawn) => agent.spawn(spawn).map(Reply::Process),
        Op::List => Ok(Reply::Processes(agent.list())),
        Op::Info { process } => agent.info(process).map(Reply::Process),
        Op::Agent => Ok(Reply::Agent(agent.agent_info())),
        Op::Signal { process, signal } => {
            let signal = parse_signal(&signal)?;
            agent.signal(process, signal).map(Reply::Process)
        }
        Op::Resize { process, rows, cols } => agent.resize(process, rows, cols).map(|()| Reply::Done),
        Op::WriteStdin { process, data } => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data.as_bytes())
                .map_err(|_| refuse::base64())?;
            let target = agent.stdin_target(process, "write to its stdin")?;
            write_all(&target.fd, &bytes).await?;
            Ok(Reply::Done)
        }
        Op::CloseStdin { process } => {
            let target = agent.stdin_target(process, "close its stdin")?;
            if target.tty {
                write_all(&target.fd, &[TTY_EOF]).await?;
            } else {
                agent.drop_stdin(process)?;
            }
            Ok(Reply::Done)
        }
        Op::Wait { process, timeout_ms } => wait(agent, process, timeout_ms).await.map(Reply::Status),
        Op::Output { process, from } => output(agent, request, process, &from, tx).await,
    }
}

async fn write_all(stdin: &StdinPipe, mut rest: &[u8]) -> Result<(), String> {
    let _in_order = stdin.order.lock().await;
    let fd = &stdin.fd;
    while !rest.is_empty() {
        fd.writable().await.map_err(|error| format!("writing stdin: {error}"))?;
        match fd.try_write(rest) {
            Ok(n) => rest = &rest[n..],
            Err(error) if matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
            Err(error) => return Err(format!("writing stdin: {error}")),
        }
    }
    Ok(())
}

async fn wait(agent: &Agent, process: u64, timeout_ms: Option<u64>) -> Result<Status, String> {
    let mut changes = agent.subscribe(process)?;
    let finished = async {
        loop {
            changes.borrow_and_update();
            if let Some(info) = agent.finished(process)? {
                return Ok(info.status);
            }
            if changes.changed().await.is_err() {
                return agent.info(process).map(|info| info.status);
            }
        }
    };
    match timeout_ms {
        None => finished.await,
        Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), finished).await {
            Ok(result) => result,
            Err(_) => agent.info(process).map(|info| info.status),
        },
    }
}

async fn output(
    agent: &Agent,
    request: u64,
    process: u64,
    from: &crate::proto::Offsets,
    tx: &mpsc::Sender<Vec<u8>>,
) -> Result<Reply, String> {
    let mut cursors = agent.cursors(process, from)?;
    let mut changes = agent.subscribe(process)?;
    loop {
        changes.borrow_and_update();
        match agent.next(process, &cursors)? {
            Next::Chunk(stream, offset, bytes) => {
                let end = offset + bytes.len() as u64;
                if tx.send(chunk_frame(request, stream, offset, &bytes)).await.is_err() {
                    return Err("the connection closed".to_owned());
                }
                for cursor in &mut cursors {
                    if cursor.0 == stream {
                        cursor.1 = end;
                    }
                }
            }
            Next::Exit(info) => {
                agent.delivered(process);
                return Ok(Reply::Exit(info));
            }
            Next::Pending => {
                if changes.changed().await.is_err() {
                    return agent.info(process).map(Reply::Exit);
                }
            }
        }
    }
}
