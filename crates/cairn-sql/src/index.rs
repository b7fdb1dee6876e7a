//! A persisted index loaded from a SQL backend's `indexes` table: its bytes
//! held in memory and read a block at a time by the core, and how to remove
//! its row when a block of it is found damaged (`IndexBytes::discard`), so
//! that the next open rebuilds it from the records instead of meeting the
//! same damage again.

use std::fmt;
use std::io;

use cairn::IndexBytes;

/// The bytes of one session's `indexes` row and a way to delete that row.
pub struct LoadedIndex {
    bytes: Vec<u8>,
    remove: Box<dyn Fn() -> bool + Send + Sync>,
}

impl LoadedIndex {
    /// `bytes` as loaded; `remove` deletes the session's `indexes` row and
    /// says whether it did (best effort: the index is only a cache).
    pub fn new(bytes: Vec<u8>, remove: impl Fn() -> bool + Send + Sync + 'static) -> LoadedIndex {
        LoadedIndex {
            bytes,
            remove: Box::new(remove),
        }
    }
}

impl fmt::Debug for LoadedIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedIndex")
            .field("len", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

impl IndexBytes for LoadedIndex {
    fn len(&self) -> u64 {
        IndexBytes::len(&self.bytes)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.bytes.read_at(buf, offset)
    }

    fn discard(&self) -> bool {
        // A writer may have saved a good index meanwhile: removing that
        // costs one rebuild, never a wrong record.
        (self.remove)()
    }
}
