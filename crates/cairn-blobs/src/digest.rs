//! The digests blobs are named by: SHA-256 in lower-case hex, of bytes or
//! of a stream.

use std::io::{self, Write};

use sha2::{Digest, Sha256};

/// Feeds what is written to a hasher.
struct HashWriter<'a>(&'a mut Sha256);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Whether `s` is 64 lower-case hex digits.
pub fn valid_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The SHA-256 of `bytes`, in lower-case hex: the digest a blob of them
/// is stored under.
pub fn digest(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The digest and size of everything `r` reads, streamed.
///
/// # Errors
///
/// When `r` fails.
pub fn digest_of(r: &mut impl io::Read) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let size = io::copy(r, &mut HashWriter(&mut hasher))?;
    Ok((hex(&hasher.finalize()), size))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}
