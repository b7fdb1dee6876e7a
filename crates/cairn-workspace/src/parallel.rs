//! Running one file-system step (write, sync, rename, remove) on many
//! files from a few threads at once. On a busy file system each such step
//! mostly waits — for the journal to commit, for the device to flush — and
//! one file after another those waits add up; side by side they overlap
//! (the journal commits many files at once, the device merges its queue).
//! Each file's own step is as atomic and as durable as it is alone.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::WorkspaceError;

/// Threads at most (the calling thread included).
const THREADS: usize = 16;
/// A thread for every this many items.
const ITEMS_PER_THREAD: usize = 8;

/// `each` on every item, from up to [`THREADS`] threads; the results in no
/// particular order. After a failure no new item is started; the first
/// error is returned (items already done stay done).
pub(crate) fn each<T: Sync, R: Send>(
    items: &[T],
    each: impl Fn(&T) -> Result<R, WorkspaceError> + Sync,
) -> Result<Vec<R>, WorkspaceError> {
    let threads = items.len().div_ceil(ITEMS_PER_THREAD).min(THREADS);
    if threads <= 1 {
        return items.iter().map(each).collect();
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let work = || -> Result<Vec<R>, WorkspaceError> {
        let mut done = Vec::new();
        while !failed.load(Ordering::Relaxed) {
            let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) else {
                break;
            };
            match each(item) {
                Ok(r) => done.push(r),
                Err(e) => {
                    failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(done)
    };
    std::thread::scope(|scope| {
        // A thread that cannot be started leaves its share to the others
        // (the calling thread works too).
        let helpers: Vec<_> = (1..threads)
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, work).ok())
            .collect();
        let mut results = vec![work()];
        for h in helpers {
            results.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        let mut out = Vec::with_capacity(items.len());
        for r in results {
            out.extend(r?);
        }
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_is_done_once_and_an_error_is_returned() {
        let items: Vec<u32> = (0..100).collect();
        let mut out = each(&items, |i| Ok(i * 2)).unwrap();
        out.sort_unstable();
        assert_eq!(out, (0..100).map(|i| i * 2).collect::<Vec<_>>());
        let e = each(&items, |i| {
            if *i == 37 {
                Err(WorkspaceError::Encode("item 37".into()))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert!(e.to_string().contains("item 37"), "{e}");
    }
}
