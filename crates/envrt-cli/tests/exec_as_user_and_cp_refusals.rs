//! Through the `envrt` binary on the local driver: `exec --user` and `envrt cp`'s
//! refusals (a file over a directory, over a read-only file) and its stdin/stdout mode.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;

fn acquire(s: &Site, extra: &[&str]) -> String {
    let mut args = vec!["lease", "acquire"];
    args.extend_from_slice(extra);
    let out = s.run(&args);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    out.stdout_text().trim().to_owned()
}

#[test]
fn exec_user_is_refused_unless_allowed_and_then_runs_as_that_user() {
    let s = Site::new();
    std::fs::write(
        s.path().join("envrt.toml"),
        "[[environment]]\nid = \"users\"\ndriver = \"local\"\n[environment.config]\nallowedUsers = [\"nobody\"]\n",
    )
    .unwrap();
    let root = nix::unistd::geteuid().is_root();
    let refused = s.run(&["exec", "--user", "nobody", "--", "true"]);
    assert_eq!(refused.code, Some(2));
    let reason = if root {
        "the environment config \"allowedUsers\" does not list it."
    } else {
        "the local driver runs commands as another user only when envrt runs as root."
    };
    assert_eq!(refused.stderr, format!("Cannot run as user \"nobody\": {reason}\n"));
    if !root {
        return;
    }
    let id = acquire(&s, &["--env-id", "users"]);
    let unreachable = s.run(&["exec", "--lease", &id, "-u", "nobody", "--", "true"]);
    assert_eq!(
        (unreachable.code, unreachable.stderr.as_str()),
        (
            Some(2),
            "Cannot run as user \"nobody\": it cannot reach the working directory (a directory on the way denies it search permission).\n"
        )
    );
    // Open the way: the site's directories, then the workspace (as root, from inside).
    for dir in [s.path().to_path_buf(), s.state()] {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode | 0o001)).unwrap();
    }
    let opened = s.run(&["exec", "--lease", &id, "--", "chmod", "0755", "."]);
    assert_eq!(opened.code, Some(0), "{}", opened.stderr);
    let as_nobody = s.run(&["exec", "--lease", &id, "-u", "nobody", "--", "id", "-u"]);
    assert_eq!(
        (as_nobody.code, as_nobody.stdout_text()),
        (Some(0), "65534\n".into()),
        "{}",
        as_nobody.stderr
    );
    let unknown = s.run(&["exec", "--lease", &id, "--user", "root", "--", "true"]);
    assert_eq!(
        (unknown.code, unknown.stderr.as_str()),
        (
            Some(2),
            "Cannot run as user \"root\": the environment config \"allowedUsers\" does not list it.\n"
        )
    );
    assert_eq!(s.run(&["lease", "release", &id]).code, Some(0));
}

#[test]
fn cp_refuses_to_put_a_file_over_a_directory_or_a_read_only_file_on_either_side() {
    let s = Site::new();
    let id = acquire(&s, &[]);
    let sh = |script: &str| {
        let out = s.run(&["exec", "--lease", &id, "--", "sh", "-c", script]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        out.stdout_text()
    };
    sh("mkdir -p d && echo keep > d/inside && echo old > ro && chmod 0444 ro && echo new > f");
    std::fs::write(s.path().join("f"), b"host file").unwrap();
    // host → lease (with --replace: a file SRC is then exactly DST)
    for (target, expected) in [
        (
            "d",
            "is a directory: a file does not replace it (name a path inside it)",
        ),
        ("ro", "is a read-only file: envrt cp does not replace it"),
    ] {
        let dst = format!("lease:{id}:{target}");
        let out = s.run(&["cp", "-q", "--replace", "f", &dst]);
        assert_eq!(
            (out.code, out.stderr.clone()),
            (Some(2), format!("envrt: \"{dst}\" {expected}\n"))
        );
    }
    assert_eq!(sh("cat d/inside ro"), "keep\nold\n", "nothing replaced");
    // Without --replace a file over a directory lands inside it; a read-only file is
    // still refused.
    let out = s.run(&["cp", "-q", "f", &format!("lease:{id}:d")]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let dst = format!("lease:{id}:ro");
    let out = s.run(&["cp", "-q", "f", &dst]);
    assert_eq!(
        (out.code, out.stderr.clone()),
        (
            Some(2),
            format!("envrt: \"{dst}\" is a read-only file: envrt cp does not replace it\n")
        )
    );
    assert_eq!(sh("cat d/inside d/f ro"), "keep\nhost fileold\n");
    // lease → host
    std::fs::create_dir(s.path().join("hd")).unwrap();
    std::fs::write(s.path().join("hd/inside"), b"keep").unwrap();
    std::fs::write(s.path().join("hro"), b"old").unwrap();
    std::fs::set_permissions(s.path().join("hro"), std::fs::Permissions::from_mode(0o444)).unwrap();
    let src = format!("lease:{id}:f");
    for (target, expected) in [
        (
            "hd",
            "is a directory: a file does not replace it (name a path inside it)",
        ),
        ("hro", "is a read-only file: envrt cp does not replace it"),
    ] {
        let out = s.run(&["cp", "-q", "--replace", &src, target]);
        assert_eq!(
            (out.code, out.stderr.clone()),
            (Some(2), format!("envrt: \"{target}\" {expected}\n"))
        );
    }
    assert_eq!(std::fs::read(s.path().join("hd/inside")).unwrap(), b"keep");
    assert_eq!(std::fs::read(s.path().join("hro")).unwrap(), b"old");
    // Without --replace a file over a directory lands inside it.
    let out = s.run(&["cp", "-q", &src, "hd"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(std::fs::read(s.path().join("hd/f")).unwrap(), b"new\n");
    // With --replace a writable file and a directory over a directory are replaced.
    let out = s.run(&["cp", "-q", &src, "plain"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = s.run(&["cp", "-q", "--replace", &format!("lease:{id}:d"), "hd"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(std::fs::read(s.path().join("hd/inside")).unwrap(), b"keep\n");
    assert_eq!(s.run(&["lease", "release", &id]).code, Some(0));
}

#[test]
fn cp_reads_stdin_and_writes_stdout_with_a_dash() {
    let s = Site::new();
    let id = acquire(&s, &[]);
    let data: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let dst = format!("lease:{id}:sub/from-stdin");
    let put = s.run_with(&["cp", "-", &dst], Some(&data));
    assert_eq!(put.code, Some(0), "{}", put.stderr);
    assert_eq!(put.stderr, format!("copied 1 file, 70000 bytes: - → {dst}\n"));
    let listing = s.run(&[
        "exec",
        "--lease",
        &id,
        "--",
        "sh",
        "-c",
        "wc -c < sub/from-stdin; ls -l sub/from-stdin | cut -c1-10",
    ]);
    assert_eq!(listing.stdout_text(), "70000\n-rw-r--r--\n");
    let got = s.run(&["cp", "-q", &dst, "-"]);
    assert_eq!((got.code, got.stderr.as_str()), (Some(0), ""));
    assert!(got.stdout == data, "stdout is exactly the file");
    let dir = s.run(&["cp", "-q", &format!("lease:{id}:sub"), "-"]);
    assert_eq!(
        (dir.code, dir.stderr.as_str()),
        (Some(2), "Sync source \"sub\" is not a file.\n")
    );
    assert!(dir.stdout.is_empty());
    assert_eq!(s.run(&["lease", "release", &id]).code, Some(0));
}
