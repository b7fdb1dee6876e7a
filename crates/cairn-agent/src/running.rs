//! Resume's look at tool processes: before a call that may have run (T1
//! without T2) is decided, the processes recorded for it
//! ([`crate::fence`]) are checked, and any that still runs is waited for or
//! stopped ([`OnRunning`]) — so a re-run never starts beside the run it
//! repeats.
//!
//! This is the seam between the core's pure verdict and the machine. The
//! verdict (`IndeterminateTool`: the call *may have run*) is a function of
//! the log; whether its process still runs is a fact checked here, at
//! resume time, by the resolver the core's loop
//! ([`cairn::recover_with`]) asks: the agent's resolver
//! ([`crate::recovery`]) calls [`settle`] before it decides such a call,
//! and `cairn recover` wraps its own resolver in [`Fenced`], which does
//! the same. What was found and done is recorded ([`fence::Ended`]), and
//! when the process ran to its end and wrote its exit status, its own
//! output becomes the call's result: the outcome is no longer unknown.

use std::path::PathBuf;

use cairn::{
    Action, AppendError, Block, Decision, Pending, Resolver, Session, ToolOutput, ToolRunner,
    Verdict,
};

use crate::fence::{self, Ended, How, Liveness, Started};
use crate::interrupt::Interrupt;
use crate::runtime::OnRunning;
use crate::tools::{ToolEnv, capped_file};

/// How recovery settles a tool process that still runs.
#[derive(Debug, Clone)]
pub struct Fencing {
    /// Wait for it, or stop it.
    pub on_running: OnRunning,
    /// Who decides, for the records (`cairn-agent --on-running wait`).
    pub by: String,
    /// Ctrl-C while waiting stops the process.
    pub interrupt: Interrupt,
    /// Where a long output of a process that ran to its end is kept.
    pub blob_dir: PathBuf,
    /// Bytes of that output shown to the model before capping.
    pub output_cap: usize,
}

/// A recorded process of a pending call, and whether it runs now.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its record.
    pub started: Started,
    /// Whether it runs.
    pub liveness: Liveness,
}

impl Found {
    /// For people: `running: pid 4242 (group 4242), `sleep 3``.
    pub fn describe(&self) -> String {
        let p = &self.started.process;
        let what = format!(
            "pid {} (group {}), `{}`",
            p.pid,
            p.pgid,
            cairn_view::term::excerpt(&self.started.command, 100)
        );
        match &self.liveness {
            Liveness::Running => format!("call {} is running: {what}", self.started.call_id),
            Liveness::Gone => format!("call {}: {what} is not running", self.started.call_id),
            Liveness::Unknown(why) => format!(
                "call {}: whether {what} still runs is unknown: {why}",
                self.started.call_id
            ),
        }
    }
}

/// The recorded processes of the verdict's calls that may have run, each
/// with whether it runs now (what the person is shown before anything is
/// decided). A call whose records cannot be read shows none here; [`settle`]
/// then refuses to take it for one with none.
pub fn survey(session: &Session, verdict: &Verdict) -> Vec<Found> {
    let Verdict::IndeterminateTool { calls, .. } = verdict else {
        return Vec::new();
    };
    calls
        .iter()
        .flat_map(|c| fence::recorded(session, &c.call_id).unwrap_or_default())
        .map(|started| Found {
            liveness: fence::liveness(&started.process),
            started,
        })
        .collect()
}

/// What became of a pending call's recorded processes.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// None ran, or none was recorded: decide the call as usual.
    NoneRunning,
    /// One ran to its end (now, or while the agent was down) and wrote its
    /// exit status (not a signal's: at most 128): its output is the call's
    /// outcome.
    Known(ToolOutput),
    /// One was stopped, or ended without a status: it runs no more; decide
    /// the call as usual.
    Stopped,
    /// One cannot be checked from here (why): a re-run could run beside it.
    Unverifiable(String),
}

/// Settles the processes recorded for `call_id`: each that runs is waited
/// for or stopped as `fencing` says; each that ended is recorded
/// ([`fence::Ended`]). `tell` hears each step as it happens.
///
/// # Errors
///
/// When an `ended` record cannot be written.
pub fn settle(
    session: &Session,
    call_id: &str,
    fencing: &Fencing,
    tell: &mut dyn FnMut(&str),
) -> Result<Settled, AppendError> {
    let recorded = match fence::recorded(session, call_id) {
        Ok(r) => r,
        Err(why) => return Ok(Settled::Unverifiable(why)),
    };
    let mut settled = Settled::NoneRunning;
    for started in recorded {
        let found = Found {
            liveness: fence::liveness(&started.process),
            started,
        };
        let started = &found.started;
        let (how, status) = match &found.liveness {
            Liveness::Unknown(why) => {
                tell(&found.describe());
                settled = Settled::Unverifiable(why.clone());
                continue;
            }
            Liveness::Gone => (How::Gone, fence::exit_status(started)),
            Liveness::Running => {
                tell(&found.describe());
                // A second Ctrl-C or a termination signal, exiting, kills it.
                fencing
                    .interrupt
                    .set_running_group(Some(started.process.pgid));
                let ended = match fencing.on_running {
                    OnRunning::Wait => {
                        tell(&format!(
                            "waiting for pid {} to end (at most until its timeout; Ctrl-C stops it)",
                            started.process.pid
                        ));
                        fence::wait(started, &fencing.interrupt)
                    }
                    OnRunning::Stop => {
                        tell(&format!(
                            "stopping process group {} (SIGTERM, then SIGKILL after {}s)",
                            started.process.pgid,
                            fence::GRACE.as_secs()
                        ));
                        fence::stop(started)
                    }
                };
                fencing.interrupt.set_running_group(None);
                ended
            }
        };
        let ended = Ended {
            call_id: call_id.to_owned(),
            pid: started.process.pid,
            how: how.clone(),
            exit_status: status,
            by: fencing.by.clone(),
        };
        fence::record_ended(session, &ended)?;
        let status_text = status.map_or_else(
            || "no exit status".to_owned(),
            |s| format!("exit status {s}"),
        );
        let pid = started.process.pid;
        match (&how, status) {
            (How::Stopped { signal }, _) => {
                tell(&format!("pid {pid} stopped with {signal} ({status_text})"));
                settled = Settled::Stopped;
            }
            // Above 128: the shell's way of saying a signal ended the
            // command (SIGKILL: 137): it did not run to its end.
            (How::Exited | How::Gone, Some(code)) if code <= 128 => {
                tell(&format!(
                    "pid {pid} ran to its end ({status_text}): its output is the call's result"
                ));
                settled = Settled::Known(outcome(started, code, fencing));
            }
            (How::Exited | How::Gone, _) => {
                if found.liveness == Liveness::Running || status.is_some() {
                    tell(&format!("pid {pid} ended with {status_text}"));
                }
                if settled == Settled::NoneRunning {
                    settled = Settled::Stopped;
                }
            }
        }
        fence::remove_files(started);
    }
    Ok(settled)
}

/// The decision for a call whose processes were settled as `settled`,
/// given the resolver's own `decided`: an outcome now known is recorded,
/// and no re-run starts while a process cannot be checked.
pub fn fenced_decision(settled: Settled, decided: impl FnOnce() -> Decision) -> Decision {
    match settled {
        Settled::Known(out) => Decision::Outcome(out),
        Settled::Unverifiable(_) => match decided() {
            Decision::Rerun { .. } => Decision::MarkUnknown,
            d => d,
        },
        Settled::NoneRunning | Settled::Stopped => decided(),
    }
}

/// The result of a command that ran to its end while no agent watched:
/// its output (capped) and exit status.
fn outcome(started: &Started, code: i32, fencing: &Fencing) -> ToolOutput {
    let mut env = ToolEnv::new(".", &fencing.blob_dir);
    env.output_cap = fencing.output_cap;
    let mut content = vec![Block::Text {
        text: "The agent stopped before this call's result was recorded; the command ran on to its end, and this is its output."
            .to_owned(),
    }];
    match started.output.as_deref().map(|p| capped_file(&env, p)) {
        Some(Ok(blocks)) => content.extend(blocks),
        Some(Err(e)) => content.push(Block::Text {
            text: format!("(its output could not be read: {e})"),
        }),
        None => content.push(Block::Text {
            text: "(its output was not kept)".to_owned(),
        }),
    }
    content.push(Block::Text {
        text: format!("[exit code {code}]"),
    });
    ToolOutput {
        content,
        is_error: code != 0,
        code: None,
    }
}

/// A resolver whose calls that may have run have their recorded processes
/// settled first ([`settle`], [`fenced_decision`]): what `cairn recover`
/// uses around its policy or its prompt.
pub struct Fenced<'a, R> {
    inner: R,
    session: &'a Session,
    fencing: Fencing,
    tell: Box<dyn FnMut(&str) + 'a>,
}

impl<'a, R: Resolver> Fenced<'a, R> {
    /// `inner`, fenced: processes of `session` settled under `fencing`,
    /// each step told to `tell`.
    pub fn new(
        inner: R,
        session: &'a Session,
        fencing: Fencing,
        tell: impl FnMut(&str) + 'a,
    ) -> Fenced<'a, R> {
        Fenced {
            inner,
            session,
            fencing,
            tell: Box::new(tell),
        }
    }
}

impl<R: Resolver> Resolver for Fenced<'_, R> {
    fn decide(&mut self, item: Pending<'_>, can_run: bool) -> Decision {
        let Pending::Indeterminate { call, .. } = item else {
            return self.inner.decide(item, can_run);
        };
        match settle(self.session, &call.call_id, &self.fencing, &mut *self.tell) {
            Ok(settled) => fenced_decision(settled, || self.inner.decide(item, can_run)),
            Err(e) => Decision::Stop(format!(
                "the record of what became of a tool process could not be written: {}",
                cairn::with_causes(&e)
            )),
        }
    }

    fn runner(&mut self) -> Option<&mut dyn ToolRunner> {
        self.inner.runner()
    }

    fn done(&mut self, action: &Action) {
        self.inner.done(action);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_rerun_while_a_process_cannot_be_checked_and_a_known_outcome_is_recorded() {
        let rerun = || Decision::Rerun {
            by: Some("person".to_owned()),
        };
        let unverifiable = Settled::Unverifiable("another host".to_owned());
        assert_eq!(
            fenced_decision(unverifiable.clone(), rerun),
            Decision::MarkUnknown
        );
        assert_eq!(
            fenced_decision(unverifiable, || Decision::Stop("no".to_owned())),
            Decision::Stop("no".to_owned())
        );
        let out = ToolOutput::text("done");
        assert_eq!(
            fenced_decision(Settled::Known(out.clone()), rerun),
            Decision::Outcome(out)
        );
        assert_eq!(fenced_decision(Settled::Stopped, rerun), rerun());
        assert_eq!(fenced_decision(Settled::NoneRunning, rerun), rerun());
    }
}
