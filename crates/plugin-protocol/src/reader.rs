//! The one bounded line reader both sides read the other's stream with: the host a
//! worker's stdout, the worker its stdin. It holds at most `limit` bytes of a line; a
//! longer line is skipped as it streams by (its first [`HEAD_BYTES`] kept, so a dropped
//! request can still be answered by id). Cancel-safe: every piece of state lives in the
//! reader, so a `select!` may drop a pending [`LineReader::next_line`] and call it again.

use std::io;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// How much of a dropped line's start is kept (see [`LineReader::head`]).
pub const HEAD_BYTES: usize = 256;

/// The reader's buffer size.
const CAPACITY: usize = 64 * 1024;

/// One result of [`LineReader::next_line`].
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    /// A line (without `\n`) is in [`LineReader::line`].
    Line,
    /// A line longer than the limit was skipped; its length in bytes (without `\n`). Its
    /// start is in [`LineReader::head`].
    Oversized(usize),
    /// End of stream.
    Eof,
}

/// Reads `\n`-terminated lines of at most `limit` bytes each.
#[derive(Debug)]
pub struct LineReader<R> {
    reader: BufReader<R>,
    buf: Vec<u8>,
    head: Vec<u8>,
    limit: usize,
    discarding: Option<usize>,
    /// The last answer was a line still in `buf`: clear it before reading on.
    delivered: bool,
    /// Whether a last line without `\n` counts as a line (else it is dropped at EOF).
    unterminated: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// A reader of lines of at most `limit` bytes; a last line without its `\n` is
    /// dropped (the host's reading of a worker that died mid-line).
    pub fn new(inner: R, limit: usize) -> Self {
        Self::with_capacity(CAPACITY, inner, limit)
    }

    /// [`LineReader::new`] with a buffer of `capacity` bytes.
    pub fn with_capacity(capacity: usize, inner: R, limit: usize) -> Self {
        LineReader {
            reader: BufReader::with_capacity(capacity, inner),
            buf: Vec::new(),
            head: Vec::new(),
            limit,
            discarding: None,
            delivered: false,
            unterminated: false,
        }
    }

    /// Also delivers a last line that ends without `\n` (as a line, or as oversized),
    /// the SDK worker's reading of its input.
    pub fn keep_unterminated(mut self) -> Self {
        self.unterminated = true;
        self
    }

    /// The line of the last [`LineRead::Line`].
    pub fn line(&self) -> &[u8] {
        &self.buf
    }

    /// The first [`HEAD_BYTES`] of the line of the last [`LineRead::Oversized`].
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// Reads the next line.
    pub async fn next_line(&mut self) -> io::Result<LineRead> {
        if self.delivered {
            self.delivered = false;
            if self.buf.capacity() > 1024 * 1024 {
                // do not keep a huge line's allocation around
                self.buf = Vec::new();
            } else {
                self.buf.clear();
            }
        }
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                return Ok(self.at_eof());
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let chunk = &available[..newline.unwrap_or(available.len())];
            match self.discarding.as_mut() {
                Some(skipped) => {
                    *skipped += chunk.len();
                    let room = HEAD_BYTES - self.head.len();
                    self.head.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                None if self.buf.len() + chunk.len() > self.limit => {
                    let so_far = self.buf.len() + chunk.len();
                    let mut head = self.buf[..self.buf.len().min(HEAD_BYTES)].to_vec();
                    let room = HEAD_BYTES - head.len();
                    head.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    self.head = head;
                    self.buf = Vec::new();
                    self.discarding = Some(so_far);
                }
                None => self.buf.extend_from_slice(chunk),
            }
            let consumed = newline.map_or(available.len(), |i| i + 1);
            self.reader.consume(consumed);
            if newline.is_some() {
                return Ok(self.finish_line());
            }
        }
    }

    /// A line ended (`\n`, or the end of the stream): what it was.
    fn finish_line(&mut self) -> LineRead {
        if let Some(skipped) = self.discarding.take() {
            return LineRead::Oversized(skipped);
        }
        self.delivered = true;
        LineRead::Line
    }

    fn at_eof(&mut self) -> LineRead {
        let pending = self.discarding.is_some() || !self.buf.is_empty();
        if pending && self.unterminated {
            return self.finish_line();
        }
        self.discarding = None;
        self.buf.clear();
        LineRead::Eof
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn long_lines_are_skipped_and_short_ones_kept() {
        let mut data = b"{\"a\":1}\n".to_vec();
        data.extend(std::iter::repeat_n(b'x', 100));
        data.extend(b"\nshort\n\ntail");
        let mut reader = LineReader::with_capacity(8, &data[..], 16);
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Line);
        assert_eq!(reader.line(), b"{\"a\":1}");
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Oversized(100));
        assert_eq!(reader.head(), &[b'x'; 100][..]);
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Line);
        assert_eq!(reader.line(), b"short");
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Line);
        assert_eq!(reader.line(), b"");
        // the host's reading: a last line without `\n` is dropped
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Eof);
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Eof);
    }

    #[tokio::test]
    async fn the_worker_reading_keeps_an_unterminated_last_line() {
        let data = format!("{}\nshort\nlast", "y".repeat(600));
        let mut reader = LineReader::with_capacity(16, data.as_bytes(), 50).keep_unterminated();
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Oversized(600));
        assert_eq!(reader.head(), "y".repeat(HEAD_BYTES).as_bytes());
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Line);
        assert_eq!(reader.line(), b"short");
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Line);
        assert_eq!(reader.line(), b"last");
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Eof);
        let long = "z".repeat(80);
        let mut reader = LineReader::with_capacity(16, long.as_bytes(), 50).keep_unterminated();
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Oversized(80));
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Eof);
    }

    #[tokio::test]
    async fn a_line_of_exactly_the_limit_is_kept() {
        let data = format!("{}\n{}\n", "a".repeat(50), "b".repeat(51));
        let mut reader = LineReader::with_capacity(7, data.as_bytes(), 50);
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Line);
        assert_eq!(reader.line().len(), 50);
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Oversized(51));
        assert_eq!(reader.next_line().await.unwrap(), LineRead::Eof);
    }
}
