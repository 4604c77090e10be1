//! The checks, grouped by area. Each is a plain function over a [`Ctx`]; its `needs`
//! decides whether it is registered for the driver. Every registration carries its
//! promise ([`Check::promise`]): the one line, in the contract's words, of what the check
//! proves; the report prints it beside the trial (a unit test refuses a check without one).

use crate::context::{Ctx, Profile};

mod cleanup;
mod descriptors;
mod duplex;
mod egress;
mod egress_bypass;
mod egress_client;
mod egress_live;
mod escape;
mod execute;
mod expiry;
mod honesty;
mod idle;
mod ingress;
mod inputs;
mod lease_life;
mod lifecycle;
mod lifecycle_driver;
mod network;
mod observe;
mod pause;
mod pool;
mod printed;
mod processes;
mod processes_refusals;
mod streaming;
mod sync;
mod templates;
mod tree;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Main,
    AfterSuite,
}

/// What a check that can also fail to look found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// It looked and the promise holds.
    Yes,
    /// It could not look; the text says why.
    NotChecked(String),
}

/// A check's body: most only pass or fail; some can also report that they could not look.
#[derive(Clone, Copy)]
pub(crate) enum Body {
    Plain(fn(&Ctx) -> Result<(), String>),
    Maybe(fn(&Ctx) -> Result<Checked, String>),
}

#[derive(Clone, Copy)]
pub(crate) struct Check {
    pub(crate) name: &'static str,
    /// The promise the check proves, one line (empty only until [`Check::promise`] sets it).
    pub(crate) promise: &'static str,
    pub(crate) phase: Phase,
    pub(crate) needs: fn(&Profile) -> bool,
    pub(crate) body: Body,
}

impl Check {
    pub(crate) const fn new(
        name: &'static str,
        needs: fn(&Profile) -> bool,
        run: fn(&Ctx) -> Result<(), String>,
    ) -> Self {
        Check {
            name,
            promise: "",
            phase: Phase::Main,
            needs,
            body: Body::Plain(run),
        }
    }

    /// A check that may report "not checked".
    pub(crate) const fn maybe(
        name: &'static str,
        needs: fn(&Profile) -> bool,
        run: fn(&Ctx) -> Result<Checked, String>,
    ) -> Self {
        Check {
            name,
            promise: "",
            phase: Phase::Main,
            needs,
            body: Body::Maybe(run),
        }
    }

    /// Runs the body on the calling thread.
    pub(crate) fn call(&self, ctx: &Ctx) -> Result<Checked, String> {
        match self.body {
            Body::Plain(run) => run(ctx).map(|()| Checked::Yes),
            Body::Maybe(run) => run(ctx),
        }
    }

    /// Sets the promise the check proves: one line, what the report prints beside it.
    pub(crate) const fn promise(self, promise: &'static str) -> Self {
        Check { promise, ..self }
    }

    pub(crate) const fn after_suite(self) -> Self {
        Check {
            phase: Phase::AfterSuite,
            ..self
        }
    }
}

pub(crate) fn always(_: &Profile) -> bool {
    true
}

pub(crate) fn all() -> Vec<Check> {
    [
        honesty::CHECKS,
        lifecycle::CHECKS,
        lifecycle_driver::CHECKS,
        execute::CHECKS,
        streaming::CHECKS,
        printed::CHECKS,
        escape::CHECKS,
        descriptors::CHECKS,
        inputs::CHECKS,
        sync::CHECKS,
        duplex::CHECKS,
        ingress::CHECKS,
        observe::CHECKS,
        expiry::CHECKS,
        pause::CHECKS,
        idle::CHECKS,
        templates::CHECKS,
        lease_life::CHECKS,
        pool::CHECKS,
        processes::CHECKS,
        processes_refusals::CHECKS,
        cleanup::CHECKS,
        network::CHECKS,
        egress::CHECKS,
        egress_bypass::CHECKS,
        egress_live::CHECKS,
    ]
    .concat()
}

pub(crate) fn has_execute(p: &Profile) -> bool {
    p.has_execute
}

pub(crate) fn has_sync_both(p: &Profile) -> bool {
    p.has_sync && p.ephemeral.native_sync_in && p.ephemeral.native_sync_out
}

pub(crate) fn has_sync_and_execute(p: &Profile) -> bool {
    has_sync_both(p) && p.has_execute
}

pub(crate) fn has_duplex_granted(p: &Profile) -> bool {
    p.has_duplex && p.ephemeral.duplex_command_stream
}

pub(crate) fn has_reuse(p: &Profile) -> bool {
    p.has_resume && p.reusable.reusable_leases
}

pub(crate) fn has_destroy(p: &Profile) -> bool {
    p.has_destroy
}

/// Runs a proptest strategy over `ctx.cases` cases; the body returns a failure text.
pub(crate) fn property<S: proptest::strategy::Strategy>(
    ctx: &Ctx,
    strategy: S,
    body: impl Fn(S::Value) -> Result<(), String>,
) -> Result<(), String>
where
    S::Value: std::fmt::Debug,
{
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    let config = Config {
        cases: ctx.cases,
        failure_persistence: None,
        max_shrink_iters: 32,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    runner
        .run(&strategy, |value| body(value).map_err(TestCaseError::fail))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    #[test]
    fn every_registered_check_states_its_promise_in_one_line() {
        let checks = super::all();
        assert!(!checks.is_empty());
        let mut names = BTreeSet::new();
        for check in &checks {
            assert!(names.insert(check.name), "check {} is registered twice", check.name);
            let promise = check.promise;
            assert!(!promise.trim().is_empty(), "check {} has no promise", check.name);
            assert!(!promise.contains('\n'), "the promise of {} is not one line", check.name);
            assert!(
                promise.ends_with('.'),
                "the promise of {} is not a sentence: {promise}",
                check.name
            );
        }
    }
}
