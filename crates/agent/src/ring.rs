//! A replay buffer: the newest `keep` bytes of one stream, addressed by absolute offset.

use std::collections::VecDeque;

/// Why a read from a ring was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RingError {
    /// The offset's byte was dropped; `first` is the oldest still held.
    Dropped {
        /// The oldest offset still held (also the count of bytes dropped).
        first: u64,
    },
    /// The offset is past the newest byte; `end` is one past it.
    PastEnd {
        /// Bytes written so far.
        end: u64,
    },
}

/// The newest `keep` bytes of a stream. Memory grows with the bytes held, not with `keep`.
#[derive(Debug)]
pub(crate) struct Ring {
    buf: VecDeque<u8>,
    start: u64,
    keep: usize,
    /// Held for one reader (`hold`): one past the newest byte handed to a reader.
    held_for: Option<u64>,
}

impl Ring {
    pub(crate) fn new(keep: usize) -> Ring {
        Ring {
            buf: VecDeque::new(),
            start: 0,
            keep,
            held_for: None,
        }
    }

    /// A ring that never drops a byte no reader was handed: its writer asks [`Ring::room`]
    /// before it reads more.
    pub(crate) fn holding(keep: usize) -> Ring {
        Ring {
            held_for: Some(0),
            ..Ring::new(keep)
        }
    }

    /// How many bytes may be pushed without dropping one no reader was handed (any number
    /// for a ring that is not held).
    pub(crate) fn room(&self) -> usize {
        match self.held_for {
            Some(handed) => self.keep.saturating_sub((self.end() - handed) as usize),
            None => usize::MAX,
        }
    }

    /// A reader was handed the bytes up to `end`; true when that made room in a held ring.
    pub(crate) fn handed(&mut self, end: u64) -> bool {
        match &mut self.held_for {
            Some(handed) if end > *handed => {
                *handed = end;
                true
            }
            _ => false,
        }
    }

    /// Appends, dropping the oldest bytes beyond `keep`; never blocks, never fails.
    pub(crate) fn push(&mut self, data: &[u8]) {
        if data.len() >= self.keep {
            let skip = data.len() - self.keep;
            self.start += (self.buf.len() + skip) as u64;
            self.buf.clear();
            self.buf.extend(&data[skip..]);
            return;
        }
        let overflow = (self.buf.len() + data.len()).saturating_sub(self.keep);
        self.buf.drain(..overflow);
        self.start += overflow as u64;
        self.buf.extend(data);
    }

    /// Drops every byte held (an ended process's buffer freed for a new one): the
    /// offsets stay, `start` moves to the end; returns the bytes freed.
    pub(crate) fn free(&mut self) -> u64 {
        let freed = self.buf.len() as u64;
        self.start += freed;
        self.buf = VecDeque::new();
        freed
    }

    /// The oldest offset held, which is also the number of bytes dropped.
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// One past the newest offset: the bytes written so far.
    pub(crate) fn end(&self) -> u64 {
        self.start + self.buf.len() as u64
    }

    pub(crate) fn keep(&self) -> usize {
        self.keep
    }

    /// Checks that `offset` can be read from (held, or exactly the end).
    pub(crate) fn check(&self, offset: u64) -> Result<(), RingError> {
        if offset < self.start {
            Err(RingError::Dropped { first: self.start })
        } else if offset > self.end() {
            Err(RingError::PastEnd { end: self.end() })
        } else {
            Ok(())
        }
    }

    /// Up to `max` bytes from `offset` (empty at the end).
    pub(crate) fn read(&self, offset: u64, max: usize) -> Result<Vec<u8>, RingError> {
        self.check(offset)?;
        let from = (offset - self.start) as usize;
        let to = (from + max).min(self.buf.len());
        // Two slice copies, not a byte-by-byte walk: replay is the bulk path.
        let (front, back) = self.buf.as_slices();
        let mut out = Vec::with_capacity(to - from);
        if from < front.len() {
            out.extend_from_slice(&front[from..to.min(front.len())]);
        }
        if to > front.len() {
            out.extend_from_slice(&back[from.saturating_sub(front.len())..to - front.len()]);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_keeps_the_newest_bytes_and_counts_the_dropped() {
        let mut ring = Ring::new(4);
        ring.push(b"ab");
        ring.push(b"cde");
        assert_eq!((ring.start(), ring.end()), (1, 5));
        assert_eq!(ring.read(1, 10), Ok(b"bcde".to_vec()));
        assert_eq!(ring.read(0, 10), Err(RingError::Dropped { first: 1 }));
        assert_eq!(ring.read(6, 10), Err(RingError::PastEnd { end: 5 }));
        assert_eq!(ring.read(5, 10), Ok(Vec::new()));
        ring.push(b"0123456789");
        assert_eq!((ring.start(), ring.end()), (11, 15));
        assert_eq!(ring.read(12, 2), Ok(b"78".to_vec()));
    }

    #[test]
    fn a_held_ring_has_room_only_for_what_a_reader_was_handed() {
        let mut ring = Ring::holding(4);
        assert_eq!(ring.room(), 4);
        ring.push(b"abc");
        assert_eq!(ring.room(), 1);
        ring.push(b"d");
        assert_eq!(ring.room(), 0);
        assert!(ring.handed(2));
        assert!(!ring.handed(2));
        assert_eq!(ring.room(), 2);
        ring.push(b"ef");
        assert_eq!((ring.start(), ring.end(), ring.room()), (2, 6, 0));
        assert_eq!(ring.read(2, 10), Ok(b"cdef".to_vec()));
        assert_eq!(Ring::new(4).room(), usize::MAX);
        assert!(!Ring::new(4).handed(3));
    }

    #[test]
    fn a_read_across_the_rings_wrap_point_returns_the_bytes_in_order() {
        let mut ring = Ring::new(8);
        for round in 0u8..50 {
            ring.push(&[round, round, round]);
            let end = ring.end();
            let expected: Vec<u8> = (ring.start()..end).map(|offset| (offset / 3) as u8).collect();
            assert_eq!(ring.read(ring.start(), 100), Ok(expected.clone()));
            assert_eq!(
                ring.read(ring.start() + 1, 4),
                Ok(expected[1..5.min(expected.len())].to_vec())
            );
        }
    }
}
