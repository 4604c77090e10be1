//! Docker for tests: the test images `scripts/docker-test-image.sh` builds, and the
//! preamble "the engine answers and has the test image, or skip (fail when
//! `ENVRT_REQUIRE_DOCKER=1`)", asked through the `docker` CLI.

use std::process::Command;

use crate::Component;

/// The default test image (busybox-based, `scripts/docker-test-image.sh`).
pub const DEFAULT_IMAGE: &str = "envrt-test:latest";

/// The test image: `ENVRT_TEST_IMAGE`, else [`DEFAULT_IMAGE`].
pub fn image() -> String {
    std::env::var("ENVRT_TEST_IMAGE").unwrap_or_else(|_| DEFAULT_IMAGE.to_owned())
}

/// Whether the engine answers `docker image inspect IMAGE` for `image`.
pub fn has_image(image: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", image])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The test image when the engine has it; otherwise fails with
/// `ENVRT_REQUIRE_DOCKER=1 but no engine or no image IMAGE` when Docker is required, or
/// says `SKIPPED: no Docker engine or no image IMAGE` and returns `None`.
#[track_caller]
pub fn image_or_skip() -> Option<String> {
    let image = image();
    if has_image(&image) {
        return Some(image);
    }
    Component::Docker.skip_or_fail(
        format_args!("ENVRT_REQUIRE_DOCKER=1 but no engine or no image {image}"),
        format_args!("SKIPPED: no Docker engine or no image {image}"),
    );
    None
}

/// The Debian image with python3 and git (`scripts/docker-debian-image.sh`, debootstrap
/// from Debian's packages), for tests that need a real userland.
pub const DEBIAN_IMAGE: &str = "envrt-debian:bookworm";

/// [`DEBIAN_IMAGE`] when the engine has it; otherwise fails with
/// `ENVRT_REQUIRE_DOCKER=1 but no engine or no image envrt-debian:bookworm (scripts/docker-debian-image.sh)`
/// when Docker is required, or says `SKIPPED: ...` and returns `None`.
#[track_caller]
pub fn debian_image_or_skip() -> Option<String> {
    if has_image(DEBIAN_IMAGE) {
        return Some(DEBIAN_IMAGE.to_owned());
    }
    Component::Docker.skip_or_fail(
        format_args!(
            "ENVRT_REQUIRE_DOCKER=1 but no engine or no image {DEBIAN_IMAGE} (scripts/docker-debian-image.sh)"
        ),
        format_args!("SKIPPED: no Docker engine or no image {DEBIAN_IMAGE} (scripts/docker-debian-image.sh)"),
    );
    None
}

/// The static process supervisor (`envrt-agent` built with `+crt-static` on the gnu
/// target, as its crate documents), which runs in the busybox test image: built here by
/// `cargo build` once per test binary (a no-op once built; cargo's own lock orders the test
/// binaries that ask at once), and checked to be static with `file` where that exists.
/// Panics when the build fails.
pub fn static_agent() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_static_agent).clone()
}

fn build_static_agent() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args([
            "build",
            "-p",
            "envrt-agent",
            "--release",
            "--target",
            "x86_64-unknown-linux-gnu",
        ])
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .current_dir(&root)
        .status()
        .expect("run cargo build");
    assert!(status.success(), "the static build of envrt-agent failed");
    let binary = crate::network::target_dir().join("x86_64-unknown-linux-gnu/release/envrt-agent");
    if let Ok(file) = Command::new("file").arg(&binary).output() {
        let text = String::from_utf8_lossy(&file.stdout);
        let is_static = text.contains("statically linked") || text.contains("static-pie linked");
        assert!(is_static, "not a static binary: {text}");
    }
    binary
}
