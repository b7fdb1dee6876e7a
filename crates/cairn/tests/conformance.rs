//! The backend conformance suite (`cairn::testkit`) run against the core's
//! own backends: session files and memory. `cairn-sqlite` runs the same
//! suite in its own tests.

mod file {
    cairn::conformance_tests!(cairn::testkit::FileFixture::new);
}

mod memory {
    cairn::conformance_tests!(cairn::testkit::MemoryFixture::new);
}

/// The suite must be able to fail: backends with one flaw each are caught
/// by the checks that cover that flaw.
mod flawed {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::sync::Arc;

    use cairn::testkit::{self, Check, Fixture, Interrupted};
    use cairn::{Access, Backend, Log, Opened, Opening, Stamp, Visitor};
    use cairn::{AppendError, MemoryBackend, OpenError, ReadError, SessionId, StoreError};

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Flaw {
        /// Acknowledges every tenth record without storing it.
        LosesRecords,
        /// Says no writer holds any session.
        HidesWriters,
        /// Reports the same stamp whatever happens to the log.
        FrozenStamp,
    }

    #[derive(Debug)]
    struct FlawedBackend {
        inner: MemoryBackend,
        flaw: Flaw,
    }

    #[derive(Debug)]
    struct FlawedLog {
        inner: Box<dyn Log>,
        flaw: Flaw,
    }

    impl Log for FlawedLog {
        fn location(&self) -> &str {
            self.inner.location()
        }
        fn len(&self) -> u64 {
            self.inner.len()
        }
        fn read(&self, seq: u64) -> Result<Vec<u8>, ReadError> {
            self.inner.read(seq)
        }
        fn append(&self, lines: &[Vec<u8>]) -> Result<(), AppendError> {
            if self.flaw == Flaw::LosesRecords && self.inner.len() % 10 == 9 {
                return Ok(());
            }
            self.inner.append(lines)
        }
        fn sync(&self) -> Result<(), AppendError> {
            self.inner.sync()
        }
        fn is_writer(&self) -> bool {
            self.inner.is_writer()
        }
        fn byte_len(&self) -> u64 {
            self.inner.byte_len()
        }
    }

    impl Backend for FlawedBackend {
        fn describe(&self) -> String {
            self.inner.describe()
        }
        fn location(&self, id: &SessionId) -> String {
            self.inner.location(id)
        }
        fn create(&self, id: &SessionId, header: &[u8]) -> Result<Box<dyn Log>, OpenError> {
            let inner = self.inner.create(id, header)?;
            Ok(Box::new(FlawedLog {
                inner,
                flaw: self.flaw,
            }))
        }
        fn open(&self, id: &SessionId, access: Access, visit: &mut Visitor<'_>) -> Opening {
            let opened = self.inner.open(id, access, visit)?;
            Ok(Opened {
                log: Box::new(FlawedLog {
                    inner: opened.log,
                    flaw: self.flaw,
                }),
                torn: opened.torn,
            })
        }
        fn list(&self) -> Result<Vec<SessionId>, StoreError> {
            self.inner.list()
        }
        fn stamp(&self, id: &SessionId) -> Result<Stamp, StoreError> {
            let stamp = self.inner.stamp(id)?;
            if self.flaw == Flaw::FrozenStamp {
                return Ok(Stamp {
                    len: 1,
                    modified_ns: 1,
                });
            }
            Ok(stamp)
        }
        fn writer_active(&self, id: &SessionId) -> bool {
            self.flaw != Flaw::HidesWriters && self.inner.writer_active(id)
        }
        fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
            self.inner.remove(id)
        }
        fn load_catalog(&self) -> Option<cairn::Catalog> {
            self.inner.load_catalog()
        }
        fn save_catalog(&self, catalog: &cairn::Catalog) {
            self.inner.save_catalog(catalog);
        }
    }

    struct Flawed(MemoryBackend, Flaw);

    impl Fixture for Flawed {
        fn name(&self) -> String {
            format!("memory with the flaw {:?}", self.1)
        }
        fn backend(&self) -> Arc<dyn Backend> {
            Arc::new(FlawedBackend {
                inner: self.0.clone(),
                flaw: self.1,
            })
        }
        fn reopen(&self) -> Arc<dyn Backend> {
            self.backend()
        }
        fn interrupt_append(&self, _: &SessionId, _: &[u8]) -> Interrupted {
            Interrupted::Atomic
        }
    }

    fn fails(flaw: Flaw, check: Check) -> bool {
        let fixture = Flawed(MemoryBackend::new(), flaw);
        catch_unwind(AssertUnwindSafe(|| check(&fixture))).is_err()
    }

    #[test]
    fn the_suite_catches_a_backend_that_loses_acknowledged_records() {
        assert!(fails(
            Flaw::LosesRecords,
            testkit::every_durability_mode_keeps_acknowledged_records
        ));
        assert!(fails(
            Flaw::LosesRecords,
            testkit::eight_threads_in_group_mode_lose_nothing
        ));
        assert!(fails(
            Flaw::LosesRecords,
            testkit::every_record_kind_round_trips_byte_for_byte
        ));
    }

    #[test]
    fn the_suite_catches_a_backend_that_hides_its_writers() {
        assert!(fails(
            Flaw::HidesWriters,
            testkit::a_second_writer_is_refused_naming_the_holder
        ));
        assert!(fails(
            Flaw::HidesWriters,
            testkit::operation_records_and_verdicts_survive_reopen
        ));
    }

    #[test]
    fn the_suite_catches_a_stale_listing_cache() {
        assert!(fails(
            Flaw::FrozenStamp,
            testkit::stamp_changes_whenever_the_log_changes
        ));
        assert!(fails(
            Flaw::FrozenStamp,
            testkit::listing_is_newest_first_with_counts_titles_and_status
        ));
    }

    #[test]
    fn an_honest_backend_passes_the_same_checks() {
        let honest = cairn::testkit::MemoryFixture::new();
        testkit::every_durability_mode_keeps_acknowledged_records(&honest);
    }
}
