//! An in-memory backend: sessions live as long as the [`MemoryBackend`]
//! value (and its clones). Every write is "durable" at once; the writer lock
//! is per session, within the process. Used by tests and by hosts that want
//! cairn's tree and projection without storage.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::{Access, Backend, Catalog, Log, Opened, Opening, RawLine, Stamp, Visitor};
use crate::error::{AppendError, OpenError, ReadError, StoreError};
use crate::id::SessionId;

/// Sessions held in memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryBackend {
    inner: Arc<Mutex<Shared>>,
}

#[derive(Debug, Default)]
struct Shared {
    sessions: BTreeMap<SessionId, Arc<MemSession>>,
    catalog: Option<Catalog>,
}

#[derive(Debug, Default)]
struct MemSession {
    lines: Mutex<Vec<Vec<u8>>>,
    locked: AtomicBool,
    version: std::sync::atomic::AtomicU64,
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> MemoryBackend {
        MemoryBackend::default()
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, id: &SessionId) -> Option<Arc<MemSession>> {
        self.shared().sessions.get(id).cloned()
    }

    fn take_lock(&self, id: &SessionId, s: &Arc<MemSession>) -> Result<(), OpenError> {
        if s.locked.swap(true, Ordering::AcqRel) {
            return Err(OpenError::InUse {
                session: id.to_string(),
                holder: Some(std::process::id()),
            });
        }
        Ok(())
    }

    /// Replaces a session's raw lines (tests use it to plant damage).
    pub fn put_raw(&self, id: &SessionId, lines: Vec<Vec<u8>>) {
        let s = Arc::new(MemSession {
            lines: Mutex::new(lines),
            ..MemSession::default()
        });
        self.shared().sessions.insert(id.clone(), s);
    }

    /// A session's raw lines.
    pub fn raw(&self, id: &SessionId) -> Option<Vec<Vec<u8>>> {
        self.get(id).map(|s| {
            s.lines
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }
}

impl Backend for MemoryBackend {
    fn describe(&self) -> String {
        "memory".to_owned()
    }

    fn location(&self, id: &SessionId) -> String {
        format!("memory:{id}")
    }

    fn create(&self, id: &SessionId, header: &[u8]) -> Result<Box<dyn Log>, OpenError> {
        let mut shared = self.shared();
        if shared.sessions.contains_key(id) {
            return Err(OpenError::AlreadyExists {
                session: id.to_string(),
                location: self.describe(),
            });
        }
        let s = Arc::new(MemSession {
            lines: Mutex::new(vec![header.to_vec()]),
            locked: AtomicBool::new(true),
            version: Default::default(),
        });
        shared.sessions.insert(id.clone(), s.clone());
        Ok(Box::new(MemLog {
            location: self.location(id),
            session: s,
            writer: true,
        }))
    }

    fn open(&self, id: &SessionId, access: Access, visit: &mut Visitor<'_>) -> Opening {
        let location = self.location(id);
        let s = self.get(id).ok_or_else(|| OpenError::NotFound {
            session: id.to_string(),
            location: self.describe(),
        })?;
        let writer = access == Access::Write;
        if writer {
            self.take_lock(id, &s)?;
        }
        let log = MemLog {
            location: location.clone(),
            session: s.clone(),
            writer,
        };
        let lines = s
            .lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if lines.is_empty() {
            return Err(OpenError::NotASession {
                location,
                problem: "the session is empty".into(),
            });
        }
        for (i, line) in lines.iter().enumerate() {
            if let Err(d) = crate::frame::check(line) {
                return Err(OpenError::Damaged(Box::new(crate::error::Damage {
                    location,
                    line: i as u64 + 1,
                    offset: 0,
                    problem: d.to_string(),
                })));
            }
            visit(RawLine {
                index: i as u64,
                offset: 0,
                bytes: line,
            })?;
        }
        Ok(Opened {
            log: Box::new(log),
            torn: None,
        })
    }

    fn stored_lines(&self, id: &SessionId) -> Result<Vec<Vec<u8>>, OpenError> {
        self.raw(id).ok_or_else(|| OpenError::NotFound {
            session: id.to_string(),
            location: self.describe(),
        })
    }

    fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        Ok(self.shared().sessions.keys().cloned().collect())
    }

    fn stamp(&self, id: &SessionId) -> Result<Stamp, StoreError> {
        let s = self.get(id).ok_or_else(|| StoreError::NoSuchSession {
            query: id.to_string(),
            store: self.describe(),
        })?;
        let len = s.lines.lock().unwrap_or_else(PoisonError::into_inner).len() as u64;
        Ok(Stamp {
            len,
            modified_ns: u128::from(s.version.load(Ordering::Acquire)),
        })
    }

    fn writer_active(&self, id: &SessionId) -> bool {
        self.get(id)
            .is_some_and(|s| s.locked.load(Ordering::Acquire))
    }

    fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        let mut shared = self.shared();
        match shared.sessions.get(id) {
            None => Err(StoreError::NoSuchSession {
                query: id.to_string(),
                store: "memory".into(),
            }),
            Some(s) if s.locked.load(Ordering::Acquire) => Err(OpenError::InUse {
                session: id.to_string(),
                holder: Some(std::process::id()),
            }
            .into()),
            Some(_) => {
                shared.sessions.remove(id);
                Ok(())
            }
        }
    }

    fn load_catalog(&self) -> Option<Catalog> {
        self.shared().catalog.clone()
    }

    fn save_catalog(&self, catalog: &Catalog) {
        self.shared().catalog = Some(catalog.clone());
    }
}

#[derive(Debug)]
struct MemLog {
    location: String,
    session: Arc<MemSession>,
    writer: bool,
}

impl Drop for MemLog {
    fn drop(&mut self) {
        if self.writer {
            self.session.locked.store(false, Ordering::Release);
        }
    }
}

impl Log for MemLog {
    fn location(&self) -> &str {
        &self.location
    }

    fn len(&self) -> u64 {
        self.session
            .lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len() as u64
    }

    fn read(&self, seq: u64) -> Result<Vec<u8>, ReadError> {
        let lines = self
            .session
            .lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        usize::try_from(seq)
            .ok()
            .and_then(|i| lines.get(i))
            .cloned()
            .ok_or(ReadError::NoSuchRecord(seq))
    }

    fn append(&self, new: &[Vec<u8>]) -> Result<(), AppendError> {
        if !self.writer {
            return Err(AppendError::ReadOnly {
                session: self.location.clone(),
            });
        }
        self.session
            .lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(new.iter().cloned());
        self.session.version.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    fn sync(&self) -> Result<(), AppendError> {
        if !self.writer {
            return Err(AppendError::ReadOnly {
                session: self.location.clone(),
            });
        }
        Ok(())
    }

    fn is_writer(&self) -> bool {
        self.writer
    }

    fn byte_len(&self) -> u64 {
        self.session
            .lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|l| l.len() as u64)
            .sum()
    }
}
