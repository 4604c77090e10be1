//! The optional driver group behind `duplexCommandStream` (contract section 7): a live
//! two-way byte channel to a running command, and how it ended.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::driver::LeaseContext;
use crate::error::DriverError;

/// How a duplex channel ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DuplexExit {
    /// The command's exit code; `None` when the host ended the channel.
    pub exit_code: Option<i32>,
    /// The provider's transport closed without an exit.
    pub transport_closed: bool,
}

/// A live two-way byte channel to a running command (contract section 7). Methods take
/// `&self`, so one task may read while another writes.
#[async_trait]
pub trait DuplexChannel: Send + Sync {
    /// Writes bytes to the command's stdin.
    ///
    /// - MUST deliver the bytes in order.
    /// - After [`close`](Self::close), SHOULD fail with `Duplex channel is closed.`
    ///   ([`DriverError::ChannelClosed`]).
    async fn write(&self, data: &[u8]) -> Result<(), DriverError>;
    /// The next chunk of output in order; `None` once output has ended.
    ///
    /// - MUST hold output produced before the first read, not lose it (the kit's
    ///   `duplex_late_reader_loses_nothing`).
    /// - MUST carry the command's stdout and stderr together, in the order it wrote them,
    ///   with no stream tag (section 7, "stderr"; `duplex_stderr_in_order`).
    async fn read(&self) -> Result<Option<Vec<u8>>, DriverError>;
    /// Closes the command's stdin: the command sees EOF.
    ///
    /// - The rest of the channel MUST keep working: output still reads, the exit still
    ///   arrives (`duplex_close_input_ends_cat`). A driver that cannot half-close declares
    ///   it to the kit (`Target::without_half_close`).
    async fn close_input(&self) -> Result<(), DriverError>;
    /// Stops the command.
    ///
    /// - MUST end the command; [`wait`](Self::wait) then returns.
    async fn stop(&self) -> Result<(), DriverError>;
    /// Closes the channel and frees everything it holds.
    ///
    /// - MUST be idempotent: closing again succeeds (`duplex_close_is_idempotent`).
    async fn close(&self) -> Result<(), DriverError>;
    /// Waits for the end of the command.
    ///
    /// - MUST report the command's exit code (`duplex_exit_code`), or `None` when the host
    ///   ended the channel; `transport_closed` when the provider's transport closed without
    ///   an exit (a plugin worker that exited: section 2).
    async fn wait(&self) -> Result<DuplexExit, DriverError>;
}

/// Duplex channels (contract section 7).
#[async_trait]
pub trait DuplexChannels: Send + Sync {
    /// Starts `command` (argv; element 0 is the program) and connects a channel to it.
    ///
    /// Needs `duplexCommandStream`. Before the call the facade has checked that the driver
    /// has the group, that the lease's snapshot grants `duplexCommandStream` (else
    /// `Sandbox lease does not grant the duplex command stream capability.`, also when the
    /// snapshot cannot be resolved: fail closed), that the lease is not past its expiry,
    /// that it is active (section 3), and that `command` is not empty (`Invalid input: a
    /// duplex command needs at least a program`).
    ///
    /// - MUST give the command one pipe for stdout and stderr, so the channel reads them
    ///   in the order written (section 7, "stderr").
    /// - The channel MUST keep the [`DuplexChannel`] rules.
    async fn open_duplex_channel(
        &self,
        context: &LeaseContext,
        command: &[String],
    ) -> Result<Box<dyn DuplexChannel>, DriverError>;
}
