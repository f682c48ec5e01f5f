//! RFC 2397 data URLs for Ignition file contents.
//!
//! Small text goes in as `data:,<percent-encoded>`; it stays readable in the rendered JSON.
//! From [`GZIP_MIN_BYTES`] on, the contents are also gzip-compressed and base64-encoded
//! (`data:;base64,…` with `compression: "gzip"`), and the shorter of the two encodings wins: the
//! payload travels through QEMU fw_cfg, whose reads Ignition does in quadratic time, so every byte
//! saved counts. The gzip stream is deterministic (mtime 0, no name), so the same input always gives
//! the same output and the controller's "has the file changed" check stays stable.
//!
//! Percent-encoding keeps RFC 3986 unreserved characters and `/:=@,;` (all legal in the data part
//! of an RFC 2397 URL and left alone by Ignition's decoder); everything else, including `+`, `%`,
//! space and newline, becomes `%XX`.
//!
//! [`decode`] is the inverse, used by tests and by anyone who wants to read back a rendered file.

use std::io::{Read, Write};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;

/// Contents of at least this many bytes are considered for gzip compression. Below it, the 18-byte
/// gzip framing and base64's 4/3 expansion never pay off.
pub const GZIP_MIN_BYTES: usize = 256;

/// Decoded data is capped at this size, so a hostile gzip bomb cannot exhaust memory.
pub const MAX_DECODED_BYTES: usize = 16 * 1024 * 1024;

/// An encoded `contents` resource: the `source` URL and its `compression`, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// The data URL.
    pub source: String,
    /// `Some("gzip")` when the URL holds gzip-compressed data.
    pub compression: Option<&'static str>,
}

/// Encodes `data`, gzip-compressing it when that is allowed, it is at least [`GZIP_MIN_BYTES`] long
/// and the compressed URL is shorter.
#[must_use]
pub fn encode(data: &[u8], allow_gzip: bool) -> Encoded {
    let plain = encode_plain(data);
    if allow_gzip
        && data.len() >= GZIP_MIN_BYTES
        && let Some(gz) = gzip(data)
    {
        let compressed = format!("data:;base64,{}", STANDARD.encode(gz));
        if compressed.len() < plain.len() {
            return Encoded {
                source: compressed,
                compression: Some("gzip"),
            };
        }
    }
    Encoded {
        source: plain,
        compression: None,
    }
}

/// `data:,<percent-encoded data>`.
#[must_use]
pub fn encode_plain(data: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(6 + data.len() * 3 / 2);
    out.push_str("data:,");
    for &b in data {
        if b.is_ascii_alphanumeric() || b"-._~/:=@,;".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
    out
}

fn gzip(data: &[u8]) -> Option<Vec<u8>> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::best());
    enc.write_all(data).ok()?;
    enc.finish().ok()
}

/// Why a data URL could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not `data:[<mediatype>][;base64],<data>`.
    #[error("not a data URL")]
    NotDataUrl,
    /// A `%` not followed by two hex digits.
    #[error("bad percent-escape at byte {0}")]
    BadEscape(usize),
    /// The base64 part does not decode.
    #[error("bad base64")]
    BadBase64,
    /// `compression` is not `gzip` or the gzip stream is corrupt.
    #[error("bad compression")]
    BadCompression,
    /// The decoded data exceeds [`MAX_DECODED_BYTES`].
    #[error("decoded data too large")]
    TooLarge,
}

/// Decodes a data URL, gunzipping when `compression` is `Some("gzip")`.
pub fn decode(url: &str, compression: Option<&str>) -> Result<Vec<u8>, DecodeError> {
    let rest = url.strip_prefix("data:").ok_or(DecodeError::NotDataUrl)?;
    let (meta, payload) = rest.split_once(',').ok_or(DecodeError::NotDataUrl)?;
    let raw = percent_decode(payload)?;
    let data = if meta.split(';').any(|p| p.eq_ignore_ascii_case("base64")) {
        let compact: Vec<u8> = raw.into_iter().filter(|b| !b.is_ascii_whitespace()).collect();
        STANDARD.decode(compact).map_err(|_| DecodeError::BadBase64)?
    } else {
        raw
    };
    match compression {
        None | Some("") => Ok(data),
        Some("gzip") => {
            let mut out = Vec::new();
            let limit = u64::try_from(MAX_DECODED_BYTES).unwrap_or(u64::MAX).saturating_add(1);
            GzDecoder::new(data.as_slice())
                .take(limit)
                .read_to_end(&mut out)
                .map_err(|_| DecodeError::BadCompression)?;
            if out.len() > MAX_DECODED_BYTES {
                return Err(DecodeError::TooLarge);
            }
            Ok(out)
        }
        Some(_) => Err(DecodeError::BadCompression),
    }
}

fn percent_decode(s: &str) -> Result<Vec<u8>, DecodeError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hi = bytes.get(i + 1).and_then(|b| char::from(*b).to_digit(16));
            let lo = bytes.get(i + 2).and_then(|b| char::from(*b).to_digit(16));
            match (hi, lo) {
                (Some(hi), Some(lo)) => out.push(u8::try_from(hi * 16 + lo).map_err(|_| DecodeError::BadEscape(i))?),
                _ => return Err(DecodeError::BadEscape(i)),
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_text_is_percent_encoded() {
        let e = encode(b"node-1\n", true);
        assert_eq!(e.source, "data:,node-1%0A");
        assert_eq!(e.compression, None);
        let e = encode(b"[Service]\nEnvironment=\"A=b c+d%\"", true);
        assert_eq!(e.source, "data:,%5BService%5D%0AEnvironment=%22A=b%20c%2Bd%25%22");
        assert_eq!(decode(&e.source, None).unwrap(), b"[Service]\nEnvironment=\"A=b c+d%\"");
    }

    #[test]
    fn large_repetitive_text_is_gzipped_and_deterministic() {
        let text = "address1=10.0.0.1/24\n".repeat(40);
        let a = encode(text.as_bytes(), true);
        let b = encode(text.as_bytes(), true);
        assert_eq!(a, b);
        assert_eq!(a.compression, Some("gzip"));
        assert!(a.source.starts_with("data:;base64,"));
        assert_eq!(decode(&a.source, a.compression).unwrap(), text.as_bytes());
        let plain = encode(text.as_bytes(), false);
        assert_eq!(plain.compression, None);
        assert!(plain.source.len() > a.source.len());
    }

    #[test]
    fn decode_errors() {
        assert_eq!(decode("https://x", None), Err(DecodeError::NotDataUrl));
        assert_eq!(decode("data:abc", None), Err(DecodeError::NotDataUrl));
        assert_eq!(decode("data:,%zz", None), Err(DecodeError::BadEscape(0)));
        assert_eq!(decode("data:,%4", None), Err(DecodeError::BadEscape(0)));
        assert_eq!(decode("data:;base64,!!!", None), Err(DecodeError::BadBase64));
        assert_eq!(decode("data:,abc", Some("gzip")), Err(DecodeError::BadCompression));
        assert_eq!(decode("data:,abc", Some("xz")), Err(DecodeError::BadCompression));
        assert_eq!(
            decode("data:text/plain;charset=utf-8;base64,aGk=", None).unwrap(),
            b"hi"
        );
    }

    proptest! {
        #[test]
        fn round_trip(data in proptest::collection::vec(any::<u8>(), 0..2048), gz in any::<bool>()) {
            let e = encode(&data, gz);
            prop_assert!(e.source.is_ascii());
            prop_assert_eq!(decode(&e.source, e.compression).unwrap(), data);
        }

        #[test]
        fn decode_never_panics(s in ".{0,64}", gz in any::<bool>()) {
            let _ = decode(&s, gz.then_some("gzip"));
        }
    }
}
