//! # envrt-conformance
//!
//! The conformance kit: one suite of behaviour and property checks that any
//! [`EnvironmentDriver`] must pass, run through the [`EnvironmentRuntime`] facade. A check
//! is registered only where the driver's optional groups and capability snapshot allow
//! it; capability-honesty checks run for every driver and prove both directions (absent ⇒
//! the exact refusal and the driver is never called; present ⇒ no refusal). Trials are
//! named `driver_<key>::<check>`.
//!
//! Every check runs on its own thread under a deadline ([`Target::with_deadline`],
//! `ENVRT_CONFORMANCE_DEADLINE`): a hang or a panic is a failure naming the check and the
//! suite goes on. A check that cannot look (no probe, `/proc` unreadable) reports
//! [`Status::NotChecked`] instead of passing. A run writes one JSON document
//! ([`RunReport`]) to `ENVRT_CONFORMANCE_REPORT`.
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

mod capture;
mod checks;
mod context;
mod host_output;
mod procs;
mod recorder;
mod report;
mod runner;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envrt_runtime_core::{CapabilitySnapshot, EnvironmentDriver, EnvironmentRuntime, JsonMap, Lease};

pub use context::{Ctx, Profile};
pub use procs::{processes_with_marker, processes_with_marker_in};
pub use recorder::Recorder;
pub use report::{NotStarted, Report, RunReport, Status, TrialOutcome, report_not_started};

/// A future returning what is left behind (containers, directories, ...), one line each.
pub type LeftoversFuture = Pin<Box<dyn Future<Output = Result<Vec<String>, String>> + Send>>;

/// A driver-specific look for leftovers after the suite (empty = clean).
pub type LeftoversProbe = Arc<dyn Fn() -> LeftoversFuture + Send + Sync>;

/// A future answering whether a lease's backend resource (workspace directory, container,
/// sandbox directory, ...) still exists.
pub type ResourceFuture = Pin<Box<dyn Future<Output = Result<bool, String>> + Send>>;

/// A driver-specific look at the backend: does the resource of this lease still exist?
/// Used to check that an ephemeral release really frees it, before any destroy.
pub type ResourceProbe = Arc<dyn Fn(&Lease) -> ResourceFuture + Send + Sync>;

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
    /// Driver-specific look at one lease's backend resource.
    pub resource: Option<ResourceProbe>,
    /// How long one check may take before it is reported as failed and abandoned
    /// (`ENVRT_CONFORMANCE_DEADLINE` overrides it; 300 s when neither is set).
    pub deadline: Option<Duration>,
    /// Where the process checks look for processes (`/proc`).
    pub proc_root: std::path::PathBuf,
    /// Whether duplex channels can close the command's input (half-close). Without it
    /// the round trip reads back exactly what was written and closes the channel.
    pub half_close: bool,
    /// Whether the driver's declaration withholds `duplexCommandStream` although it has a
    /// duplex group (a plugin manifest without the opt-in); then the capability refusal is
    /// the expected answer, otherwise a group that never grants is reported.
    pub duplex_withheld: bool,
    /// When set, only checks whose name starts with one of these prefixes run.
    pub only: Option<Vec<&'static str>>,
    /// Documented deviations: checks that are registered but reported as ignored, each
    /// with the reason printed before the run and written to the report.
    pub deviations: Vec<(&'static str, String)>,
    /// The test host the egress checks reach, or why the suite has none (then those checks
    /// report "not checked").
    pub egress_host: Result<EgressHost, String>,
}

/// A test host on this machine for the egress checks (see
/// `envrt_test_support::network::TestHost`): its DNS server answers `web.test` and
/// `other.test` with the host's own address and `rebind.test` with a private one, its HTTP
/// server serves `body` at `/` on ports 80 and 8080 and a `302` to `http://other.test/` at
/// `/cgi-bin/redirect`, and the driver's egress proxy resolves names through that DNS
/// server. With [`https_seen`](EgressHost::https_seen), it also serves HTTPS on port 443
/// (a leaf for `web.test` and `other.test`; `/redirect` answers a `302` to
/// `https://other.test/`), and a driver that brokers credentials must trust its CA.
#[derive(Clone)]
pub struct EgressHost {
    /// The host's address.
    pub address: String,
    /// What its HTTP server serves at `/`.
    pub body: String,
    /// Every name its DNS server was asked so far.
    pub asked: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
    /// Every request its HTTPS server received so far, one JSON object each (`host`,
    /// `path`, `authorization`); `None` when it has no HTTPS server (the checks that need
    /// one report "not checked").
    pub https_seen: Option<Arc<dyn Fn() -> Vec<String> + Send + Sync>>,
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
            resource: None,
            deadline: None,
            proc_root: "/proc".into(),
            half_close: true,
            duplex_withheld: false,
            only: None,
            deviations: Vec::new(),
            egress_host: Err("the suite was given no test host".into()),
        }
    }

    /// Gives the egress checks a test host (the driver's egress proxy must resolve names
    /// through its DNS server), or says why there is none.
    pub fn with_egress_host(mut self, host: Result<EgressHost, String>) -> Self {
        self.egress_host = host;
        self
    }

    /// Declares a known deviation: `check` is reported as ignored, with `reason`.
    pub fn with_deviation(mut self, check: &'static str, reason: impl Into<String>) -> Self {
        self.deviations.push((check, reason.into()));
        self
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

    /// Declares that the driver's declaration withholds `duplexCommandStream`.
    pub fn duplex_withheld_by_declaration(mut self) -> Self {
        self.duplex_withheld = true;
        self
    }

    /// Declares that duplex channels cannot half-close.
    pub fn without_half_close(mut self) -> Self {
        self.half_close = false;
        self
    }

    /// Adds a leftovers probe.
    pub fn with_leftovers(mut self, probe: LeftoversProbe) -> Self {
        self.leftovers = Some(probe);
        self
    }

    /// Adds a resource probe (does a lease's backend resource still exist?).
    pub fn with_resource_probe(mut self, probe: ResourceProbe) -> Self {
        self.resource = Some(probe);
        self
    }

    /// Looks for processes under `proc_root` instead of `/proc` (a test of the kit points
    /// it at an unreadable place to see "not checked").
    pub fn with_proc_root(mut self, proc_root: impl Into<std::path::PathBuf>) -> Self {
        self.proc_root = proc_root.into();
        self
    }

    /// Sets the per-check deadline.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }
}

/// Runs several suites as one libtest run (main trials of all, then the clean-up trials
/// of all), printing each capability matrix line first; writes ONE JSON document
/// ([`RunReport`]) to `ENVRT_CONFORMANCE_REPORT` when set. Returns whether everything
/// passed.
pub fn run_suites(suites: Vec<Suite>) -> bool {
    run_suites_with(suites, Vec::new())
}

/// [`run_suites`], also reporting suites that could not start (each printed with its
/// reason and written to the report; one that is not `skipped` fails the run).
pub fn run_suites_with(suites: Vec<Suite>, not_started: Vec<NotStarted>) -> bool {
    let args = libtest_mimic::Arguments::from_args();
    for suite in &suites {
        println!("{}", report::matrix_line(&suite.ctx));
        for (check, reason) in &suite.ctx.deviations {
            println!("envrt-deviation driver_{}::{check}: {reason}", suite.ctx.key);
        }
    }
    for n in &not_started {
        report::print_not_started(&n.suite, &n.reason, n.skipped);
    }
    let main = libtest_mimic::run(&args, suites.iter().flat_map(Suite::trials).collect());
    let cleanup = libtest_mimic::run(&args, suites.iter().flat_map(Suite::cleanup_trials).collect());
    let reports: Vec<Report> = suites.iter().map(Suite::report).collect();
    for trial in reports.iter().flat_map(|r| &r.trials) {
        if trial.status == Status::NotChecked {
            println!(
                "envrt-not-checked {}: {}",
                trial.name,
                trial.message.as_deref().unwrap_or("")
            );
        }
    }
    for trial in reports.iter().flat_map(|r| &r.trials) {
        if matches!(trial.status, Status::Failed | Status::NotChecked) {
            println!("{}", report::promise_line(trial));
        }
    }
    let run = RunReport::new(reports, not_started);
    report::write_env_report(&run);
    let passed = !main.has_failed() && !cleanup.has_failed() && run.passed;
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
        if let Some(deadline) = runner::deadline_from_env()? {
            target.deadline = Some(deadline);
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

    /// The registered checks with the promise each proves: `(name, promise)`.
    pub fn check_promises(&self) -> Vec<(&'static str, &'static str)> {
        self.registered().into_iter().map(|c| (c.name, c.promise)).collect()
    }

    /// Runs one registered check directly (no libtest), guarded by the deadline like every
    /// trial, and returns its outcome: `Ok(())` for passed (and for not checked), the
    /// failure text otherwise; `None` when no check of that name is registered.
    pub fn run_check(&self, name: &str) -> Option<Result<(), String>> {
        let outcome = self.run_check_outcome(name)?;
        Some(match outcome.status {
            Status::Failed => Err(outcome.message.unwrap_or_default()),
            _ => Ok(()),
        })
    }

    /// Runs one registered check directly and returns its full outcome (status, message).
    pub fn run_check_outcome(&self, name: &str) -> Option<TrialOutcome> {
        let check = self.registered().into_iter().find(|c| c.name == name)?;
        let outcome = runner::run_guarded(&self.ctx, check, self.trial_name(check.name));
        self.report.lock().unwrap().push(outcome.clone());
        Some(outcome)
    }

    /// Runs every registered check (main, then clean-up) directly, without libtest, each
    /// guarded by the deadline, and returns the report.
    pub fn run_all(&self) -> Report {
        let checks = self.registered();
        for phase in [checks::Phase::Main, checks::Phase::AfterSuite] {
            for check in checks.iter().filter(|c| c.phase == phase) {
                let outcome = if self.deviation(check.name).is_some() {
                    self.ignored(check)
                } else {
                    runner::run_guarded(&self.ctx, *check, self.trial_name(check.name))
                };
                self.report.lock().unwrap().push(outcome);
            }
        }
        self.report()
    }

    fn trial_name(&self, check: &str) -> String {
        format!("driver_{}::{check}", self.ctx.key)
    }

    fn deviation(&self, check: &str) -> Option<&String> {
        self.ctx.deviations.iter().find(|(c, _)| *c == check).map(|(_, r)| r)
    }

    fn ignored(&self, check: &checks::Check) -> TrialOutcome {
        TrialOutcome::new(
            self.trial_name(check.name),
            Status::Ignored,
            self.deviation(check.name).cloned(),
            0,
        )
        .with_promise(check.promise)
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
                let name = self.trial_name(check.name);
                if self.deviation(check.name).is_some() {
                    // Not run, but in the report as ignored with its reason.
                    report.lock().unwrap().push(self.ignored(&check));
                    return libtest_mimic::Trial::test(name, || Ok(())).with_ignored_flag(true);
                }
                let trial_name = name.clone();
                libtest_mimic::Trial::test(name, move || {
                    let outcome = runner::run_guarded(&ctx, check, trial_name);
                    let result = match outcome.status {
                        Status::Failed => Err(outcome.message.clone().unwrap_or_default().into()),
                        _ => Ok(()),
                    };
                    report.lock().unwrap().push(outcome);
                    result
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

    /// The report of what ran so far (trials sorted by name).
    pub fn report(&self) -> Report {
        let mut trials = self.report.lock().unwrap().clone();
        trials.sort_by(|a, b| a.name.cmp(&b.name));
        Report {
            driver: self.ctx.key.clone(),
            capabilities: self.ctx.profile.environment,
            lease_capabilities: self.ctx.profile.ephemeral,
            deviations: self
                .ctx
                .deviations
                .iter()
                .map(|(c, r)| (format!("driver_{}::{c}", self.ctx.key), r.clone()))
                .collect(),
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
