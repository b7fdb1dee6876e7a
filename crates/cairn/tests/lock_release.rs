//! The writer lock after a writer lets go: a lock can stay held for an
//! instant by someone who is not a writer (a forked child that inherited the
//! descriptor until it calls exec, or a listing's probe), and a reopen in that
//! instant must wait it out instead of reporting "in use".

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use cairn::{Access, EntryBody, Message, NewSession, OpenError, Role, Store};

#[test]
fn regression_a_reopen_right_after_a_close_saw_in_use_while_the_lock_was_held_for_an_instant() {
    let home = tempfile::tempdir().expect("temp dir");
    let store = Store::open_dir(home.path());
    let session = store.create(NewSession::default()).expect("create");
    let id = session.id().clone();
    drop(session);
    let lock_path = home.path().join("sessions").join(format!("{id}.lock"));

    // Another open file description of the lock file takes the lock for 20 ms
    // at a time, as a child between fork and exec or a slow probe would.
    let stop = Arc::new(AtomicBool::new(false));
    let holder = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let f = File::open(&lock_path).expect("open the lock file");
            let mut held = 0u32;
            while !stop.load(Ordering::Relaxed) {
                if f.try_lock().is_ok() {
                    held += 1;
                    thread::sleep(Duration::from_millis(20));
                    f.unlock().expect("unlock");
                    // Then leave it alone for a while, as such holders do.
                    thread::sleep(Duration::from_millis(40));
                }
                thread::sleep(Duration::from_millis(1));
            }
            held
        })
    };

    for i in 0..20 {
        let s = match store.open(&id, Access::Write) {
            Ok(s) => s,
            Err(e @ OpenError::InUse { .. }) => {
                panic!("reopen {i} saw a momentary holder as a writer: {e}")
            }
            Err(e) => panic!("reopen {i}: {e}"),
        };
        s.append(EntryBody::Message(Message::text(Role::User, "again")))
            .expect("append");
        drop(s);
        // Give the holder its instant between this close and the next open.
        thread::sleep(Duration::from_millis(3));
    }
    stop.store(true, Ordering::Relaxed);
    let held = holder.join().expect("holder thread");
    assert!(
        held > 0,
        "the holder never took the lock, so nothing was tested"
    );
    let s = store.open(&id, Access::Read).expect("read");
    assert_eq!(s.context().messages().len(), 20);
}

#[test]
fn a_writer_that_really_holds_the_lock_still_makes_a_second_writer_see_in_use() {
    let home = tempfile::tempdir().expect("temp dir");
    let store = Store::open_dir(home.path());
    let first = store.create(NewSession::default()).expect("create");
    let second = store.open(first.id(), Access::Write);
    assert!(
        matches!(second, Err(OpenError::InUse { holder: Some(pid), .. }) if pid == std::process::id()),
        "a second writer must be refused while the first holds the session"
    );
}
