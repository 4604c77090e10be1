//! Every refusal of [`ExecuteRequest::validate`] under each rule and wording, pinned to
//! the exact texts the drivers show today.

use super::*;
use crate::secret::Secret;

const ALL: [Wording; 3] = [Wording::Plain, Wording::Sentence, Wording::Worker];

fn request(command: &str, args: &[&str]) -> ExecuteRequest {
    ExecuteRequest::new(command, args.iter().copied())
}

fn with_env(name: &str, value: EnvValue) -> ExecuteRequest {
    let mut request = request("true", &[]);
    request.env.insert(name.to_owned(), value);
    request
}

fn refusal(request: &ExecuteRequest, names: NameRules, wording: Wording) -> String {
    request
        .validate(ExecuteRules::new(names, wording))
        .unwrap_err()
        .to_string()
}

#[test]
fn an_empty_command_is_refused_in_each_wording() {
    let empty = request("", &[]);
    let texts: Vec<String> = ALL.iter().map(|w| refusal(&empty, NameRules::Portable, *w)).collect();
    assert_eq!(
        texts,
        [
            "Invalid input: the command is empty",
            "Invalid input: The command is empty.",
            "Invalid input: command must not be empty",
        ]
    );
}

#[test]
fn a_nul_byte_in_the_command_or_an_argument_is_refused_in_each_wording() {
    for bad in [request("tr\0ue", &[]), request("true", &["a", "b\0"])] {
        let texts: Vec<String> = ALL.iter().map(|w| refusal(&bad, NameRules::Portable, *w)).collect();
        assert_eq!(
            texts,
            [
                "Invalid input: the command or an argument contains a NUL byte",
                "Invalid input: The command or an argument contains a NUL byte.",
                "Invalid input: the command and its arguments must not contain NUL bytes",
            ]
        );
    }
}

#[test]
fn a_bad_variable_name_is_refused_in_each_wording() {
    let bad = with_env("A=B", EnvValue::from("x"));
    let texts: Vec<String> = ALL.iter().map(|w| refusal(&bad, NameRules::Portable, *w)).collect();
    assert_eq!(
        texts,
        [
            "Invalid input: environment variable name \"A=B\" is not valid",
            "Invalid input: Environment variable name \"A=B\" is not valid.",
            "Invalid input: environment variable name \"A=B\" is not valid",
        ]
    );
    // A NUL byte in a name is shown escaped, never raw.
    let nul = with_env("A\0B", EnvValue::from("x"));
    assert_eq!(
        refusal(&nul, NameRules::Portable, Wording::Plain),
        "Invalid input: environment variable name \"A\\0B\" is not valid"
    );
    assert_eq!(
        refusal(&nul, NameRules::ShellSecrets, Wording::Sentence),
        "Invalid input: Environment variable name \"A\\0B\" is not valid."
    );
    let empty = with_env("", EnvValue::from("x"));
    assert_eq!(
        refusal(&empty, NameRules::Portable, Wording::Plain),
        "Invalid input: environment variable name \"\" is not valid"
    );
}

#[test]
fn a_nul_byte_in_a_value_is_refused_without_showing_the_value() {
    let bad = with_env("TOKEN", EnvValue::from(Secret::new("hunter2\0x")));
    for wording in ALL {
        let err = bad
            .validate(ExecuteRules::new(NameRules::Portable, wording))
            .unwrap_err();
        assert!(!err.to_string().contains("hunter2") && !format!("{err:?}").contains("hunter2"));
    }
    let texts: Vec<String> = ALL.iter().map(|w| refusal(&bad, NameRules::Portable, *w)).collect();
    assert_eq!(
        texts,
        [
            "Invalid input: environment variable TOKEN contains a NUL byte",
            "Invalid input: The value of environment variable \"TOKEN\" contains a NUL byte.",
            "Invalid input: environment variable TOKEN contains a NUL byte",
        ]
    );
}

#[test]
fn portable_names_take_anything_execve_takes() {
    for name in ["A-B", "1A", "a.b", "x y", "_"] {
        assert!(
            with_env(name, EnvValue::from("v"))
                .validate(NameRules::Portable)
                .is_ok(),
            "{name}"
        );
        assert!(
            with_env(name, EnvValue::from("v"))
                .validate(NameRules::ShellSecrets)
                .is_ok(),
            "{name}"
        );
    }
    assert!(!is_portable_name("") && !is_portable_name("A=B") && !is_portable_name("A\0"));
}

#[test]
fn shell_names_take_only_shell_identifiers() {
    assert!(is_shell_name("ENVRT_P_1") && is_shell_name("_x") && is_shell_name("a"));
    assert!(!is_shell_name("1A") && !is_shell_name("A-B") && !is_shell_name("") && !is_shell_name("é"));
    assert_eq!(
        refusal(&with_env("A-B", EnvValue::from("x")), NameRules::Shell, Wording::Plain),
        "Invalid input: environment variable name \"A-B\" is not valid"
    );
    assert!(
        with_env("ENVRT_P_1", EnvValue::from("x"))
            .validate(NameRules::Shell)
            .is_ok()
    );
}

#[test]
fn shell_secrets_refuse_a_secret_that_is_no_shell_identifier() {
    let secret = with_env("A-B", EnvValue::from(Secret::new("s3cret")));
    assert_eq!(
        refusal(&secret, NameRules::ShellSecrets, Wording::Sentence),
        "Invalid input: Secret environment variable \"A-B\" must be named with letters, digits and underscores."
    );
    assert_eq!(
        refusal(&secret, NameRules::ShellSecrets, Wording::Plain),
        "Invalid input: secret environment variable \"A-B\" must be named with letters, digits and underscores"
    );
    // The same name is fine for a plain variable, and for a secret under portable rules.
    assert!(
        with_env("A-B", EnvValue::from("x"))
            .validate(NameRules::ShellSecrets)
            .is_ok()
    );
    assert!(secret.validate(NameRules::Portable).is_ok());
    assert!(
        with_env("TOKEN", EnvValue::from(Secret::new("s")))
            .validate(NameRules::ShellSecrets)
            .is_ok()
    );
}

#[test]
fn the_checks_run_in_one_order() {
    // An empty command is reported before a bad variable; a NUL argument before a bad name;
    // variables in name order, each name before its value.
    let mut request = request("", &["\0"]);
    request.env.insert("A=B".into(), EnvValue::from("\0"));
    assert_eq!(
        refusal(&request, NameRules::Portable, Wording::Plain),
        "Invalid input: the command is empty"
    );
    request.command = "true".into();
    assert_eq!(
        refusal(&request, NameRules::Portable, Wording::Plain),
        "Invalid input: the command or an argument contains a NUL byte"
    );
    request.args.clear();
    request.env.insert("0K".into(), EnvValue::from("\0"));
    assert_eq!(
        refusal(&request, NameRules::Portable, Wording::Plain),
        "Invalid input: environment variable 0K contains a NUL byte"
    );
}

#[test]
fn a_good_request_passes_under_every_rule() {
    let mut good = request("ls", &["-l", "/tmp"]);
    good.env.insert("PATH".into(), EnvValue::from("/bin"));
    good.env.insert("TOKEN".into(), EnvValue::from(Secret::new("s")));
    for names in [NameRules::Portable, NameRules::Shell, NameRules::ShellSecrets] {
        for wording in ALL {
            assert!(good.validate(ExecuteRules::new(names, wording)).is_ok());
        }
    }
    assert_eq!(
        ExecuteRules::default(),
        ExecuteRules::new(NameRules::Portable, Wording::Plain)
    );
}
