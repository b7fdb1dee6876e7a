//! Ctrl-C and termination signals. The first Ctrl-C interrupts what the
//! agent is doing (the model's stream, a running tool, a backoff wait); a
//! second press before the agent has reacted exits the process at once.
//! SIGTERM and SIGHUP interrupt the same way (the running tool's process
//! group is killed, its result recorded as interrupted, the operation
//! closed), and then the agent exits with 128 + the signal's number; with
//! nothing running it exits at once. Exiting is safe at any moment: the log
//! is the truth, and `--resume` recovers whatever was in flight.
//!
//! [`Interrupt`] is a plain shared flag, so tests trigger it without
//! signals; [`Interrupt::install_signals`] wires it to SIGINT, SIGTERM and
//! SIGHUP (on a thread of its own, so the handler may print and exit).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// Exit status after a second Ctrl-C (128 + SIGINT).
pub const EXIT_INTERRUPTED: i32 = 130;

/// Whether a process-wide handler was installed (one per process).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The agent stopped because of a termination signal (SIGTERM, SIGHUP): what
/// was running was interrupted and recorded; the process should exit with
/// [`Terminated::exit_code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "stopped by {}: the running step was interrupted and recorded, and the operation closed; `cairn agent --continue` picks the session up",
    signal_name(*.0)
)]
pub struct Terminated(pub i32);

impl Terminated {
    /// 128 + the signal's number, as a shell reports a death by that signal.
    pub fn exit_code(self) -> u8 {
        u8::try_from(128 + self.0).unwrap_or(u8::MAX)
    }
}

/// A shared interrupt flag: the number of presses not yet handled.
#[derive(Debug, Clone, Default)]
pub struct Interrupt {
    presses: Arc<AtomicU32>,
    /// The process group of the command running now (0: none), killed on exit.
    group: Arc<AtomicU32>,
    /// The termination signal received (0: none); it outlives [`Interrupt::clear`].
    terminated: Arc<AtomicI32>,
    /// Whether the agent is waiting for the person (a termination signal then exits at once).
    idle: Arc<AtomicBool>,
}

impl Interrupt {
    /// A flag nobody has set.
    pub fn new() -> Interrupt {
        Interrupt::default()
    }

    /// Wires the flag to SIGINT (Ctrl-C), SIGTERM and SIGHUP. Ctrl-C sets it;
    /// a second Ctrl-C before [`Interrupt::clear`] prints a note and exits
    /// with 130. SIGTERM and SIGHUP set it and mark the flag terminated
    /// ([`Interrupt::terminated`]); with the agent idle, or on a second
    /// signal, they exit at once with 128 + the signal's number.
    ///
    /// # Errors
    ///
    /// When handlers were already installed in this process, or the signals
    /// cannot be registered.
    pub fn install_signals(&self) -> std::io::Result<()> {
        if INSTALLED.swap(true, Ordering::SeqCst) {
            return Err(std::io::Error::other(
                "signal handlers are already installed in this process",
            ));
        }
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
        let me = self.clone();
        std::thread::Builder::new()
            .name("cairn-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    me.on_signal(signal);
                }
            })?;
        Ok(())
    }

    fn on_signal(&self, signal: i32) {
        let n = self.presses.fetch_add(1, Ordering::SeqCst) + 1;
        if signal == SIGINT {
            if n >= 2 {
                kill_group(self.group.load(Ordering::SeqCst));
                eprintln!(
                    "\ninterrupted again: exiting. The session is safe: `cairn agent --continue` picks it up."
                );
                std::process::exit(EXIT_INTERRUPTED);
            }
            eprintln!("\ninterrupting… (press Ctrl-C again to quit)");
            return;
        }
        let first = self.terminated.swap(signal, Ordering::SeqCst) == 0;
        if !first || self.idle.load(Ordering::SeqCst) {
            kill_group(self.group.load(Ordering::SeqCst));
            eprintln!(
                "\n{}: exiting. The session is safe: `cairn agent --continue` picks it up.",
                signal_name(signal)
            );
            std::process::exit(i32::from(Terminated(signal).exit_code()));
        }
        eprintln!(
            "\n{}: stopping what runs, recording it, then exiting",
            signal_name(signal)
        );
    }

    /// Records the process group of the command running now (`None`: none),
    /// so that exiting on a second Ctrl-C does not leave it running.
    pub fn set_running_group(&self, pgid: Option<u32>) {
        self.group.store(pgid.unwrap_or(0), Ordering::SeqCst);
    }

    /// Marks the agent as waiting for the person (`true`) or working: a
    /// termination signal while it waits exits at once, there being nothing
    /// to stop or record.
    pub fn set_idle(&self, idle: bool) {
        self.idle.store(idle, Ordering::SeqCst);
    }

    /// Sets the flag, as one Ctrl-C press would (without the exit on a second).
    pub fn trigger(&self) {
        self.presses.fetch_add(1, Ordering::SeqCst);
    }

    /// Sets the flag as a termination signal would (without exiting): what
    /// runs is interrupted and [`Interrupt::terminated`] reports the signal.
    pub fn terminate(&self, signal: i32) {
        self.terminated.store(signal, Ordering::SeqCst);
        self.trigger();
    }

    /// Whether an interrupt is pending.
    pub fn is_set(&self) -> bool {
        self.presses.load(Ordering::SeqCst) > 0
    }

    /// The termination signal received, if any: the agent should stop once
    /// what ran is recorded.
    pub fn terminated(&self) -> Option<Terminated> {
        match self.terminated.load(Ordering::SeqCst) {
            0 => None,
            s => Some(Terminated(s)),
        }
    }

    /// `Err(Terminated)` once a termination signal was received.
    ///
    /// # Errors
    ///
    /// [`Terminated`], when a termination signal was received.
    pub fn check_terminated(&self) -> Result<(), Terminated> {
        self.terminated().map_or(Ok(()), Err)
    }

    /// Who or what interrupted, for the records: `the person (Ctrl-C)`,
    /// or the termination signal's name.
    pub fn cause(&self) -> String {
        match self.terminated.load(Ordering::SeqCst) {
            0 => "the person (Ctrl-C)".to_owned(),
            s => signal_name(s),
        }
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

/// `SIGTERM`, `SIGHUP`, `SIGINT`, or `signal N`.
fn signal_name(signal: i32) -> String {
    match signal {
        SIGTERM => "SIGTERM".to_owned(),
        SIGHUP => "SIGHUP".to_owned(),
        SIGINT => "SIGINT".to_owned(),
        n => format!("signal {n}"),
    }
}

/// Sends SIGKILL to process group `pgid` (nothing for 0).
pub(crate) fn kill_group(pgid: u32) {
    let group = i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    if let Some(group) = group {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
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

    #[test]
    fn a_termination_outlives_clear_and_names_its_signal() {
        let i = Interrupt::new();
        assert_eq!(i.cause(), "the person (Ctrl-C)");
        assert_eq!(i.check_terminated(), Ok(()));
        i.terminate(SIGTERM);
        assert!(i.is_set());
        i.clear();
        assert!(!i.is_set());
        assert_eq!(i.terminated(), Some(Terminated(SIGTERM)));
        assert_eq!(i.cause(), "SIGTERM");
        assert_eq!(Terminated(SIGTERM).exit_code(), 143);
        assert_eq!(Terminated(SIGHUP).exit_code(), 129);
        assert!(
            Terminated(SIGHUP)
                .to_string()
                .starts_with("stopped by SIGHUP")
        );
    }
}
