//! The worker process and its connection: starting the process (`process`, with the
//! descriptors it inherits, `fds`), the live JSON-RPC connection (`connection`), and the
//! supervisor that runs the handshake, restarts a crashed worker and shuts it down
//! (`supervisor`). Code outside this module reaches the supervisor through its methods.

pub(crate) mod connection;
pub(crate) mod process;
pub(crate) mod supervisor;
