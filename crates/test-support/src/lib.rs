//! What envrt's tests share, in one place (a dev-dependency only; `xtask/src/layers.rs`
//! refuses it as a normal dependency):
//!
//! - [`Component`]: whether a component a test needs (Docker, the sandbox, the test sshd,
//!   the test network) is required here, by `ENVRT_REQUIRE_<NAME>=1` as `.ci/run` sets
//!   them; a test that cannot reach a required component fails, and one that may skip says
//!   so loudly ([`Component::skip_or_fail`]).
//! - [`docker`]: the test images, the "engine and image, or skip" preamble, and the static
//!   process supervisor the Docker driver mounts into its containers.
//! - [`sandbox`]: the built reference worker (`ENVRT_SANDBOX_WORKER`, or the one in this
//!   target directory) and the "worker, or skip" preamble.
//! - [`ssh`]: the settings of the test sshd of `scripts/start-sshd.sh`.
//! - [`fuzz`]: the stable replay of the fuzz corpora through each target's entry point.
//!
//! It depends on the standard library only, so that the tests of any crate, drivers
//! included, can use it without a dependency cycle; the set-ups that need a driver's types
//! stay in that driver's tests.

#![forbid(unsafe_code)]

pub mod docker;
pub mod fuzz;
pub mod https;
pub mod network;
pub mod sandbox;
pub mod ssh;

use std::fmt::Display;
use std::io::Write;

/// A component a test may need, with the variable that says it is required here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// A Docker engine and the test image (`ENVRT_REQUIRE_DOCKER`).
    Docker,
    /// bubblewrap and the reference sandbox worker (`ENVRT_REQUIRE_SANDBOX`).
    Sandbox,
    /// The test sshd of `scripts/start-sshd.sh` (`ENVRT_REQUIRE_SSH`).
    Ssh,
    /// Network namespaces for the egress tests (`ENVRT_REQUIRE_NETWORK`).
    Network,
}

impl Component {
    /// The variable that, set to `1`, makes the component required.
    pub const fn require_var(self) -> &'static str {
        match self {
            Component::Docker => "ENVRT_REQUIRE_DOCKER",
            Component::Sandbox => "ENVRT_REQUIRE_SANDBOX",
            Component::Ssh => "ENVRT_REQUIRE_SSH",
            Component::Network => "ENVRT_REQUIRE_NETWORK",
        }
    }

    /// Whether the component is required here: its variable is exactly `1`.
    pub fn required(self) -> bool {
        is_one(std::env::var(self.require_var()).ok().as_deref())
    }

    /// The component is missing: panics with `failure` when it is required, otherwise
    /// writes `skip` to the process's stderr, past the test harness's output capture, so
    /// that a skipped test is seen in a passing run.
    #[track_caller]
    pub fn skip_or_fail(self, failure: impl Display, skip: impl Display) {
        assert!(!self.required(), "{failure}");
        skip_loudly(skip);
    }
}

/// Whether any of `components` is required here.
pub fn any_required(components: &[Component]) -> bool {
    components.iter().any(|c| c.required())
}

/// Writes `message` on a line of its own to the process's stderr, past the test harness's
/// output capture.
pub fn skip_loudly(message: impl Display) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// Whether a require variable's value means "required".
fn is_one(value: Option<&str>) -> bool {
    value == Some("1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exactly_one_makes_a_component_required() {
        assert!(is_one(Some("1")));
        for value in [None, Some(""), Some("0"), Some("true"), Some(" 1"), Some("yes")] {
            assert!(!is_one(value), "{value:?}");
        }
    }

    #[test]
    fn each_component_has_the_variable_ci_sets() {
        let vars: Vec<&str> = [
            Component::Docker,
            Component::Sandbox,
            Component::Ssh,
            Component::Network,
        ]
        .map(Component::require_var)
        .into();
        assert_eq!(
            vars,
            [
                "ENVRT_REQUIRE_DOCKER",
                "ENVRT_REQUIRE_SANDBOX",
                "ENVRT_REQUIRE_SSH",
                "ENVRT_REQUIRE_NETWORK"
            ]
        );
        let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.ci/run")).unwrap();
        for var in vars {
            assert!(ci.contains(&format!("{var}=1")), ".ci/run does not set {var}=1");
        }
    }
}
