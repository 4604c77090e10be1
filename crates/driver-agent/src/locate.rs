//! Finding the supervisor's binary, the same way for every driver, and telling whether it
//! is static (it then runs in an image without a C library of its own, as Docker's busybox
//! test image is).

use std::path::{Path, PathBuf};

use envrt_driver_api::descriptor::{find_in_path, is_executable};

/// The supervisor's binary name.
pub const AGENT_BINARY: &str = "envrt-agent";
/// The variable naming the supervisor's binary.
pub const AGENT_VAR: &str = "ENVRT_AGENT";

/// The directories searched before `PATH`: the running executable's and its parent's (a
/// test binary lives in `target/debug/deps`, the agent in `target/debug`).
fn search_dirs() -> Vec<PathBuf> {
    let Ok(exe) = std::env::current_exe() else {
        return Vec::new();
    };
    exe.ancestors().skip(1).take(2).map(Path::to_path_buf).collect()
}

/// The supervisor binary: `ENVRT_AGENT` when set, else next to the running executable (or
/// one directory up), else on `PATH`; the error is the exact text of what was tried.
pub fn locate() -> Result<PathBuf, String> {
    locate_in(std::env::var_os(AGENT_VAR).map(PathBuf::from), &search_dirs(), || {
        find_in_path(AGENT_BINARY)
    })
}

/// Another of envrt's helper binaries (e.g. `envrt-egress`), found the same way: `var` when
/// set, else next to the running executable (or one directory up), else on `PATH`; the
/// error names the binary, where it looked and how to set it.
pub fn locate_named(binary: &str, var: &str) -> Result<PathBuf, String> {
    let dirs = search_dirs();
    if let Some(path) = std::env::var_os(var).map(PathBuf::from) {
        return match is_executable(&path) {
            true => Ok(path),
            false => Err(format!(
                "\"{}\" (set by {var}) is not an executable file.",
                path.display()
            )),
        };
    }
    if let Some(found) = dirs.iter().map(|d| d.join(binary)).find(|p| is_executable(p)) {
        return Ok(found);
    }
    find_in_path(binary).ok_or_else(|| {
        let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        format!(
            "\"{binary}\" was not found (looked in {}, and on PATH); set {var}=/path/to/{binary}, or put it on PATH.",
            looked.join(", ")
        )
    })
}

/// [`locate`] over given places: `on_path` searches `PATH` only when neither `configured`
/// nor `dirs` gave the binary (every capability resolution of a lease asks, so the common
/// case stays a few `stat`s).
pub fn locate_in(
    configured: Option<PathBuf>,
    dirs: &[PathBuf],
    on_path: impl FnOnce() -> Option<PathBuf>,
) -> Result<PathBuf, String> {
    if let Some(path) = configured {
        return match is_executable(&path) {
            true => Ok(path),
            false => Err(format!(
                "Process supervisor \"{}\" (set by {AGENT_VAR}) is not an executable file.",
                path.display()
            )),
        };
    }
    if let Some(found) = dirs.iter().map(|d| d.join(AGENT_BINARY)).find(|p| is_executable(p)) {
        return Ok(found);
    }
    on_path().ok_or_else(|| {
        let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        format!(
            "Process supervisor \"{AGENT_BINARY}\" was not found (looked in {}, and on PATH); set {AGENT_VAR}=/path/to/{AGENT_BINARY}, or put it on PATH.",
            looked.join(", ")
        )
    })
}

/// ELF program header type of the dynamic loader's path.
const PT_INTERP: u32 = 3;
/// How much of the file is read: the ELF header and the program headers fit in it for any
/// binary a linker makes (they follow the 64-byte header).
const HEAD: usize = 64 * 1024;

/// Whether `path` is a 64-bit little-endian ELF executable with no program interpreter
/// (a static or static-pie binary): it then needs nothing of the file system it runs in.
/// Anything else (a script, a dynamic binary, a file too short to be ELF) is `false`.
pub fn is_static(path: &Path) -> std::io::Result<bool> {
    use std::io::Read;
    let mut head = Vec::with_capacity(HEAD);
    std::fs::File::open(path)?.take(HEAD as u64).read_to_end(&mut head)?;
    Ok(static_elf(&head))
}

fn static_elf(head: &[u8]) -> bool {
    // e_ident: magic, class 2 (64-bit), data 1 (little-endian).
    if head.len() < 64 || head[..4] != *b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return false;
    }
    let u16_at = |at: usize| u16::from_le_bytes([head[at], head[at + 1]]) as usize;
    let phoff = u64::from_le_bytes(head[0x20..0x28].try_into().expect("8 bytes"));
    let (entsize, count) = (u16_at(0x36), u16_at(0x38));
    let Ok(phoff) = usize::try_from(phoff) else {
        return false;
    };
    if entsize < 4 || count == 0 {
        return false;
    }
    (0..count).all(|i| {
        let at = phoff.saturating_add(i.saturating_mul(entsize));
        match head.get(at..at + 4) {
            Some(kind) => u32::from_le_bytes(kind.try_into().expect("4 bytes")) != PT_INTERP,
            // Program headers past what was read: not provably static.
            None => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_is_the_configured_one_else_found_in_the_search_dirs() {
        let dir = std::env::temp_dir().join(format!("envrt-agent-lookup-{}", std::process::id()));
        let (empty, full) = (dir.join("empty"), dir.join("full"));
        std::fs::create_dir_all(&empty).unwrap();
        std::fs::create_dir_all(&full).unwrap();
        let agent = full.join(AGENT_BINARY);
        std::fs::write(&agent, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            locate_in(None, &[empty.clone(), full.clone()], || None),
            Ok(agent.clone())
        );
        assert_eq!(locate_in(Some(agent.clone()), &[], || None), Ok(agent.clone()));
        assert_eq!(
            locate_in(None, std::slice::from_ref(&empty), || None),
            Err(format!(
                "Process supervisor \"envrt-agent\" was not found (looked in {}, and on PATH); set ENVRT_AGENT=/path/to/envrt-agent, or put it on PATH.",
                empty.display()
            ))
        );
        let missing = empty.join(AGENT_BINARY);
        assert_eq!(
            locate_in(Some(missing.clone()), std::slice::from_ref(&full), || None),
            Err(format!(
                "Process supervisor \"{}\" (set by ENVRT_AGENT) is not an executable file.",
                missing.display()
            ))
        );
        // A script is not a static binary.
        assert!(!is_static(&agent).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_dynamic_binary_has_an_interpreter_and_a_short_or_foreign_file_is_not_static() {
        // /bin/sh on Debian is dynamic.
        assert!(!is_static(Path::new("/bin/sh")).unwrap());
        assert!(!static_elf(b"\x7fELF"));
        assert!(!static_elf(&[0u8; 128]));
        // A header whose program headers lie past the bytes read.
        let mut head = vec![0u8; 64];
        head[..6].copy_from_slice(b"\x7fELF\x02\x01");
        head[0x20..0x28].copy_from_slice(&1_000_000u64.to_le_bytes());
        head[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        head[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        assert!(!static_elf(&head));
        // The same header with one PT_LOAD right after it: static.
        head[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        head.extend_from_slice(&1u32.to_le_bytes());
        head.extend_from_slice(&[0u8; 52]);
        assert!(static_elf(&head));
        // And with a PT_INTERP: dynamic.
        head[64..68].copy_from_slice(&PT_INTERP.to_le_bytes());
        assert!(!static_elf(&head));
    }
}
