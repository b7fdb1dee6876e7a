//! The backend conformance suite (feature `testkit`): the checks every
//! [`Backend`](crate::Backend) must pass, written against the API hosts use ([`Session`],
//! [`Store`](crate::Store), [`recover`](crate::recover)) so that a backend is
//! judged by what a host would see, plus a few checks of the raw seam
//! (the exact lines handed to [`Backend::open`](crate::Backend::open)'s visitor).
//!
//! A backend's tests implement [`Fixture`] — a fresh, empty store per
//! fixture, a second handle onto the same storage (as another process would
//! open it), and hooks that simulate a crash in the middle of an append, a
//! failing disk and damage — and expand [`conformance_tests!`](crate::conformance_tests),
//! which writes one `#[test]` per check:
//!
//! ```ignore
//! cairn::conformance_tests!(cairn::testkit::MemoryFixture::new);
//! ```
//!
//! or call the checks one by one, or all at once with [`run_all`]:
//!
//! ```
//! use cairn::testkit::{self, Fixture, MemoryFixture};
//!
//! testkit::every_record_kind_round_trips_byte_for_byte(&MemoryFixture::new());
//! ```
//!
//! Checks panic with a message naming the backend and what differed, like
//! any test. Hooks a backend cannot provide (a memory store has no disk to
//! fail) return `false` and the checks that need them pass vacuously; each
//! fixture documents which hooks it has.
//!
//! The same module is the toolkit every test crate of the workspace shares:
//! [`vfs`] (one I/O seam whose hooks pass through unless a test overrides
//! them), [`Rng`] (one deterministic random generator), [`build`]
//! (builders of the entries tests append) and [`child`] (a test binary
//! re-running one of its ignored tests as a child process, and the check
//! that a command a test ran succeeded).
//!
//! [`Session`]: crate::Session

pub mod build;
pub mod child;
mod damage;
mod durability;
mod fixture;
mod fixtures;
pub mod indexed;
mod listing;
mod locking;
mod operations;
mod projection;
pub mod recovery;
mod rng;
mod roundtrip;
mod util;
pub mod vfs;

pub use damage::{
    a_bad_record_in_the_middle_is_a_hard_error, a_failed_write_poisons_the_handle,
    a_newer_format_is_refused_and_the_lock_released,
    an_interrupted_append_loses_nothing_acknowledged,
};
pub use durability::{
    eight_threads_in_group_mode_lose_nothing, every_durability_mode_keeps_acknowledged_records,
};
pub use fixture::{Check, Fixture, Interrupted};
pub use fixtures::{FileFixture, MemoryFixture};
pub use listing::{
    listing_is_newest_first_with_counts_titles_and_status,
    remove_deletes_one_session_and_is_refused_while_written,
    stamp_changes_whenever_the_log_changes,
};
pub use locking::{
    a_second_writer_is_refused_naming_the_holder, readers_are_not_blocked_by_a_writer,
};
pub use operations::{
    operation_records_and_verdicts_survive_reopen, recovery_resolves_and_is_deterministic,
};
pub use projection::{
    assert_folds, compaction_and_app_state_are_restored_on_reopen,
    tree_and_projection_equal_the_fold,
};
pub use rng::Rng;
pub use roundtrip::{
    every_record_kind_round_trips_byte_for_byte, large_and_many_records_round_trip,
};

/// Every check, by name, in the order [`run_all`] runs them.
pub const CHECKS: &[(&str, Check)] = &[
    (
        "every_record_kind_round_trips_byte_for_byte",
        every_record_kind_round_trips_byte_for_byte,
    ),
    (
        "large_and_many_records_round_trip",
        large_and_many_records_round_trip,
    ),
    (
        "tree_and_projection_equal_the_fold",
        tree_and_projection_equal_the_fold,
    ),
    (
        "compaction_and_app_state_are_restored_on_reopen",
        compaction_and_app_state_are_restored_on_reopen,
    ),
    (
        "every_durability_mode_keeps_acknowledged_records",
        every_durability_mode_keeps_acknowledged_records,
    ),
    (
        "eight_threads_in_group_mode_lose_nothing",
        eight_threads_in_group_mode_lose_nothing,
    ),
    (
        "a_second_writer_is_refused_naming_the_holder",
        a_second_writer_is_refused_naming_the_holder,
    ),
    (
        "readers_are_not_blocked_by_a_writer",
        readers_are_not_blocked_by_a_writer,
    ),
    (
        "an_interrupted_append_loses_nothing_acknowledged",
        an_interrupted_append_loses_nothing_acknowledged,
    ),
    (
        "a_failed_write_poisons_the_handle",
        a_failed_write_poisons_the_handle,
    ),
    (
        "a_bad_record_in_the_middle_is_a_hard_error",
        a_bad_record_in_the_middle_is_a_hard_error,
    ),
    (
        "a_newer_format_is_refused_and_the_lock_released",
        a_newer_format_is_refused_and_the_lock_released,
    ),
    (
        "operation_records_and_verdicts_survive_reopen",
        operation_records_and_verdicts_survive_reopen,
    ),
    (
        "recovery_resolves_and_is_deterministic",
        recovery_resolves_and_is_deterministic,
    ),
    (
        "listing_is_newest_first_with_counts_titles_and_status",
        listing_is_newest_first_with_counts_titles_and_status,
    ),
    (
        "stamp_changes_whenever_the_log_changes",
        stamp_changes_whenever_the_log_changes,
    ),
    (
        "remove_deletes_one_session_and_is_refused_while_written",
        remove_deletes_one_session_and_is_refused_while_written,
    ),
];

/// Runs every check, each with a fresh fixture from `make`.
///
/// # Panics
///
/// On the first check that fails, naming it.
pub fn run_all(make: &dyn Fn() -> Box<dyn Fixture>) {
    for (name, check) in CHECKS {
        let fixture = make();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&*fixture)));
        if let Err(cause) = result {
            let why = cause
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| cause.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            panic!("{} failed conformance check {name}: {why}", fixture.name());
        }
    }
}

/// Writes one `#[test]` per conformance check, each with a fresh fixture
/// from the given constructor (any expression callable with no arguments
/// that returns a [`Fixture`](crate::testkit::Fixture)), plus a test that
/// the list is complete.
///
/// ```ignore
/// mod memory {
///     cairn::conformance_tests!(cairn::testkit::MemoryFixture::new);
/// }
/// ```
///
/// Attributes after the constructor go on every check's test, e.g. to
/// ignore them by name when a run cannot reach what the fixture needs:
///
/// ```ignore
/// cairn::conformance_tests!(PgFixture::new, #[cfg_attr(skip_postgres, ignore = "why")]);
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!($make, #[doc = "A conformance check."]);
    };
    ($make:expr, $(#[$attr:meta])+) => {
        $crate::conformance_tests!(@each [$(#[$attr])+] $make;
            every_record_kind_round_trips_byte_for_byte,
            large_and_many_records_round_trip,
            tree_and_projection_equal_the_fold,
            compaction_and_app_state_are_restored_on_reopen,
            every_durability_mode_keeps_acknowledged_records,
            eight_threads_in_group_mode_lose_nothing,
            a_second_writer_is_refused_naming_the_holder,
            readers_are_not_blocked_by_a_writer,
            an_interrupted_append_loses_nothing_acknowledged,
            a_failed_write_poisons_the_handle,
            a_bad_record_in_the_middle_is_a_hard_error,
            a_newer_format_is_refused_and_the_lock_released,
            operation_records_and_verdicts_survive_reopen,
            recovery_resolves_and_is_deterministic,
            listing_is_newest_first_with_counts_titles_and_status,
            stamp_changes_whenever_the_log_changes,
            remove_deletes_one_session_and_is_refused_while_written,
        );
    };
    (@each $attrs:tt $make:expr; $($check:ident),* $(,)?) => {
        $(
            $crate::conformance_tests!(@one $attrs $make; $check);
        )*

        #[test]
        fn conformance_tests_cover_every_check() {
            let wired: &[&str] = &[$(stringify!($check)),*];
            let all: Vec<&str> = $crate::testkit::CHECKS.iter().map(|(n, _)| *n).collect();
            assert_eq!(wired, all.as_slice(), "conformance_tests! and testkit::CHECKS differ");
        }
    };
    (@one [$($attr:tt)*] $make:expr; $check:ident) => {
        #[test]
        $($attr)*
        fn $check() {
            let fixture = ($make)();
            $crate::testkit::$check(&fixture);
        }
    };
}
