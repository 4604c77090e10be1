//! Unit tests of the `egress` module: the checks of `envrtStartEgress`'s parameters and
//! the record beside the lease directory.

use super::*;

#[test]
fn a_sockets_directory_is_refused_unless_absolute_existing_and_only_the_workers() {
    let text = |r: Result<PathBuf, RpcError>| r.unwrap_err().message;
    assert_eq!(text(check_sockets("rel/dir")), "socketDir \"rel/dir\" is not absolute");
    assert_eq!(
        text(check_sockets("/nonexistent/envrt-egress")),
        "socketDir \"/nonexistent/envrt-egress\" does not exist"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let shown = dir.path().display().to_string();
    assert_eq!(
        text(check_sockets(&shown)),
        format!("socketDir {shown:?} is not a directory of the worker's user that only it may write")
    );
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(check_sockets(&shown).unwrap(), dir.path());
}

#[test]
fn a_bundle_name_and_the_lease_variables_are_refused_with_exact_texts() {
    let text = |r: Result<(), RpcError>| r.unwrap_err().message;
    assert!(check_bundle_name("ca-bundle.pem").is_ok());
    for bad in ["", ".", "..", "../ca.pem", "a/b", "a\0b"] {
        assert_eq!(
            text(check_bundle_name(bad)),
            format!("caBundle {bad:?} is not the name of a file in socketDir")
        );
    }
    assert_eq!(
        text(check_bundle_name(&"x".repeat(256))),
        format!("caBundle {:?} is not the name of a file in socketDir", "x".repeat(256))
    );
    let env = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    assert!(check_env(&env(&[("SSL_CERT_FILE", "/x"), ("_A1", "")])).is_ok());
    for bad in ["", "1A", "A-B", "A=B", "LD PRELOAD"] {
        assert_eq!(
            text(check_env(&env(&[(bad, "v")]))),
            format!("env name {bad:?} is not a variable name")
        );
    }
    assert_eq!(
        text(check_env(&env(&[("A", "v\0w")]))),
        "env value of A holds a NUL or is longer than 4096 bytes"
    );
    assert_eq!(
        text(check_env(&env(&[("A", &"v".repeat(4097))]))),
        "env value of A holds a NUL or is longer than 4096 bytes"
    );
    let many: std::collections::BTreeMap<String, String> = (0..65).map(|i| (format!("V{i}"), String::new())).collect();
    assert_eq!(text(check_env(&many)), "env has 65 variables; at most 64 are allowed");
}

#[test]
fn a_bundle_is_opened_only_as_a_regular_file_never_through_a_link() {
    let sockets = tempfile::tempdir().unwrap();
    let record = tempfile::tempdir().unwrap();
    std::fs::write(
        record.path().join("sockets"),
        sockets.path().as_os_str().as_encoded_bytes(),
    )
    .unwrap();
    std::fs::write(sockets.path().join("ca.pem"), "pem").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", sockets.path().join("link.pem")).unwrap();
    std::fs::create_dir(sockets.path().join("dir.pem")).unwrap();
    assert!(open_bundle(record.path(), "ca.pem").is_ok());
    let shown = |name: &str| sockets.path().join(name).display().to_string();
    assert_eq!(
        open_bundle(record.path(), "link.pem").unwrap_err(),
        format!("{}: Too many levels of symbolic links (os error 40)", shown("link.pem"))
    );
    assert_eq!(
        open_bundle(record.path(), "dir.pem").unwrap_err(),
        format!("{} is not a regular file", shown("dir.pem"))
    );
    assert_eq!(
        open_bundle(record.path(), "none.pem").unwrap_err(),
        format!("{}: No such file or directory (os error 2)", shown("none.pem"))
    );
}

#[test]
fn the_record_sits_beside_the_lease_directory() {
    assert_eq!(
        record_dir(Path::new("/root/leases/abc")),
        Some(PathBuf::from("/root/leases/.egress-abc"))
    );
}
