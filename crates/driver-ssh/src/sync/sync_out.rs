//! Sync out: each source is checked on the remote side (it exists, has the right kind and
//! resolves inside the workspace; with `followSymlinks`, every link it follows stays
//! inside too) and streamed as a tar archive over a channel of its own. The stream is
//! hostile bytes (whatever runs on the remote host as its user can shape it, e.g. a
//! `~/.ssh/rc` that writes to the channel): the host feeds it, as it arrives and through a
//! bounded queue, to the shared extractor ([`envrt_driver_files::archive`]), which stages
//! it beside the target without ever resolving a path through an entry of it, and renames
//! every entry of the operation into place once all are staged.

use std::path::PathBuf;

use envrt_driver_api::sync::{ExcludeSet, SyncKind, confine_to_workspace};
use envrt_driver_api::{DriverError, SyncFile};
use envrt_driver_files::archive::{Counts as Extracted, ExtractError, ExtractPlan, Staging, extract};
use tokio::io::AsyncReadExt;

use crate::connection::{Host, exit_code};
use crate::remote::quote;
use crate::sync::sync_in::{Counts, host_path};

/// One entry of a sync out, checked.
pub(crate) struct Planned {
    source: String,
    source_shown: String,
    target: PathBuf,
    target_shown: String,
    kind: SyncKind,
    mode: Option<u32>,
    exclude: ExcludeSet,
    follow: bool,
    keep_special_bits: bool,
    max_bytes: u64,
}

pub(crate) fn plan(file: &SyncFile, workspace: &str) -> Result<Planned, DriverError> {
    Ok(Planned {
        source: confine_to_workspace(workspace, &file.source_path)?,
        source_shown: file.source_path.clone(),
        target: host_path(&file.target_path)?,
        target_shown: file.target_path.clone(),
        kind: file.kind,
        mode: file.mode,
        exclude: ExcludeSet::new(&file.exclude)?,
        follow: file.follows_symlinks(),
        keep_special_bits: file.keep_special_bits.unwrap_or(false),
        max_bytes: file.byte_limit(),
    })
}

impl Planned {
    /// The host-side target (normalized) and as the caller gave it.
    pub(crate) fn target(&self) -> (String, String) {
        (self.target.to_string_lossy().into_owned(), self.target_shown.clone())
    }
}

const MISSING: i32 = 122;
const KIND: i32 = 123;
const OUTSIDE: i32 = 121;

fn remote_script(workspace: &str, plan: &Planned) -> String {
    let test = match plan.kind {
        SyncKind::File => "-f",
        SyncKind::Directory => "-d",
    };
    let follow_check = if plan.follow && plan.kind == SyncKind::Directory {
        format!(
            "find \"$r\" -type l | while IFS= read -r l; do t=$(readlink -f -- \"$l\") || exit {OUTSIDE}; \
             case \"$t/\" in \"$w\"/*) ;; *) exit {OUTSIDE};; esac; done || exit {OUTSIDE}\n"
        )
    } else {
        String::new()
    };
    format!(
        "w={w}; p={p}\n[ -d \"$w\" ] || exit {gone}\n[ -e \"$p\" ] || exit {MISSING}\nr=$(readlink -f -- \"$p\") || exit {MISSING}\n\
         case \"$r/\" in \"$w\"/*) ;; *) exit {OUTSIDE};; esac\n[ {test} \"$r\" ] || exit {KIND}\n{follow_check}\
         S=; tar --version 2>/dev/null | grep -q GNU && S=--sparse\n\
         cd -P -- \"$(dirname -- \"$r\")\" && exec tar -c $S {h} -f - -- \"$(basename -- \"$r\")\"",
        w = quote(workspace),
        p = quote(&plan.source),
        gone = crate::remote::GONE_CODE,
        h = if plan.follow { "-h" } else { "" },
    )
}

/// Fetches every planned entry, stages it, then renames all into place; all or nothing.
pub(crate) async fn transfer(host: &Host, workspace: &str, plans: Vec<Planned>) -> Result<Counts, DriverError> {
    let mut staged: Vec<Staging> = Vec::new();
    let mut counts = Counts::default();
    for plan in &plans {
        let staging = Staging::new(&plan.target)?;
        let (staging, extracted) = fetch(host, workspace, plan, staging).await?;
        counts.files += extracted.files;
        counts.bytes += extracted.bytes;
        staged.push(staging);
    }
    for s in &staged {
        s.place()?;
    }
    Ok(counts)
}

/// Chunks of the stream queued between the channel and the extractor: the most held in
/// memory per sync is `QUEUE * CHUNK` bytes, whatever the archive's size.
const QUEUE: usize = 8;
const CHUNK: usize = 64 * 1024;
/// The most of the remote side's standard error kept for a message.
const MAX_STDERR: usize = 64 * 1024;

/// The extractor's end of the queue: a blocking reader of the chunks.
struct Queued {
    chunks: tokio::sync::mpsc::Receiver<Vec<u8>>,
    current: Vec<u8>,
    at: usize,
}

impl std::io::Read for Queued {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.current.len() {
            match self.chunks.blocking_recv() {
                Some(chunk) => {
                    self.current = chunk;
                    self.at = 0;
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len() - self.at);
        buf[..n].copy_from_slice(&self.current[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Runs the remote side of one entry and extracts its stream as it arrives. The remote
/// exit code decides first (a missing source, a wrong kind, a path outside); a stream the
/// extractor refused is then reported as the refusal, and the channel is dropped at once
/// (the rest is never read).
async fn fetch(
    host: &Host,
    workspace: &str,
    plan: &Planned,
    staging: Staging,
) -> Result<(Staging, Extracted), DriverError> {
    let mut remote = host.spawn(&remote_script(workspace, plan)).await?;
    drop(remote.child.stdin().take());
    let (sender, chunks) = tokio::sync::mpsc::channel::<Vec<u8>>(QUEUE);
    let reader = Queued {
        chunks,
        current: Vec::new(),
        at: 0,
    };
    let (target, source_shown, target_shown) = (
        plan.target.clone(),
        plan.source_shown.clone(),
        plan.target_shown.clone(),
    );
    let (kind, mode, exclude, keep, max) = (
        plan.kind,
        plan.mode,
        plan.exclude.clone(),
        plan.keep_special_bits,
        plan.max_bytes,
    );
    let extraction = tokio::task::spawn_blocking(move || {
        let plan = ExtractPlan {
            kind,
            mode,
            exclude: &exclude,
            keep_special_bits: keep,
            max_bytes: max,
            final_target: &target,
            source_shown: &source_shown,
            target_shown: &target_shown,
        };
        let result = extract(reader, &plan, &staging);
        (staging, result)
    });
    let mut stdout = remote.child.stdout().take();
    let mut stderr = remote.child.stderr().take();
    let pump = async {
        // Owned here: the extractor sees the end of the stream when this ends.
        let sender = sender;
        let Some(pipe) = stdout.as_mut() else { return Ok(true) };
        loop {
            let mut chunk = vec![0u8; CHUNK];
            let n = pipe.read(&mut chunk).await?;
            if n == 0 {
                return Ok(true);
            }
            chunk.truncate(n);
            if sender.send(chunk).await.is_err() {
                // The extractor stopped: the rest is not read.
                return Ok(false);
            }
        }
    };
    let mut err = Vec::new();
    let read_err = async {
        if let Some(pipe) = stderr.as_mut() {
            let mut chunk = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                let room = MAX_STDERR.saturating_sub(err.len()).min(n);
                err.extend_from_slice(&chunk[..room]);
            }
        }
    };
    // Standard error is read beside the stream, but only waited for when the stream was
    // read to its end: after a refusal the remote side may block writing forever.
    let pumped: std::io::Result<bool> = {
        tokio::pin!(pump);
        tokio::pin!(read_err);
        let mut err_done = false;
        let pumped = loop {
            tokio::select! {
                pumped = &mut pump => break pumped,
                () = &mut read_err, if !err_done => err_done = true,
            }
        };
        if matches!(pumped, Ok(true)) && !err_done {
            read_err.await;
        }
        pumped
    };
    let (staging, extracted) = extraction
        .await
        .map_err(|e| DriverError::other(format!("The archive reader failed: {e}")))?;
    let code = match pumped {
        Ok(true) => exit_code(remote.child.wait().await),
        // Stopped early or broken: the remote side's verdict is not waited for.
        _ => None,
    };
    match code {
        Some(0) => {}
        Some(crate::remote::GONE_CODE) => return Err(crate::remote::lease_gone(workspace)),
        Some(MISSING) => {
            return Err(DriverError::SourceMissing {
                path: plan.source_shown.clone(),
            });
        }
        Some(KIND) => {
            return Err(DriverError::SourceKind {
                path: plan.source_shown.clone(),
                expected: match plan.kind {
                    SyncKind::File => "file",
                    SyncKind::Directory => "directory",
                },
            });
        }
        Some(OUTSIDE) => {
            return Err(DriverError::PathOutsideWorkspace {
                path: plan.source_shown.clone(),
            });
        }
        other => {
            if let Err(ExtractError::Refused(refusal)) = extracted {
                return Err(refusal);
            }
            if let Err(e) = pumped {
                return Err(DriverError::io("cannot read the archive from the remote side", e));
            }
            return Err(host.unavailable(
                "the sync out failed on the remote side",
                format!("exit {other:?}: {}", String::from_utf8_lossy(&err).trim()),
            ));
        }
    }
    let extracted = extracted.map_err(ExtractError::into_driver)?;
    Ok((staging, extracted))
}
