//! Exposed lease ports through the lease's supervisor (contract section 10): the
//! supervisor's `connect` verb turns one connection to its socket into a stream to a port
//! on the lease's loopback, so a lease with no network at all can still serve a port to
//! the host. Every driver that runs a supervisor implements
//! [`ExposePorts`](envrt_driver_api::ExposePorts) by starting the supervisor when none
//! answers, then calling [`tunnel`].

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use envrt_agent::client::ClientError;
use envrt_driver_api::DriverError;

/// Opens a tunnel to `127.0.0.1:{port}` in the lease through the supervisor's socket at
/// host path `socket`, which the lease can write to: the path is opened `O_PATH |
/// O_NOFOLLOW`, must be a socket, and is connected through `/proc/self/fd`, so a link the
/// lease planted there leads nowhere. `shown` names the socket in refusals. The stream is
/// blocking.
pub async fn tunnel(socket: &Path, shown: &str, port: u16) -> Result<std::os::unix::net::UnixStream, DriverError> {
    use rustix::fs::{FileType, Mode, OFlags};
    let fd = rustix::fs::open(socket, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| DriverError::other(format!("cannot open the lease's supervisor socket {shown}: {e}")))?;
    let kind = rustix::fs::fstat(&fd).map(|stat| FileType::from_raw_mode(stat.st_mode));
    if !matches!(kind, Ok(FileType::Socket)) {
        return Err(DriverError::other(format!(
            "{shown} is not a socket (the lease put something else there)"
        )));
    }
    let through = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    let opened = envrt_agent::client::tunnel(&through, port).await;
    drop(fd);
    match opened {
        Ok(stream) => {
            let stream = stream
                .into_std()
                .map_err(|e| DriverError::io("cannot take over the tunnel", e))?;
            stream
                .set_nonblocking(false)
                .map_err(|e| DriverError::io("cannot take over the tunnel", e))?;
            Ok(stream)
        }
        Err(ClientError::Refused(text)) => Err(DriverError::other(text)),
        Err(broken) => Err(DriverError::other(broken.to_string())),
    }
}
