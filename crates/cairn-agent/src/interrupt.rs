//! Ctrl-C: the first press interrupts what the agent is doing (the model's
//! stream, a running tool, a backoff wait); a second press before the agent
//! has reacted exits the process at once. Exiting is safe at any moment:
//! the log is the truth, and `--resume` recovers whatever was in flight.
//!
//! [`Interrupt`] is a plain shared flag, so tests trigger it without
//! signals; [`Interrupt::install_ctrlc`] wires it to SIGINT.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Exit status after a second Ctrl-C (128 + SIGINT).
pub const EXIT_INTERRUPTED: i32 = 130;

/// A shared interrupt flag: the number of presses not yet handled.
#[derive(Debug, Clone, Default)]
pub struct Interrupt {
    presses: Arc<AtomicU32>,
    /// The process group of the command running now (0: none), killed on exit.
    group: Arc<AtomicU32>,
}

impl Interrupt {
    /// A flag nobody has set.
    pub fn new() -> Interrupt {
        Interrupt::default()
    }

    /// Wires the flag to Ctrl-C (SIGINT): the first press sets it; a second
    /// press before [`Interrupt::clear`] prints a note and exits with 130.
    ///
    /// # Errors
    ///
    /// When a handler is already installed in this process.
    pub fn install_ctrlc(&self) -> Result<(), ctrlc::Error> {
        let presses = Arc::clone(&self.presses);
        let group = Arc::clone(&self.group);
        ctrlc::set_handler(move || {
            let n = presses.fetch_add(1, Ordering::SeqCst) + 1;
            if n >= 2 {
                kill_group(group.load(Ordering::SeqCst));
                eprintln!(
                    "\ninterrupted again: exiting. The session is safe: `cairn agent --continue` picks it up."
                );
                std::process::exit(EXIT_INTERRUPTED);
            }
            eprintln!("\ninterrupting… (press Ctrl-C again to quit)");
        })
    }

    /// Records the process group of the command running now (`None`: none),
    /// so that exiting on a second Ctrl-C does not leave it running.
    pub fn set_running_group(&self, pgid: Option<u32>) {
        self.group.store(pgid.unwrap_or(0), Ordering::SeqCst);
    }

    /// Sets the flag, as one Ctrl-C press would (without the exit on a second).
    pub fn trigger(&self) {
        self.presses.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether an interrupt is pending.
    pub fn is_set(&self) -> bool {
        self.presses.load(Ordering::SeqCst) > 0
    }

    /// Marks the interrupt as handled.
    pub fn clear(&self) {
        self.presses.store(0, Ordering::SeqCst);
    }

    /// Sleeps for `d`, waking early (returning `true`) when interrupted.
    pub fn sleep(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        loop {
            if self.is_set() {
                return true;
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(20)));
        }
    }
}

/// Kills process group `pgid` (nothing for 0).
pub(crate) fn kill_group(pgid: u32) {
    if pgid == 0 {
        return;
    }
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_wakes_a_sleep_and_clear_resets() {
        let i = Interrupt::new();
        let j = i.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            j.trigger();
        });
        assert!(
            i.sleep(Duration::from_secs(10)),
            "the trigger ends the sleep"
        );
        t.join().unwrap();
        i.clear();
        assert!(!i.is_set());
        assert!(!i.sleep(Duration::from_millis(1)));
    }
}
