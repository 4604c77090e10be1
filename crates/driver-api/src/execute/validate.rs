//! The one check of an execute request before anything runs: a program is named, no NUL
//! byte in the program, its arguments or a variable's value, and every variable's name
//! follows the driver's [`NameRules`]. Messages name variables, never their values.
//!
//! The checks and their order are the same for every driver: the command is empty; the
//! command or an argument holds a NUL byte; then, variable by variable in name order, the
//! name, the value, and (under [`NameRules::ShellSecrets`]) a secret's name. Two things
//! differ between drivers, for reasons of their backends, and are parameters:
//!
//! - which names are accepted ([`NameRules`]): a driver that hands the variables to
//!   `execve` itself takes any name `execve` takes; one that sets them through a shell
//!   takes only shell identifiers for those it sets that way;
//! - the wording of the refusals ([`Wording`]): each driver's texts are pinned by its
//!   tests and shown to users, so they stay exactly as they were when the four copies of
//!   this check became one.

use super::ExecuteRequest;
use crate::error::DriverError;
use crate::secret::EnvValue;

/// Which environment variable names a driver accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NameRules {
    /// Any name `execve` takes: not empty, no `=`, no NUL byte. For a driver that starts
    /// the process itself with the variables as given (the local driver, the sandbox
    /// worker).
    #[default]
    Portable,
    /// Every name a shell identifier (`[A-Za-z_][A-Za-z0-9_]*`). For a driver that sets
    /// every variable through a shell (`export NAME=...` read by a remote `/bin/sh`: the
    /// ssh driver).
    Shell,
    /// Portable names, and a shell identifier for each secret one. For a driver that
    /// passes plain variables through its backend's API but sets secrets through a
    /// wrapper shell line so that their values never reach the API (the docker driver).
    ShellSecrets,
}

/// The wording of the refusals, so that every driver keeps its exact texts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Wording {
    /// Lower case, no full stop: `the command is empty`,
    /// `environment variable name "A=B" is not valid` (the local and ssh drivers).
    #[default]
    Plain,
    /// Sentences: `The command is empty.`,
    /// `Environment variable name "A=B" is not valid.` (the docker driver).
    Sentence,
    /// The plugin worker protocol's texts, which its host maps back to typed errors:
    /// `command must not be empty`,
    /// `the command and its arguments must not contain NUL bytes` (the sandbox worker).
    Worker,
}

/// The rules an execute request is checked against: [`NameRules`] and [`Wording`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExecuteRules {
    /// Which variable names are accepted.
    pub names: NameRules,
    /// How refusals are worded.
    pub wording: Wording,
}

impl ExecuteRules {
    /// Rules of `names`, worded as `wording`.
    pub const fn new(names: NameRules, wording: Wording) -> Self {
        ExecuteRules { names, wording }
    }
}

impl From<NameRules> for ExecuteRules {
    /// `names`, in the [`Wording::Plain`] wording.
    fn from(names: NameRules) -> Self {
        ExecuteRules::new(names, Wording::Plain)
    }
}

/// Whether `name` is a shell identifier: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_shell_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Whether `name` is a name `execve` takes: not empty, no `=`, no NUL byte.
pub fn is_portable_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('=') && !name.contains('\0')
}

impl ExecuteRequest {
    /// Checks the request's command, arguments and variables under `rules`, before
    /// anything is sent or started. Every refusal is
    /// [`DriverError::InvalidInput`] and names the
    /// variable, never its value. A [`NameRules`] alone means the [`Wording::Plain`] texts.
    pub fn validate(&self, rules: impl Into<ExecuteRules>) -> Result<(), DriverError> {
        let ExecuteRules { names, wording } = rules.into();
        let text = |plain: &str, sentence: &str, worker: &str| {
            DriverError::invalid(match wording {
                Wording::Plain => plain,
                Wording::Sentence => sentence,
                Wording::Worker => worker,
            })
        };
        if self.command.is_empty() {
            return Err(text(
                "the command is empty",
                "The command is empty.",
                "command must not be empty",
            ));
        }
        if self.command.contains('\0') || self.args.iter().any(|a| a.contains('\0')) {
            return Err(text(
                "the command or an argument contains a NUL byte",
                "The command or an argument contains a NUL byte.",
                "the command and its arguments must not contain NUL bytes",
            ));
        }
        for (name, value) in &self.env {
            let name_ok = match names {
                NameRules::Portable | NameRules::ShellSecrets => is_portable_name(name),
                NameRules::Shell => is_shell_name(name),
            };
            if !name_ok {
                return Err(DriverError::invalid(match wording {
                    Wording::Sentence => format!(
                        "Environment variable name \"{}\" is not valid.",
                        name.replace('\0', "\\0")
                    ),
                    Wording::Plain | Wording::Worker => format!("environment variable name {name:?} is not valid"),
                }));
            }
            if value.expose().contains('\0') {
                return Err(DriverError::invalid(match wording {
                    Wording::Sentence => format!("The value of environment variable \"{name}\" contains a NUL byte."),
                    Wording::Plain | Wording::Worker => format!("environment variable {name} contains a NUL byte"),
                }));
            }
            if names == NameRules::ShellSecrets && matches!(value, EnvValue::Secret(_)) && !is_shell_name(name) {
                return Err(DriverError::invalid(match wording {
                    Wording::Sentence => format!(
                        "Secret environment variable \"{name}\" must be named with letters, digits and underscores."
                    ),
                    Wording::Plain | Wording::Worker => {
                        format!(
                            "secret environment variable {name:?} must be named with letters, digits and underscores"
                        )
                    }
                }));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
