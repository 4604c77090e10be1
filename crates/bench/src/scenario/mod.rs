//! The scenarios, each run over the driver targets that support it (`crate::targets`):
//! one module per thing measured — execute latency, output capture, duplex, sync,
//! concurrent executes, lease growth, open routes, pools, the peers, persistent process
//! sessions, and executes through the in-lease supervisor — and
//! [`SCENARIOS`], the one list `envrt-bench` runs in order and `--list` prints.

pub(crate) mod agent;
pub(crate) mod concurrent;
pub(crate) mod duplex;
pub(crate) mod egress;
pub(crate) mod exec;
pub(crate) mod fork;
pub(crate) mod growth;
pub(crate) mod open_leases;
pub(crate) mod peers;
pub(crate) mod pool;
pub(crate) mod processes;
pub(crate) mod routes;
pub(crate) mod service;
pub(crate) mod stdout;
pub(crate) mod supervised;
pub(crate) mod sync;
pub(crate) mod wrk;

use std::future::Future;
use std::pin::Pin;

use crate::Config;
use crate::report::Row;

/// The rows a scenario measured.
pub(crate) type Rows<'a> = Pin<Box<dyn Future<Output = Vec<Row>> + 'a>>;

/// One scenario on some targets: a section of the run.
pub(crate) struct Scenario {
    /// The section's name in the progress lines.
    pub(crate) section: &'static str,
    /// The row number (`--only N`).
    pub(crate) number: u8,
    /// The group keys (`--only KEY`) that select it: any one does.
    pub(crate) groups: &'static [&'static str],
    /// The driver keys of the targets it runs on (`crate::targets::KEYS`).
    pub(crate) targets: &'static [&'static str],
    /// Measures it.
    pub(crate) run: for<'a> fn(&'a Config) -> Rows<'a>,
}

impl Scenario {
    /// Whether `config` selects it.
    pub(crate) fn selected(&self, config: &Config) -> bool {
        self.groups.iter().any(|g| config.wants(g, self.number))
    }

    /// Its line of `--list`.
    pub(crate) fn line(&self) -> String {
        format!(
            "{:>2}  {:<40} on {}",
            self.number,
            self.groups.join(", "),
            self.targets.join(", ")
        )
    }
}

/// Every scenario, in the order of the run (the order of the table they make).
pub(crate) const SCENARIOS: &[Scenario] = &[
    Scenario {
        section: "exec-local",
        number: 1,
        groups: &["exec-local"],
        targets: &["local"],
        run: |c| Box::pin(exec::local(c)),
    },
    Scenario {
        section: "exec-docker",
        number: 2,
        groups: &["exec-docker"],
        targets: &["docker"],
        run: |c| Box::pin(exec::docker(c)),
    },
    Scenario {
        section: "exec-sandbox",
        number: 3,
        groups: &["exec-sandbox"],
        targets: &["sandbox"],
        run: |c| Box::pin(exec::sandbox(c)),
    },
    Scenario {
        section: "exec-ssh",
        number: 2,
        groups: &["exec-ssh"],
        targets: &["ssh"],
        run: |c| Box::pin(exec::ssh(c)),
    },
    Scenario {
        section: "stdout",
        number: 4,
        groups: &["stdout"],
        targets: &["local"],
        run: |c| Box::pin(stdout::local(c)),
    },
    Scenario {
        section: "duplex",
        number: 5,
        groups: &["duplex"],
        targets: &["docker", "sandbox"],
        run: |c| Box::pin(duplex::rows(c)),
    },
    Scenario {
        section: "sync-local",
        number: 6,
        groups: &["sync-local"],
        targets: &["local"],
        run: |c| Box::pin(sync::local(c)),
    },
    Scenario {
        section: "sync-docker",
        number: 6,
        groups: &["sync-docker"],
        targets: &["docker"],
        run: |c| Box::pin(sync::docker(c)),
    },
    Scenario {
        section: "sync-ssh",
        number: 6,
        groups: &["sync-ssh"],
        targets: &["ssh"],
        run: |c| Box::pin(sync::ssh(c)),
    },
    Scenario {
        section: "scale-exec",
        number: 7,
        groups: &["scale-exec"],
        targets: &["local"],
        run: |c| Box::pin(concurrent::local(c)),
    },
    Scenario {
        section: "scale-leases",
        number: 7,
        groups: &["scale-leases"],
        targets: &["local"],
        run: |c| Box::pin(growth::local_memory(c)),
    },
    Scenario {
        section: "scale-open",
        number: 7,
        groups: &["scale-open"],
        targets: &["local"],
        run: |c| Box::pin(open_leases::open_lease_rows(c)),
    },
    Scenario {
        section: "scale-leases/open (docker, sandbox)",
        number: 7,
        groups: &["scale-leases", "scale-open"],
        targets: &["docker", "sandbox"],
        run: |c| Box::pin(growth::rows(c, c.wants("scale-leases", 7), c.wants("scale-open", 7))),
    },
    Scenario {
        section: "scale-exec (docker, sandbox)",
        number: 7,
        groups: &["scale-exec-docker", "scale-exec-sandbox"],
        targets: &["docker", "sandbox"],
        run: |c| Box::pin(concurrent::rows(c)),
    },
    Scenario {
        section: "scale-duplex",
        number: 7,
        groups: &["scale-duplex"],
        targets: &["sandbox"],
        run: |c| Box::pin(routes::sandbox(c)),
    },
    Scenario {
        section: "pool-local",
        number: pool::NUMBER,
        groups: &["pool-local"],
        targets: &["local"],
        run: |c| Box::pin(pool::local_rows(c)),
    },
    Scenario {
        section: "pool-docker",
        number: pool::NUMBER,
        groups: &["pool-docker"],
        targets: &["docker"],
        run: |c| Box::pin(pool::docker_rows(c)),
    },
    Scenario {
        section: "pool-sandbox",
        number: pool::NUMBER,
        groups: &["pool-sandbox"],
        targets: &["sandbox"],
        run: |c| Box::pin(pool::sandbox_rows(c)),
    },
    Scenario {
        section: peers::GROUP,
        number: peers::NUMBER,
        groups: &[peers::GROUP],
        targets: &["local", "sandbox"],
        run: |c| Box::pin(peers::rows(c)),
    },
    Scenario {
        section: processes::SPAWN,
        number: processes::NUMBER,
        groups: &[processes::SPAWN],
        targets: &["local", "docker", "sandbox", "ssh"],
        run: |c| Box::pin(processes::spawn_rows(c)),
    },
    Scenario {
        section: processes::REPLAY,
        number: processes::NUMBER,
        groups: &[processes::REPLAY],
        targets: &["local", "docker"],
        run: |c| Box::pin(processes::replay_rows(c)),
    },
    Scenario {
        section: processes::MEMORY,
        number: processes::NUMBER,
        groups: &[processes::MEMORY],
        targets: &["local"],
        run: |c| Box::pin(processes::memory_rows(c)),
    },
    Scenario {
        section: fork::LOCAL,
        number: fork::NUMBER,
        groups: &[fork::LOCAL],
        targets: &["local"],
        run: |c| Box::pin(fork::local(c)),
    },
    Scenario {
        section: fork::DOCKER,
        number: fork::NUMBER,
        groups: &[fork::DOCKER],
        targets: &["docker"],
        run: |c| Box::pin(fork::docker(c)),
    },
    Scenario {
        section: supervised::DOCKER,
        number: supervised::NUMBER,
        groups: &[supervised::DOCKER],
        targets: &["docker"],
        run: |c| Box::pin(supervised::docker_rows(c)),
    },
    Scenario {
        section: egress::GROUP,
        number: egress::NUMBER,
        groups: &[egress::GROUP],
        targets: &["docker"],
        run: |c| Box::pin(egress::rows(c)),
    },
    Scenario {
        section: agent::LOOP,
        number: agent::NUMBER,
        groups: &[agent::LOOP],
        targets: &["local", "docker", "sandbox", "ssh"],
        run: |c| Box::pin(agent::loops(c)),
    },
    Scenario {
        section: agent::MANY,
        number: agent::NUMBER,
        groups: &[agent::MANY],
        targets: &["local"],
        run: |c| Box::pin(agent::many(c)),
    },
    Scenario {
        section: "service",
        number: service::NUMBER,
        groups: &["service"],
        targets: &["local"],
        run: |c| Box::pin(service::rows(c)),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_runs_on_known_targets_and_its_groups_are_documented() {
        let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/benchmarks.md")).unwrap();
        for scenario in SCENARIOS {
            assert!(!scenario.targets.is_empty(), "{}", scenario.section);
            for target in scenario.targets {
                assert!(crate::targets::KEYS.contains(target), "{}: {target}", scenario.section);
            }
            for group in scenario.groups {
                assert!(
                    docs.contains(&format!("`{group}`")),
                    "docs/benchmarks.md does not name the group `{group}`"
                );
            }
        }
    }

    #[test]
    fn only_selects_the_scenarios_of_a_group_a_number_or_a_prefix() {
        let selected = |only: &[&str]| -> Vec<&str> {
            let config = Config {
                only: only.iter().map(|s| s.to_string()).collect(),
                ..Config::default()
            };
            SCENARIOS
                .iter()
                .filter(|s| s.selected(&config))
                .map(|s| s.section)
                .collect()
        };
        assert_eq!(selected(&[]).len(), SCENARIOS.len());
        assert_eq!(
            selected(&["exec"]),
            [
                "exec-local",
                "exec-docker",
                "exec-sandbox",
                "exec-ssh",
                "exec-supervisor-docker"
            ]
        );
        assert_eq!(selected(&["11"]), ["fork-local", "fork-docker"]);
        assert_eq!(selected(&["12"]), ["exec-supervisor-docker"]);
        assert_eq!(selected(&["6"]), ["sync-local", "sync-docker", "sync-ssh"]);
        assert_eq!(
            selected(&["scale-exec"]),
            ["scale-exec", "scale-exec (docker, sandbox)"]
        );
        assert_eq!(
            selected(&["scale-open"]),
            ["scale-open", "scale-leases/open (docker, sandbox)"]
        );
        assert_eq!(selected(&["scale-exec-sandbox"]), ["scale-exec (docker, sandbox)"]);
        assert_eq!(selected(&["peers"]), ["peers"]);
        let sessions = ["processes-spawn", "processes-replay", "processes-memory"];
        assert_eq!(selected(&["processes"]), sessions);
        assert_eq!(selected(&["10"]), sessions);
        assert_eq!(selected(&["processes-replay"]), ["processes-replay"]);
    }

    #[test]
    fn the_list_names_each_scenario_its_groups_and_targets() {
        let lines: Vec<String> = SCENARIOS.iter().map(Scenario::line).collect();
        assert_eq!(lines.len(), SCENARIOS.len());
        assert_eq!(lines[0], " 1  exec-local                               on local");
        assert!(lines.contains(&" 5  duplex                                   on docker, sandbox".to_owned()));
    }
}
