//! What a failed look at a running command's exec means. The engine forgets every exec
//! when it restarts (and removes a stopped `AutoRemove` container as it starts), so a
//! command whose engine restarted under it is one whose exec is unknown (404): that is
//! said as what happened (the lease lost with its container, the container stopped, or
//! the command lost by the engine), never as the engine's bare `No such exec instance`.

use bollard::errors::Error as BollardError;
use envrt_driver_api::DriverError;

use crate::engine::{Engine, is_not_found};

/// What a command was being asked about, in the unreachable text:
/// `Docker engine at {address} is not reachable (reading a command's status).`
pub(crate) const DOING: &str = "reading a command's status";

/// The error of an exec inspect (command running in `container`) that failed with `error`.
pub(crate) async fn inspect_error(engine: &Engine, container: &str, error: BollardError) -> DriverError {
    if !is_not_found(&error) {
        return engine.error(DOING, error);
    }
    match engine.retry(|| engine.docker.inspect_container(container, None)).await {
        Err(e) if is_not_found(&e) => DriverError::ResourceGone {
            id: container.to_owned(),
        },
        Ok(inspected) if inspected.state.as_ref().and_then(|s| s.running) == Some(true) => {
            DriverError::other(lost_text(&engine.address, container))
        }
        Ok(_) => DriverError::other(stopped_text(&engine.address, container)),
        Err(e) => engine.error(DOING, e),
    }
}

/// The engine no longer knows a command whose container still runs (it restarted).
pub(crate) fn lost_text(address: &str, container: &str) -> String {
    format!(
        "Docker engine at {address} lost the command running in container {container} (the engine restarted while it ran); its exit status is unknown."
    )
}

/// The command's container stopped under it (and the engine forgot the command).
pub(crate) fn stopped_text(address: &str, container: &str) -> String {
    format!(
        "Container {container} stopped while a command ran in it, so the command's exit status is unknown (Docker engine at {address})."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two texts are the contract's, word for word (section 6).
    #[test]
    fn the_texts_are_the_contracts() {
        let contract = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/contract.md"))
            .unwrap()
            .replace('\n', " ");
        for text in [
            lost_text("{address}", "{container}"),
            stopped_text("{address}", "{container}"),
            format!("`{DOING}`"),
        ] {
            assert!(contract.contains(&text), "not in docs/contract.md: {text}");
        }
    }
}
