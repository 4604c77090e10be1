//! Running commands from the workspace root.

use std::path::PathBuf;
use std::process::Command;

/// The workspace root (the parent of this crate's directory).
pub(crate) fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// Cargo's target directory: `CARGO_TARGET_DIR` (relative to the root) or `target`.
pub(crate) fn target_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    if target.is_absolute() {
        target
    } else {
        root().join(target)
    }
}

pub(crate) fn cargo() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(root());
    command
}

/// The workspace's own packages as `cargo metadata --no-deps --format-version 1` prints
/// them (its stderr passes through).
pub(crate) fn cargo_metadata() -> Result<serde_json::Value, String> {
    let output = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo metadata failed ({})", output.status));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("cargo metadata printed no JSON: {e}"))
}

/// How a command is echoed: its directory, the variables it sets and its words, quoted as
/// `Debug` quotes them, except the value of a variable whose name says it holds a secret
/// (it ends in `TOKEN`, or has `SECRET` or `PASSWORD` in it), which is never printed.
pub(crate) fn shown(command: &Command) -> String {
    let mut words = Vec::new();
    if let Some(dir) = command.get_current_dir() {
        words.push(format!("cd {dir:?} &&"));
    }
    for (name, value) in command.get_envs() {
        let upper = name.to_string_lossy().to_uppercase();
        let secret = upper.ends_with("TOKEN") || upper.contains("SECRET") || upper.contains("PASSWORD");
        match value {
            Some(_) if secret => words.push(format!("{}=(secret)", name.to_string_lossy())),
            Some(value) => words.push(format!("{}={value:?}", name.to_string_lossy())),
            None => words.push(format!("-u {}", name.to_string_lossy())),
        }
    }
    words.push(format!("{:?}", command.get_program()));
    words.extend(command.get_args().map(|a| format!("{a:?}")));
    words.join(" ")
}

/// Runs `command`, failing with its description when it does not exit 0.
pub(crate) fn run(mut command: Command) -> Result<(), String> {
    let shown = shown(&command);
    eprintln!("xtask: running {shown}");
    let status = command.status().map_err(|e| format!("cannot start {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

pub(crate) fn run_script(script: &str, args: &[&str]) -> Result<(), String> {
    let mut command = Command::new("bash");
    command.arg(root().join(script)).args(args).current_dir(root());
    run(command)
}

/// Sums the `test result:` lines of libtest output: (passed, failed, ignored).
pub(crate) fn count_results(output: &str) -> (usize, usize, usize) {
    let mut totals = (0, 0, 0);
    for line in output.lines().filter(|l| l.starts_with("test result:")) {
        let number = |word: &str| {
            line.split(';')
                .find(|part| part.trim_end().ends_with(word))
                .and_then(|part| part.split_whitespace().rev().nth(1))
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0)
        };
        totals.0 += number("passed");
        totals.1 += number("failed");
        totals.2 += number("ignored");
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_libtest_summaries() {
        let out =
            "test result: ok. 5 passed; 0 failed; 1 ignored\ntest result: FAILED. 2 passed; 3 failed; 0 ignored\n";
        assert_eq!(count_results(out), (7, 3, 1));
    }

    #[test]
    fn a_secret_variable_is_never_shown() {
        let mut command = Command::new("schemathesis");
        command
            .current_dir("/tmp")
            .env("ENVRT_SCHEMATHESIS_TOKEN", "envrt_abc")
            .env("MY_SECRET_KEY", "k")
            .env("DB_PASSWORD", "p")
            .env("CARGO_TERM_COLOR", "never")
            .env_remove("ENVRT_CONFIG")
            .args(["run", "x y"]);
        assert_eq!(
            shown(&command),
            "cd \"/tmp\" && CARGO_TERM_COLOR=\"never\" DB_PASSWORD=(secret) -u ENVRT_CONFIG \
             ENVRT_SCHEMATHESIS_TOKEN=(secret) MY_SECRET_KEY=(secret) \"schemathesis\" \"run\" \"x y\""
        );
    }
}
