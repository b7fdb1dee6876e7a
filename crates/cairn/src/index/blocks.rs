//! Where an index's bytes come from ([`IndexBytes`]) and its checksummed
//! blocks ([`Blocks`]): each read, checksummed and checked when first
//! needed, then kept. The first block that does not verify is noted in the
//! index's shared [`Damage`]; from then on nothing more is read from it.

use std::fmt;
use std::io;
use std::sync::{Arc, OnceLock};

/// Where a persisted index's bytes are read from, a range at a time (a
/// file: `pread`; the SQL backends: the bytes loaded from their table).
pub trait IndexBytes: Send + Sync + fmt::Debug {
    /// The length in bytes.
    fn len(&self) -> u64;

    /// Whether it holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` with the bytes at `offset`.
    ///
    /// # Errors
    ///
    /// Any I/O error; [`io::ErrorKind::UnexpectedEof`] past the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// Removes the stored index, found damaged, so that the next open
    /// rebuilds it from the log; returns whether it did. Best effort (it is
    /// only a cache). The default removes nothing.
    fn discard(&self) -> bool {
        false
    }
}

impl IndexBytes for Vec<u8> {
    fn len(&self) -> u64 {
        self.as_slice().len() as u64
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let at = usize::try_from(offset).map_err(io::Error::other)?;
        let src = self
            .get(at..at.saturating_add(buf.len()))
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "past the end"))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// The first problem found in an index's blocks after it was opened, shared
/// by everything read from it: once set, nothing more is read from it.
pub(crate) type Damage = Arc<OnceLock<String>>;

/// One block: where it is and the CRC-32C it must have.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) at: u64,
    pub(super) len: u32,
    pub(super) crc: u32,
}

/// Blocks of one section, each read and checked when first needed and
/// then kept.
#[derive(Debug)]
pub(super) struct Blocks {
    src: Arc<dyn IndexBytes>,
    spans: Vec<Span>,
    cache: Vec<OnceLock<Option<Box<[u8]>>>>,
    what: &'static str,
    pub(super) damage: Damage,
}

impl Blocks {
    pub(super) fn new(
        src: &Arc<dyn IndexBytes>,
        spans: Vec<Span>,
        what: &'static str,
        damage: &Damage,
    ) -> Blocks {
        Blocks {
            src: Arc::clone(src),
            cache: (0..spans.len()).map(|_| OnceLock::new()).collect(),
            spans,
            what,
            damage: Arc::clone(damage),
        }
    }

    /// Block `k`, read, checksummed and checked by `check` on first use;
    /// `None` (and the damage noted) when it cannot be read or does not
    /// verify, or when the index was already found damaged.
    pub(super) fn get(
        &self,
        k: usize,
        check: impl FnOnce(&[u8]) -> Result<(), String>,
    ) -> Option<&[u8]> {
        let slot = self.cache.get(k)?;
        let block = slot.get_or_init(|| {
            if self.damage.get().is_some() {
                return None;
            }
            let span = self.spans[k];
            let mut buf = vec![0u8; span.len as usize];
            let problem = match self.src.read_at(&mut buf, span.at) {
                Err(e) => Some(format!("its {} block {k} cannot be read ({e})", self.what)),
                Ok(()) if crc32c::crc32c(&buf) != span.crc => Some(format!(
                    "its {} block {k} does not match its checksum (damaged)",
                    self.what
                )),
                Ok(()) => check(&buf)
                    .err()
                    .map(|why| format!("its {} block {k} is inconsistent ({why})", self.what)),
            };
            match problem {
                None => Some(buf.into_boxed_slice()),
                Some(p) => {
                    let fix = if self.src.discard() {
                        "it was removed: the next open rebuilds it from the log"
                    } else {
                        "delete it (it is only a cache) and reopen: the open rebuilds it"
                    };
                    let _ = self.damage.set(format!("{p}; {fix}"));
                    None
                }
            }
        });
        block.as_deref()
    }
}
