//! The pump: one task per output stream of a process, copying it into the process's ring.

use std::sync::Arc;

use tokio::net::unix::pipe;
use tokio::sync::Notify;

use crate::proto::Stream;
use crate::table::Agent;

/// Copies one output stream into its ring until EOF. Never waits for a reader, unless the
/// process's output is held (`hold`): then it reads only into room a reader made, woken
/// through `drained` when a reader was handed bytes.
pub(crate) async fn pump(agent: Arc<Agent>, id: u64, stream: Stream, fd: pipe::Receiver, drained: Arc<Notify>) {
    loop {
        // Registered before the look, so a reader's wake-up between the two is not lost.
        let woken = drained.notified();
        let room = agent.room(id, stream);
        if room == 0 {
            woken.await;
            continue;
        }
        if fd.readable().await.is_err() {
            break;
        }
        // The buffer lives only across the read, not in the pump's future: an idle process
        // costs no buffer.
        let mut buf = [0u8; 16 * 1024];
        let len = buf.len().min(room);
        match fd.try_read(&mut buf[..len]) {
            Ok(0) => break,
            Ok(n) => agent.pushed(id, stream, &buf[..n]),
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            // EIO: a terminal whose last holder closed it.
            Err(_) => break,
        }
    }
    agent.output_closed(id, stream);
}
