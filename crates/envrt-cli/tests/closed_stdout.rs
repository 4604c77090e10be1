//! Every listing command whose stdout reader has gone (`envrt caps | true`, `envrt lease
//! list --all | head`) exits quietly with 141 (128 + SIGPIPE, as a shell reports `ls |
//! head`), instead of panicking with `failed printing to stdout: Broken pipe` (exit 101).

mod common;

use std::process::Stdio;

use common::*;

/// Runs envrt with a stdout pipe whose reading end is already closed.
fn with_closed_stdout(s: &Site, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = s
        .command(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let status = wait_bounded(&mut child, LIMIT);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut err, &mut text).unwrap();
    (status.code(), text)
}

#[test]
fn listing_commands_exit_quietly_when_stdout_is_closed() {
    let s = Site::new();
    let id = s
        .run(&["lease", "acquire", "--detached"])
        .stdout_text()
        .trim()
        .to_owned();
    let template = s.run(&["template", "capture", &id]);
    assert_eq!(template.code, Some(0), "{}", template.stderr);
    let template = template.stdout_text().trim().to_owned();
    let commands: &[&[&str]] = &[
        &["caps"],
        &["caps", "--json"],
        &["lease", "list"],
        &["lease", "list", "--all"],
        &["lease", "list", "--json"],
        &["lease", "show", &id],
        &["lease", "show", &id, "--json"],
        &["template", "list"],
        &["template", "list", "--json"],
        &["doctor"],
        &["doctor", "--json"],
        &["gc"],
        &["lease", "acquire", "--detached"],
    ];
    for args in commands {
        assert_eq!(
            with_closed_stdout(&s, args),
            (Some(141), String::new()),
            "envrt {args:?}"
        );
    }
    // The command still did its work: the second lease exists.
    assert_eq!(s.run(&["lease", "list"]).stdout_text().lines().count(), 3);
    assert_eq!(
        s.run(&["template", "delete", &template, "--env-id", "local"]).code,
        Some(0)
    );
}
