//! Counting libvirt RPC messages as they pass through the tunnel, without decoding them.
//!
//! Every libvirt RPC message starts with its total length (4 bytes, big-endian, including those
//! 4 bytes). Following the lengths through the client-to-host byte stream counts the calls (and
//! stream packets) a provision costs over SSH: the round trips that make a remote host slow.

/// Frame-boundary tracker for one byte stream.
#[derive(Debug, Default)]
pub struct FrameCounter {
    header: [u8; 4],
    header_len: usize,
    remaining: usize,
    frames: u64,
    broken: bool,
}

impl FrameCounter {
    /// Account for the next `chunk` of the stream.
    pub fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() && !self.broken {
            if self.remaining > 0 {
                let n = self.remaining.min(chunk.len());
                self.remaining -= n;
                chunk = &chunk[n..];
                continue;
            }
            let n = (4 - self.header_len).min(chunk.len());
            self.header[self.header_len..self.header_len + n].copy_from_slice(&chunk[..n]);
            self.header_len += n;
            chunk = &chunk[n..];
            if self.header_len == 4 {
                let len = u32::from_be_bytes(self.header) as usize;
                self.header_len = 0;
                self.frames += 1;
                match len.checked_sub(4) {
                    Some(body) => self.remaining = body,
                    // Not libvirt framing: stop counting rather than report nonsense.
                    None => self.broken = true,
                }
            }
        }
    }

    /// Messages started so far.
    #[must_use]
    pub fn frames(&self) -> u64 {
        self.frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut v = u32::try_from(body.len() + 4).unwrap().to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn counts_frames_across_any_chunking() {
        let mut stream = frame(b"hello");
        stream.extend(frame(b""));
        stream.extend(frame(&[7u8; 300]));
        for chunk in [1usize, 2, 3, 5, 7, 64, 1000] {
            let mut c = FrameCounter::default();
            for piece in stream.chunks(chunk) {
                c.feed(piece);
            }
            assert_eq!(c.frames(), 3, "chunk size {chunk}");
        }
    }

    #[test]
    fn a_length_below_the_header_stops_counting() {
        let mut c = FrameCounter::default();
        c.feed(&[0, 0, 0, 2, 9, 9, 9, 9, 0, 0, 0, 4]);
        assert_eq!(c.frames(), 1);
    }
}
