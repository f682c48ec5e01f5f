//! Counting libvirt RPC messages as they pass through the tunnel, by procedure.
//!
//! Every libvirt RPC message starts with its total length (4 bytes, big-endian, including those
//! 4 bytes), then its program, version and procedure numbers (4 bytes each). Following the
//! lengths through the client-to-host byte stream counts the calls (and stream packets) a
//! provision costs over SSH: the round trips that make a remote host slow. Which procedures
//! they are tells where the round trips go.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The bytes of a message's start that name it: length, program, version, procedure.
const HEAD: usize = 16;

/// A message's program and procedure numbers (libvirt's remote program is `0x20008086`).
pub type Procedure = (u32, i32);

/// The messages counted on every connection of one tunnel.
#[derive(Debug, Default)]
pub struct RpcTally {
    total: AtomicU64,
    by_procedure: Mutex<BTreeMap<Procedure, u64>>,
}

impl RpcTally {
    /// Messages started so far.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Messages so far, by program and procedure.
    pub fn by_procedure(&self) -> BTreeMap<Procedure, u64> {
        self.by_procedure.lock().map(|m| m.clone()).unwrap_or_default()
    }

    fn record(&self, procedure: Procedure) {
        self.total.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = self.by_procedure.lock() {
            *m.entry(procedure).or_default() += 1;
        }
    }
}

/// Frame-boundary tracker for one byte stream.
#[derive(Debug, Default)]
pub struct FrameCounter {
    head: [u8; HEAD],
    head_len: usize,
    remaining: usize,
    broken: bool,
}

impl FrameCounter {
    /// Account for the next `chunk` of the stream in `tally`.
    pub fn feed(&mut self, mut chunk: &[u8], tally: &RpcTally) {
        while !chunk.is_empty() && !self.broken {
            if self.remaining > 0 {
                let n = self.remaining.min(chunk.len());
                self.remaining -= n;
                chunk = &chunk[n..];
                continue;
            }
            let n = (HEAD - self.head_len).min(chunk.len());
            self.head[self.head_len..self.head_len + n].copy_from_slice(&chunk[..n]);
            self.head_len += n;
            chunk = &chunk[n..];
            if self.head_len == HEAD {
                self.head_len = 0;
                let word = |i: usize| [self.head[i], self.head[i + 1], self.head[i + 2], self.head[i + 3]];
                let len = u32::from_be_bytes(word(0)) as usize;
                tally.record((u32::from_be_bytes(word(4)), i32::from_be_bytes(word(12))));
                match len.checked_sub(HEAD) {
                    Some(body) => self.remaining = body,
                    // Not libvirt framing (its header alone is 28 bytes): stop counting rather
                    // than report nonsense.
                    None => self.broken = true,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REMOTE: u32 = 0x2000_8086;

    fn frame(procedure: i32, body: &[u8]) -> Vec<u8> {
        let mut v = u32::try_from(body.len() + HEAD).unwrap().to_be_bytes().to_vec();
        v.extend_from_slice(&REMOTE.to_be_bytes());
        v.extend_from_slice(&1u32.to_be_bytes());
        v.extend_from_slice(&procedure.to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn counts_frames_by_procedure_across_any_chunking() {
        let mut stream = frame(66, b"hello");
        stream.extend(frame(1, b""));
        stream.extend(frame(66, &[7u8; 300]));
        for chunk in [1usize, 2, 3, 5, 7, 17, 64, 1000] {
            let (mut c, tally) = (FrameCounter::default(), RpcTally::default());
            for piece in stream.chunks(chunk) {
                c.feed(piece, &tally);
            }
            assert_eq!(tally.total(), 3, "chunk size {chunk}");
            let expected = BTreeMap::from([((REMOTE, 1), 1), ((REMOTE, 66), 2)]);
            assert_eq!(tally.by_procedure(), expected, "chunk size {chunk}");
        }
    }

    #[test]
    fn a_length_below_the_header_stops_counting() {
        let (mut c, tally) = (FrameCounter::default(), RpcTally::default());
        let mut bad = 2u32.to_be_bytes().to_vec();
        bad.extend([0u8; 12]);
        bad.extend(frame(1, b""));
        c.feed(&bad, &tally);
        assert_eq!(tally.total(), 1);
    }
}
