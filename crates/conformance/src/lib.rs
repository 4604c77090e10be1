//! # envrt-conformance
//!
//! The conformance kit: one suite of behaviour and property checks that any
//! [`EnvironmentDriver`] must pass, run through the [`EnvironmentRuntime`] facade. A check
//! is registered only where the driver's optional groups and capability snapshot allow
//! it; capability-honesty checks run for every driver and prove both directions (absent ⇒
//! the exact refusal and the driver is never called; present ⇒ no refusal). Trials are
//! named `driver_<key>::<check>`.
//!
//! Run it from a test target with `harness = false`:
//!
//! ```no_run
//! use std::sync::Arc;
//! use envrt_conformance::{Suite, Target};
//! use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};
//!
//! fn main() {
//!     let suite = Suite::build(|| async {
//!         Ok(Target::new(Arc::new(ProbeDriver::new("probe", ProbeShape::full(), None))))
//!     })
//!     .expect("the driver starts");
//!     suite.run_and_exit();
//! }
//! ```

#![forbid(unsafe_code)]

mod checks;
mod context;
mod procs;
mod recorder;
mod report;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use envrt_runtime_core::{CapabilitySnapshot, EnvironmentDriver, EnvironmentRuntime, JsonMap};

pub use context::{Ctx, Profile};
pub use procs::processes_with_marker;
pub use recorder::Recorder;
pub use report::{Report, TrialOutcome};

/// A future returning what is left behind (containers, directories, ...), one line each.
pub type LeftoversFuture = Pin<Box<dyn Future<Output = Result<Vec<String>, String>> + Send>>;

/// A driver-specific look for leftovers after the suite (empty = clean).
pub type LeftoversProbe = Arc<dyn Fn() -> LeftoversFuture + Send + Sync>;

/// The driver under test and how to test it.
#[derive(Clone)]
pub struct Target {
    /// The driver; wrapped in a [`Recorder`] by the suite.
    pub driver: Arc<dyn EnvironmentDriver>,
    /// `config` of the environment the suite creates.
    pub environment_config: JsonMap,
    /// Cases per property check (few for slow drivers).
    pub cases: u32,
    /// Whether execute carries arbitrary bytes (false: stdin and output are UTF-8 text,
    /// as with the plain plugin `environmentExecute` verb).
    pub binary_safe: bool,
    /// Driver-specific leftovers after the suite.
    pub leftovers: Option<LeftoversProbe>,
    /// When set, only checks whose name starts with one of these prefixes run.
    pub only: Option<Vec<&'static str>>,
}

impl Target {
    /// A target with an empty environment config, 16 cases, binary-safe execute.
    pub fn new(driver: Arc<dyn EnvironmentDriver>) -> Self {
        Target {
            driver,
            environment_config: JsonMap::new(),
            cases: 16,
            binary_safe: true,
            leftovers: None,
            only: None,
        }
    }

    /// Runs only the checks whose name starts with one of `prefixes`.
    pub fn only(mut self, prefixes: &[&'static str]) -> Self {
        self.only = Some(prefixes.to_vec());
        self
    }

    /// Sets the environment config.
    pub fn with_config(mut self, config: JsonMap) -> Self {
        self.environment_config = config;
        self
    }

    /// Sets the property-test case count.
    pub fn with_cases(mut self, cases: u32) -> Self {
        self.cases = cases;
        self
    }

    /// Declares execute as text-only.
    pub fn text_only(mut self) -> Self {
        self.binary_safe = false;
        self
    }

    /// Adds a leftovers probe.
    pub fn with_leftovers(mut self, probe: LeftoversProbe) -> Self {
        self.leftovers = Some(probe);
        self
    }
}

/// Runs several suites as one libtest run (main trials of all, then the clean-up trials
/// of all), printing each capability matrix line first and appending each report to
/// `ENVRT_CONFORMANCE_REPORT` when set. Returns whether everything passed.
pub fn run_suites(suites: Vec<Suite>) -> bool {
    let args = libtest_mimic::Arguments::from_args();
    for suite in &suites {
        println!("{}", report::matrix_line(&suite.ctx));
    }
    let main = libtest_mimic::run(&args, suites.iter().flat_map(Suite::trials).collect());
    let cleanup = libtest_mimic::run(&args, suites.iter().flat_map(Suite::cleanup_trials).collect());
    let passed = !main.has_failed() && !cleanup.has_failed();
    if let Ok(path) = std::env::var("ENVRT_CONFORMANCE_REPORT") {
        for suite in &suites {
            if let Err(e) = suite.report().append_to(&path) {
                eprintln!("cannot write the conformance report to {path}: {e}");
            }
        }
    }
    for suite in suites {
        drop(suite.ctx);
        if let Ok(tokio) = Arc::try_unwrap(suite.tokio) {
            tokio.shutdown_timeout(std::time::Duration::from_secs(5));
        }
    }
    passed
}

/// A prepared suite for one driver.
pub struct Suite {
    ctx: Arc<Ctx>,
    tokio: Arc<tokio::runtime::Runtime>,
    report: Arc<Mutex<Vec<TrialOutcome>>>,
}

impl Suite {
    /// Starts a tokio runtime, builds the target in it, registers the driver behind a
    /// [`Recorder`], and profiles it (optional groups, snapshots per policy).
    /// `ENVRT_CONFORMANCE_CASES` overrides the case count.
    pub fn build<F, Fut>(make: F) -> Result<Suite, String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Target, String>>,
    {
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start tokio: {e}"))?;
        let mut target = tokio.block_on(make())?;
        if let Some(cases) = std::env::var("ENVRT_CONFORMANCE_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            target.cases = cases;
        }
        let ctx = tokio.block_on(Ctx::prepare(target, tokio.handle().clone()))?;
        Ok(Suite {
            ctx: Arc::new(ctx),
            tokio: Arc::new(tokio),
            report: Arc::new(Mutex::new(Vec::new())),
        })
    }

    /// The driver key.
    pub fn key(&self) -> &str {
        &self.ctx.key
    }

    /// The prefix every marker of this run carries (processes, paths).
    pub fn marker_prefix(&self) -> &str {
        &self.ctx.marker_prefix
    }

    /// The profile the registration used.
    pub fn profile(&self) -> &Profile {
        &self.ctx.profile
    }

    /// The environment snapshot before any lease.
    pub fn capabilities(&self) -> CapabilitySnapshot {
        self.ctx.profile.environment
    }

    /// The facade the suite drives.
    pub fn runtime(&self) -> &Arc<EnvironmentRuntime> {
        &self.ctx.runtime
    }

    /// The registered trials, except the after-suite clean-up checks.
    pub fn trials(&self) -> Vec<libtest_mimic::Trial> {
        self.make_trials(checks::Phase::Main)
    }

    /// The after-suite clean-up checks (nothing of the suite left behind).
    pub fn cleanup_trials(&self) -> Vec<libtest_mimic::Trial> {
        self.make_trials(checks::Phase::AfterSuite)
    }

    /// The names of the registered checks (without the `driver_<key>::` prefix).
    pub fn check_names(&self) -> Vec<&'static str> {
        self.registered().into_iter().map(|c| c.name).collect()
    }

    /// Runs one registered check directly (no libtest) and returns its outcome; `None` when
    /// no check of that name is registered for the driver.
    pub fn run_check(&self, name: &str) -> Option<Result<(), String>> {
        let check = self.registered().into_iter().find(|c| c.name == name)?;
        Some((check.run)(&self.ctx))
    }

    fn registered(&self) -> Vec<checks::Check> {
        checks::all()
            .into_iter()
            .filter(|c| (c.needs)(&self.ctx.profile))
            .filter(|c| {
                self.ctx
                    .only
                    .as_ref()
                    .is_none_or(|prefixes| prefixes.iter().any(|p| c.name.starts_with(p)))
            })
            .collect()
    }

    fn make_trials(&self, phase: checks::Phase) -> Vec<libtest_mimic::Trial> {
        self.registered()
            .into_iter()
            .filter(|c| c.phase == phase)
            .map(|check| {
                let ctx = self.ctx.clone();
                let report = self.report.clone();
                let name = format!("driver_{}::{}", ctx.key, check.name);
                let trial_name = name.clone();
                libtest_mimic::Trial::test(name, move || {
                    let outcome = (check.run)(&ctx);
                    report.lock().unwrap().push(TrialOutcome {
                        name: trial_name,
                        passed: outcome.is_ok(),
                        message: outcome.as_ref().err().cloned(),
                    });
                    outcome.map_err(Into::into)
                })
            })
            .collect()
    }

    /// Runs the main trials, then the clean-up trials, with libtest arguments from the
    /// command line; prints the capability matrix first; writes a JSON report to
    /// `ENVRT_CONFORMANCE_REPORT` when set. Returns whether everything passed.
    pub fn run(self) -> bool {
        run_suites(vec![self])
    }

    fn report(&self) -> Report {
        let trials = self.report.lock().unwrap().clone();
        Report {
            driver: self.ctx.key.clone(),
            capabilities: self.ctx.profile.environment,
            lease_capabilities: self.ctx.profile.ephemeral,
            passed: trials.iter().all(|t| t.passed),
            trials,
        }
    }

    /// [`run`](Self::run), then exits with 0 when everything passed and 101 otherwise.
    pub fn run_and_exit(self) -> ! {
        let ok = self.run();
        std::process::exit(if ok { 0 } else { 101 })
    }
}
