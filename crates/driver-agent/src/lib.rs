//! `envrt-driver-agent`: the drivers' one bridge to the in-lease supervisor
//! (`envrt-agent`), so that persistent process sessions (contract section 9) mean the same
//! on every driver that runs one.
//!
//! A driver says only what differs between drivers, by implementing [`AgentHost`]: how to
//! reach the lease's supervisor (a unix socket in a host directory for local and Docker, a
//! forwarded socket for ssh, a socket the sandbox worker made), how to start one, and how a
//! [`SpawnRequest`] maps onto the supervisor's (the working directory resolved inside the
//! lease, the lease's environment). [`process_sessions!`] then implements
//! [`ProcessSessions`] for the driver: every verb is one request to the supervisor, every
//! answer mapped onto the driver API's types, and every refusal the supervisor gives onto
//! the contract's typed one.
//!
//! Everything the supervisor says is untrusted (it runs inside the boundary, beside the
//! command): the agent's client bounds frames and checks each chunk's offset, and the
//! bridge rebuilds every process id from the lease it asked, never from the answer.
//!
//! [`locate`] finds the supervisor's binary for every driver the same way, [`is_static`]
//! says whether it can run in an image with no C library of its own, and [`start_lock`]
//! keeps two programs from starting two supervisors for one lease; [`egress`] runs a
//! lease's egress proxy on the host for every driver that has one; [`next_generation`] and
//! [`id_args`] keep a lease's process ids from repeating across its supervisors.

pub mod egress;
pub mod expose;
mod ids;
mod locate;
mod lock;
mod map;
mod sessions;

pub use async_trait::async_trait;
/// The supervisor's own crate (its wire types and client), for a driver that talks to it
/// beyond the process verbs (a buffered execute through it).
pub use envrt_agent as agent;
pub use envrt_agent::client::{Client, ClientError};
pub use envrt_agent::proto::SpawnRequest as AgentSpawnRequest;
pub use envrt_agent::proto::{StdinMode as AgentStdinMode, TtySize as AgentTtySize};
pub use envrt_driver_api::process::{Offsets, ProcessInfo, ProcessStatus, SpawnRequest};
pub use envrt_driver_api::{DriverError, LeaseContext, ProcessOutput, ProcessSessions};
pub use ids::{HELD_PROCESSES, IDS_PER_SUPERVISOR, first_id, id_args, next_generation};
pub use locate::{AGENT_BINARY, AGENT_VAR, is_static, locate, locate_in, locate_named};
pub use lock::start_lock;
pub use map::lift;
pub use sessions::{
    AgentHost, close_stdin, output, process, processes, request_of, resize, signal, spawn, wait, write_stdin,
};

/// Implements [`ProcessSessions`] for a driver type that implements [`AgentHost`]: each
/// verb forwards to this crate's function of the same name. Use it once in the driver
/// crate (`envrt_driver_agent::process_sessions!(MyDriver);`) and return `Some(self)`
/// from `as_processes` where the supervisor can run.
#[macro_export]
macro_rules! process_sessions {
    ($driver:ty) => {
        #[$crate::async_trait]
        impl $crate::ProcessSessions for $driver {
            async fn spawn(
                &self,
                context: &$crate::LeaseContext,
                request: $crate::SpawnRequest,
            ) -> ::std::result::Result<$crate::ProcessInfo, $crate::DriverError> {
                $crate::spawn(self, context, request).await
            }

            async fn processes(
                &self,
                context: &$crate::LeaseContext,
            ) -> ::std::result::Result<::std::vec::Vec<$crate::ProcessInfo>, $crate::DriverError> {
                $crate::processes(self, context).await
            }

            async fn process(
                &self,
                context: &$crate::LeaseContext,
                number: u64,
            ) -> ::std::result::Result<::std::option::Option<$crate::ProcessInfo>, $crate::DriverError> {
                $crate::process(self, context, number).await
            }

            async fn output(
                &self,
                context: &$crate::LeaseContext,
                number: u64,
                from: &$crate::Offsets,
            ) -> ::std::result::Result<::std::boxed::Box<dyn $crate::ProcessOutput>, $crate::DriverError> {
                $crate::output(self, context, number, from).await
            }

            async fn write_stdin(
                &self,
                context: &$crate::LeaseContext,
                number: u64,
                bytes: &[u8],
            ) -> ::std::result::Result<(), $crate::DriverError> {
                $crate::write_stdin(self, context, number, bytes).await
            }

            async fn close_stdin(
                &self,
                context: &$crate::LeaseContext,
                number: u64,
            ) -> ::std::result::Result<(), $crate::DriverError> {
                $crate::close_stdin(self, context, number).await
            }

            async fn signal(
                &self,
                context: &$crate::LeaseContext,
                number: u64,
                signal: &str,
            ) -> ::std::result::Result<$crate::ProcessInfo, $crate::DriverError> {
                $crate::signal(self, context, number, signal).await
            }

            async fn resize(
                &self,
                context: &$crate::LeaseContext,
                number: u64,
                rows: u16,
                cols: u16,
            ) -> ::std::result::Result<(), $crate::DriverError> {
                $crate::resize(self, context, number, rows, cols).await
            }

            async fn wait(
                &self,
                context: &$crate::LeaseContext,
                number: u64,
                timeout: ::std::option::Option<::std::time::Duration>,
            ) -> ::std::result::Result<$crate::ProcessStatus, $crate::DriverError> {
                $crate::wait(self, context, number, timeout).await
            }
        }
    };
}
