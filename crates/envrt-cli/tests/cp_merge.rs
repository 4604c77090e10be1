//! `envrt cp` into a directory that already exists, both directions, on the local driver
//! and in a Docker container: it follows `docker cp`'s rules (`DST/basename(SRC)`, the
//! `SRC/.` form for the content), merges without deleting what it was not told to,
//! `--replace` keeps the exact-path rule, and `--exclude` leaves entries out. The Docker
//! test fails instead of skipping with `ENVRT_REQUIRE_DOCKER=1`.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// Every path under `root` (itself included), sorted, relative to the host side.
fn host_tree(base: &Path, root: &str) -> String {
    let mut found = Vec::new();
    let mut stack = vec![base.join(root)];
    while let Some(p) = stack.pop() {
        found.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
        if std::fs::symlink_metadata(&p).unwrap().is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    found.sort();
    found.join(" ")
}

struct Lease<'a> {
    site: &'a Site,
    id: String,
}

impl Lease<'_> {
    fn sh(&self, script: &str) -> String {
        let out = self.site.run(&["exec", "--lease", &self.id, "--", "sh", "-c", script]);
        assert_eq!(out.code, Some(0), "{script}: {}", out.stderr);
        out.stdout_text()
    }

    /// Every path under `root` in the lease (hidden ones too), sorted, on one line.
    fn tree(&self, root: &str) -> String {
        self.sh(&format!("find {root} | sort | tr '\\n' ' '"))
            .trim_end()
            .to_owned()
    }

    fn at(&self, path: &str) -> String {
        format!("lease:{}:{path}", self.id)
    }

    fn cp(&self, args: &[&str]) -> Outcome {
        let mut all = vec!["cp"];
        all.extend_from_slice(args);
        self.site.run(&all)
    }
}

fn ok(out: &Outcome) {
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

/// The whole round on one lease.
fn merges_keep_what_they_were_not_told_to_replace(s: &Site, l: &Lease) {
    let host = s.path();
    // Host → lease: the lease already holds d/old.txt and an older d/proj.
    l.sh("mkdir -p d/proj/sub && echo old > d/old.txt && echo keep > d/proj/keep && echo stale > d/proj/sub/a");
    std::fs::create_dir_all(host.join("proj/sub")).unwrap();
    std::fs::write(host.join("proj/sub/a"), "new\n").unwrap();
    std::fs::write(host.join("proj/b"), "b\n").unwrap();
    std::fs::write(host.join("proj/x.log"), "log\n").unwrap();
    let into = l.cp(&["proj", &l.at("d")]);
    ok(&into);
    assert_eq!(into.stderr, format!("copied 3 files, 10 bytes: proj → {}\n", l.at("d")));
    assert_eq!(
        l.tree("d"),
        "d d/old.txt d/proj d/proj/b d/proj/keep d/proj/sub d/proj/sub/a d/proj/x.log",
        "SRC lands in DST/basename(SRC), merged; no staging left"
    );
    assert_eq!(l.sh("cat d/old.txt d/proj/keep d/proj/sub/a"), "old\nkeep\nnew\n");
    // SRC/. puts the content into DST itself; --exclude leaves *.log out.
    ok(&l.cp(&["-q", "--exclude", "*.log", "proj/.", &l.at("d")]));
    assert_eq!(
        l.tree("d"),
        "d d/b d/old.txt d/proj d/proj/b d/proj/keep d/proj/sub d/proj/sub/a d/proj/x.log d/sub d/sub/a"
    );
    // A file over an existing directory lands inside it.
    std::fs::write(host.join("f"), "f\n").unwrap();
    ok(&l.cp(&["-q", "f", &l.at("d/proj")]));
    assert_eq!(l.sh("cat d/proj/f d/proj/keep"), "f\nkeep\n");
    // A clash of kinds is refused before anything moves.
    l.sh("mkdir -p c/proj/b && echo stays > c/proj/keep");
    let clash = l.cp(&["-q", "proj", &l.at("c")]);
    assert_eq!(
        (clash.code, clash.stderr.as_str()),
        (
            Some(2),
            format!(
                "envrt: \"{}\" is a directory: a copied file of that name does not replace it\n",
                l.at("c/proj/b")
            )
            .as_str()
        )
    );
    assert_eq!(l.tree("c"), "c c/proj c/proj/b c/proj/keep");
    let slash = l.cp(&["-q", "f", &l.at("nowhere/")]);
    assert_eq!(
        (slash.code, slash.stderr),
        (
            Some(2),
            format!(
                "envrt: \"{}\" does not exist: a destination ending in / must be an existing directory\n",
                l.at("nowhere/")
            )
        )
    );
    // --replace keeps the exact-path rule: d becomes proj.
    ok(&l.cp(&["-q", "--replace", "proj", &l.at("d")]));
    assert_eq!(l.tree("d"), "d d/b d/sub d/sub/a d/x.log");

    // Lease → host: the host already holds hostdir/precious.txt and an older hostdir/out.
    l.sh("mkdir -p out/sub && echo o > out/o && echo s > out/sub/s && echo l > out/skip.log");
    std::fs::create_dir_all(host.join("hostdir/out")).unwrap();
    std::fs::write(host.join("hostdir/precious.txt"), "precious").unwrap();
    std::fs::write(host.join("hostdir/out/mine"), "mine").unwrap();
    let out = l.cp(&["--exclude", "*.log", &l.at("out"), "hostdir"]);
    ok(&out);
    assert_eq!(
        out.stderr,
        format!("copied 2 files, 4 bytes: {} → hostdir\n", l.at("out"))
    );
    assert_eq!(
        host_tree(host, "hostdir"),
        "hostdir hostdir/out hostdir/out/mine hostdir/out/o hostdir/out/sub hostdir/out/sub/s hostdir/precious.txt"
    );
    assert_eq!(
        std::fs::read_to_string(host.join("hostdir/precious.txt")).unwrap(),
        "precious"
    );
    ok(&l.cp(&["-q", &l.at("out/."), "hostdir"]));
    assert_eq!(
        host_tree(host, "hostdir"),
        "hostdir hostdir/o hostdir/out hostdir/out/mine hostdir/out/o hostdir/out/sub hostdir/out/sub/s \
         hostdir/precious.txt hostdir/skip.log hostdir/sub hostdir/sub/s"
    );
    ok(&l.cp(&["-q", &l.at("out/o"), "hostdir/out"]));
    assert_eq!(std::fs::read_to_string(host.join("hostdir/out/o")).unwrap(), "o\n");
    std::fs::create_dir_all(host.join("clash/out/o")).unwrap();
    let clash = l.cp(&["-q", &l.at("out"), "clash"]);
    assert_eq!(
        (clash.code, clash.stderr.as_str()),
        (
            Some(2),
            "envrt: \"clash/out/o\" is a directory: a copied file of that name does not replace it\n"
        )
    );
    assert_eq!(
        host_tree(host, "clash"),
        "clash clash/out clash/out/o",
        "nothing moved, no staging left"
    );
    std::fs::write(host.join("plain"), "p").unwrap();
    let over_file = l.cp(&["-q", &l.at("out"), "plain"]);
    assert_eq!(
        (over_file.code, over_file.stderr.as_str()),
        (
            Some(2),
            "envrt: \"plain\" exists and is not a directory: a copied directory does not replace it\n"
        )
    );
    ok(&l.cp(&["-q", "--replace", &l.at("out"), "hostdir"]));
    assert_eq!(
        host_tree(host, "hostdir"),
        "hostdir hostdir/o hostdir/skip.log hostdir/sub hostdir/sub/s"
    );
}

#[test]
fn cp_merges_into_existing_directories_on_the_local_driver() {
    let s = Site::new();
    let out = s.run(&["lease", "acquire", "--detached"]);
    ok(&out);
    let l = Lease {
        site: &s,
        id: out.stdout_text().trim().to_owned(),
    };
    merges_keep_what_they_were_not_told_to_replace(&s, &l);
    ok(&s.run(&["lease", "release", &l.id]));
}

/// Removes the containers of a state dir when the test ends.
struct Containers(String);

impl Drop for Containers {
    fn drop(&mut self) {
        let filter = format!("label=envrt.cli-state={}", self.0);
        if let Ok(out) = Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output() {
            for id in String::from_utf8_lossy(&out.stdout).lines() {
                let _ = Command::new("docker").args(["rm", "-f", "-v", id]).output();
            }
        }
    }
}

#[test]
fn cp_merges_into_existing_directories_in_a_container() {
    let Some(image) = envrt_test_support::docker::image_or_skip() else {
        return;
    };
    let s = Site::new();
    std::fs::write(
        s.path().join("envrt.toml"),
        format!("[[environment]]\nid = \"ctr\"\ndriver = \"docker\"\n[environment.config]\nimage = \"{image}\"\n"),
    )
    .unwrap();
    let _containers = Containers(std::path::absolute(s.state()).unwrap().display().to_string());
    let out = s.run(&["lease", "acquire", "--env-id", "ctr", "--detached"]);
    ok(&out);
    let l = Lease {
        site: &s,
        id: out.stdout_text().trim().to_owned(),
    };
    merges_keep_what_they_were_not_told_to_replace(&s, &l);
    ok(&s.run(&["lease", "release", &l.id]));
}
