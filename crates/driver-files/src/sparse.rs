//! Writing synced file content on the host: runs of zero blocks become holes (a seek, not
//! a write), so a sparse file stays sparse whatever carried it, and every byte is charged
//! against the sync's bound before it lands ([`ByteBudget`]).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};

/// The block a zero run is measured in: a run of whole zero blocks becomes a hole.
const BLOCK: usize = 4096;

/// Size of one read from the source (the most a copy holds in memory at once).
const CHUNK: usize = 256 * 1024;

/// The bytes one sync out entry may still write (apparent sizes, holes included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteBudget {
    limit: u64,
    used: u64,
}

impl ByteBudget {
    /// A budget of `limit` bytes, nothing used.
    pub fn new(limit: u64) -> Self {
        ByteBudget { limit, used: 0 }
    }

    /// The bound.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Takes `n` bytes from the budget; false (and nothing taken) when they do not fit.
    pub fn charge(&mut self, n: u64) -> bool {
        match self.used.checked_add(n) {
            Some(total) if total <= self.limit => {
                self.used = total;
                true
            }
            _ => false,
        }
    }

    /// Whether `n` more bytes would still fit (nothing taken).
    pub fn fits(&self, n: u64) -> bool {
        self.used.checked_add(n).is_some_and(|t| t <= self.limit)
    }
}

/// Why a copy stopped.
#[derive(Debug)]
pub enum CopyError {
    /// Reading or writing failed.
    Io(io::Error),
    /// The content is larger than the budget; what was written so far is still there
    /// (the caller removes it with the rest of its staging).
    OverLimit,
}

impl From<io::Error> for CopyError {
    fn from(e: io::Error) -> Self {
        CopyError::Io(e)
    }
}

/// Copies `input` to the start of the empty file `out`, leaving a hole for every whole
/// zero block, charging each byte to `budget`; returns the bytes copied (the file's length).
pub fn write_sparse<R: Read + ?Sized>(
    input: &mut R,
    out: &mut File,
    budget: &mut ByteBudget,
) -> Result<u64, CopyError> {
    let mut buffer = vec![0u8; CHUNK];
    let mut written = 0u64;
    let mut pending_hole = 0u64;
    loop {
        let n = read_full(input, &mut buffer)?;
        if n == 0 {
            break;
        }
        if !budget.charge(n as u64) {
            return Err(CopyError::OverLimit);
        }
        put(out, &buffer[..n], &mut pending_hole)?;
        written += n as u64;
    }
    finish(out, written, pending_hole)?;
    Ok(written)
}

/// Copies the regular file `input` into the empty file `out` keeping its holes: only the
/// data ranges the source's file system reports (`SEEK_DATA`/`SEEK_HOLE`) are read, and
/// zero blocks within them become holes too. Every byte of the source's length is
/// charged to `budget`. Returns the length.
pub fn copy_file_sparse(input: &mut File, out: &mut File, budget: &mut ByteBudget) -> Result<u64, CopyError> {
    let length = input.metadata()?.len();
    if !budget.charge(length) {
        return Err(CopyError::OverLimit);
    }
    let mut buffer = vec![0u8; CHUNK];
    let mut position = 0u64;
    while position < length {
        let data = match rustix::fs::seek(&*input, rustix::fs::SeekFrom::Data(position)) {
            Ok(at) => at,
            // No data after `position`: the rest is a hole.
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(CopyError::Io(e.into())),
        };
        let hole = rustix::fs::seek(&*input, rustix::fs::SeekFrom::Hole(data)).map_err(io::Error::from)?;
        input.seek(SeekFrom::Start(data))?;
        out.seek(SeekFrom::Start(data))?;
        let mut left = hole.min(length) - data;
        let mut pending_hole = 0u64;
        while left > 0 {
            let want = left.min(CHUNK as u64) as usize;
            let n = input.read(&mut buffer[..want])?;
            if n == 0 {
                break;
            }
            put(out, &buffer[..n], &mut pending_hole)?;
            left -= n as u64;
        }
        if pending_hole > 0 {
            out.seek(SeekFrom::Current(pending_hole as i64))?;
        }
        position = hole;
    }
    out.set_len(length)?;
    Ok(length)
}

/// Reads until `buffer` is full or the input ends (a pipe hands out any size; whole
/// buffers keep the zero blocks aligned to the file's offsets).
fn read_full<R: Read + ?Sized>(input: &mut R, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match input.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Writes `bytes` at the current position less `pending_hole`, turning whole zero blocks
/// into more pending hole.
fn put(out: &mut File, bytes: &[u8], pending_hole: &mut u64) -> io::Result<()> {
    let mut start = 0;
    while start < bytes.len() {
        let end = (start + BLOCK).min(bytes.len());
        let zero = end - start == BLOCK && bytes[start..end].iter().all(|b| *b == 0);
        if zero {
            *pending_hole += BLOCK as u64;
            start = end;
            continue;
        }
        // One write for the whole run of blocks that are not zero.
        let mut run_end = end;
        while run_end < bytes.len() {
            let next = (run_end + BLOCK).min(bytes.len());
            if next - run_end == BLOCK && bytes[run_end..next].iter().all(|b| *b == 0) {
                break;
            }
            run_end = next;
        }
        if *pending_hole > 0 {
            out.seek(SeekFrom::Current(*pending_hole as i64))?;
            *pending_hole = 0;
        }
        out.write_all(&bytes[start..run_end])?;
        start = run_end;
    }
    Ok(())
}

/// A trailing hole is a length, not a write.
fn finish(out: &mut File, written: u64, pending_hole: u64) -> io::Result<()> {
    if pending_hole > 0 {
        out.set_len(written)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A scratch directory, removed on drop.
    struct Dir(std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn scratch() -> Dir {
        let p = std::env::temp_dir().join(format!("envrt-sparse-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&p).unwrap();
        Dir(p)
    }

    #[test]
    fn zero_runs_become_holes_and_the_content_is_unchanged() {
        let dir = scratch();
        let mut content = vec![0u8; 64 << 20];
        content[10] = 1;
        content[(32 << 20) + 5] = 2;
        let last = content.len() - 1;
        content[last] = 3;
        let path = dir.0.join("out");
        let mut out = File::create(&path).unwrap();
        let mut budget = ByteBudget::new(u64::MAX);
        let n = write_sparse(&mut content.as_slice(), &mut out, &mut budget).unwrap();
        drop(out);
        assert_eq!(n, content.len() as u64);
        assert_eq!(std::fs::read(&path).unwrap(), content);
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.blocks() * 512 < 1 << 20, "allocated {} bytes", meta.blocks() * 512);

        let zeros = vec![0u8; 10 << 20];
        let tail = dir.0.join("zeros");
        let mut out = File::create(&tail).unwrap();
        write_sparse(&mut zeros.as_slice(), &mut out, &mut budget).unwrap();
        assert_eq!(std::fs::metadata(&tail).unwrap().len(), 10 << 20);
        assert_eq!(std::fs::metadata(&tail).unwrap().blocks(), 0);
    }

    #[test]
    fn a_sparse_file_copy_reads_only_its_data_and_keeps_its_holes() {
        let dir = scratch();
        let source = dir.0.join("src");
        let f = File::create(&source).unwrap();
        f.set_len(1 << 30).unwrap();
        let mut f = std::fs::OpenOptions::new().write(true).open(&source).unwrap();
        f.seek(SeekFrom::Start(512 << 20)).unwrap();
        f.write_all(b"middle").unwrap();
        drop(f);
        let dest = dir.0.join("dest");
        let mut out = File::create(&dest).unwrap();
        let mut budget = ByteBudget::new(2 << 30);
        let n = copy_file_sparse(&mut File::open(&source).unwrap(), &mut out, &mut budget).unwrap();
        assert_eq!(n, 1 << 30);
        let meta = std::fs::metadata(&dest).unwrap();
        assert_eq!(meta.len(), 1 << 30);
        assert!(meta.blocks() * 512 < 1 << 20, "allocated {} bytes", meta.blocks() * 512);
        let mut back = File::open(&dest).unwrap();
        back.seek(SeekFrom::Start(512 << 20)).unwrap();
        let mut word = [0u8; 6];
        back.read_exact(&mut word).unwrap();
        assert_eq!(&word, b"middle");
    }

    #[test]
    fn the_budget_refuses_what_does_not_fit() {
        let dir = scratch();
        let mut out = File::create(dir.0.join("o")).unwrap();
        let mut budget = ByteBudget::new(100);
        assert!(matches!(
            write_sparse(&mut [7u8; 101].as_slice(), &mut out, &mut budget),
            Err(CopyError::OverLimit)
        ));
        let mut budget = ByteBudget::new(100);
        assert_eq!(
            write_sparse(&mut [7u8; 100].as_slice(), &mut out, &mut budget).unwrap(),
            100
        );
        assert!(!budget.fits(1) && budget.fits(0) && !budget.charge(1));
    }
}
