//! Moving a volume's bytes through a libvirt stream in fixed chunks. A stream that takes or
//! gives nothing is reported as stalled rather than retried forever; on any failure the stream
//! is aborted, so libvirt drops the transfer, and on success it is finished.

use virt::{error::Error as VirtError, stream::Stream};

/// Bytes per stream send/receive.
const CHUNK: usize = 64 * 1024;

/// Why a transfer stopped.
pub(super) enum StreamError {
    /// The stream accepted or returned no data; the text says which.
    Stalled(&'static str),
    /// libvirt's error while sending or receiving.
    Transfer(VirtError),
    /// libvirt's error when finishing the stream.
    Finish(VirtError),
}

/// Send all of `bytes`, then finish the stream.
pub(super) fn send_all(stream: Stream, bytes: &[u8]) -> Result<(), StreamError> {
    for chunk in bytes.chunks(CHUNK) {
        let mut sent = 0;
        while sent < chunk.len() {
            match stream.send(&chunk[sent..]) {
                Ok(n) if n > 0 => sent += n.unsigned_abs(),
                Ok(_) => return Err(abort(stream, StreamError::Stalled("the stream accepted no data"))),
                Err(e) => return Err(abort(stream, StreamError::Transfer(e))),
            }
        }
    }
    stream.finish().map_err(StreamError::Finish)
}

/// Receive until the end of the stream or `limit` bytes, then finish the stream.
pub(super) fn receive(stream: Stream, limit: usize) -> Result<Vec<u8>, StreamError> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        match stream.recv(&mut buf) {
            Ok(0) => break,
            Ok(n) if n > 0 => {
                let n = n.unsigned_abs().min(buf.len());
                out.extend_from_slice(&buf[..n]);
                if out.len() >= limit {
                    out.truncate(limit);
                    break;
                }
            }
            Ok(_) => {
                let stalled = StreamError::Stalled("the blocking stream reported no data available");
                return Err(abort(stream, stalled));
            }
            Err(e) => return Err(abort(stream, StreamError::Transfer(e))),
        }
    }
    stream.finish().map_err(StreamError::Finish)?;
    Ok(out)
}

fn abort(stream: Stream, e: StreamError) -> StreamError {
    let _ = stream.abort();
    e
}
