//! Asking the person: approvals, what to do about a side effect whose
//! outcome is unknown, and the next input. [`Console`] asks on the terminal
//! with line editing and history (`rustyline`; Ctrl-C at a prompt is an
//! answer, not a signal); [`Batch`] has no one to ask and reads inputs from
//! stdin lines.

use std::io::BufRead;
use std::path::PathBuf;

use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;

use cairn_view::term::clean_line;

/// An answer to an approval prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    /// Run it.
    Yes,
    /// Run it, and everything else this session without asking.
    Always,
    /// Do not run it.
    No,
    /// Ctrl-C at the prompt.
    Interrupted,
    /// Nobody can be asked (no terminal).
    NoOneToAsk,
}

/// What to do with a side-effect call that may or may not have run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnknownChoice {
    /// Run it again.
    Rerun,
    /// Record its outcome as unknown (`TOOL_OUTCOME_UNKNOWN`).
    Mark,
    /// Record what the person says happened.
    Tell(String),
}

/// A line of input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A line.
    Line(String),
    /// Ctrl-C.
    Interrupted,
    /// End of input.
    Eof,
}

/// Asks the person.
pub trait Prompter {
    /// May `summary` (`bash: rm -rf build`) run?
    fn approve(&mut self, summary: &str) -> Approval;
    /// `summary` may or may not have run: what now? `None`: nobody to ask.
    fn unknown_outcome(&mut self, summary: &str) -> Option<UnknownChoice>;
    /// The next input.
    fn read_input(&mut self, prompt: &str) -> Input;
    /// Whether a person is there.
    fn is_interactive(&self) -> bool;
}

/// The terminal, with line editing and history.
pub struct Console {
    editor: DefaultEditor,
    history: Option<PathBuf>,
}

impl Console {
    /// A console keeping its input history in `history`.
    ///
    /// # Errors
    ///
    /// When the terminal cannot be set up.
    pub fn new(history: Option<PathBuf>) -> Result<Console, ReadlineError> {
        let mut editor = DefaultEditor::new()?;
        if let Some(h) = &history {
            let _ = editor.load_history(h);
        }
        Ok(Console { editor, history })
    }

    fn ask(&mut self, prompt: &str) -> Input {
        match self.editor.readline(prompt) {
            Ok(line) => Input::Line(line),
            Err(ReadlineError::Interrupted) => Input::Interrupted,
            Err(_) => Input::Eof,
        }
    }
}

impl Prompter for Console {
    fn approve(&mut self, summary: &str) -> Approval {
        loop {
            match self.ask(&format!(
                "allow {}? [y]es / [n]o / [a]lways: ",
                clean_line(summary)
            )) {
                Input::Line(l) => match l.trim().to_lowercase().as_str() {
                    "y" | "yes" => return Approval::Yes,
                    "a" | "always" => return Approval::Always,
                    "n" | "no" => return Approval::No,
                    _ => {}
                },
                Input::Interrupted => return Approval::Interrupted,
                Input::Eof => return Approval::No,
            }
        }
    }

    fn unknown_outcome(&mut self, summary: &str) -> Option<UnknownChoice> {
        loop {
            let q = format!(
                "`{}` may or may not have run: [r]e-run, mark [u]nknown, or [t]ell what happened: ",
                clean_line(summary)
            );
            match self.ask(&q) {
                Input::Line(l) => match l.trim().to_lowercase().as_str() {
                    "r" | "rerun" | "re-run" => return Some(UnknownChoice::Rerun),
                    "u" | "unknown" | "mark" => return Some(UnknownChoice::Mark),
                    "t" | "tell" => {
                        if let Input::Line(what) = self.ask("what happened? ")
                            && !what.trim().is_empty()
                        {
                            return Some(UnknownChoice::Tell(what.trim().to_owned()));
                        }
                    }
                    _ => {}
                },
                Input::Interrupted | Input::Eof => return Some(UnknownChoice::Mark),
            }
        }
    }

    fn read_input(&mut self, prompt: &str) -> Input {
        let input = self.ask(prompt);
        if let Input::Line(l) = &input
            && !l.trim().is_empty()
        {
            let _ = self.editor.add_history_entry(l.as_str());
            if let Some(h) = &self.history {
                let _ = self.editor.save_history(h);
            }
        }
        input
    }

    fn is_interactive(&self) -> bool {
        true
    }
}

/// No terminal: nobody approves, unknown outcomes follow the policy, inputs
/// are stdin's lines.
#[derive(Debug, Default)]
pub struct Batch;

impl Prompter for Batch {
    fn approve(&mut self, _: &str) -> Approval {
        Approval::NoOneToAsk
    }
    fn unknown_outcome(&mut self, _: &str) -> Option<UnknownChoice> {
        None
    }
    fn read_input(&mut self, _: &str) -> Input {
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => Input::Eof,
            Ok(_) => Input::Line(line.trim_end_matches(['\n', '\r']).to_owned()),
        }
    }
    fn is_interactive(&self) -> bool {
        false
    }
}

/// Canned answers, for tests and scripted runs.
#[derive(Debug, Default)]
pub struct Canned {
    /// Approval answers, in order (then `NoOneToAsk`).
    pub approvals: std::collections::VecDeque<Approval>,
    /// Unknown-outcome answers, in order (then `None`).
    pub unknowns: std::collections::VecDeque<UnknownChoice>,
    /// Inputs, in order (then `Eof`).
    pub inputs: std::collections::VecDeque<Input>,
    /// What was asked, for assertions.
    pub asked: Vec<String>,
}

impl Prompter for Canned {
    fn approve(&mut self, summary: &str) -> Approval {
        self.asked.push(format!("approve {summary}"));
        self.approvals.pop_front().unwrap_or(Approval::NoOneToAsk)
    }
    fn unknown_outcome(&mut self, summary: &str) -> Option<UnknownChoice> {
        self.asked.push(format!("unknown {summary}"));
        self.unknowns.pop_front()
    }
    fn read_input(&mut self, _: &str) -> Input {
        self.inputs.pop_front().unwrap_or(Input::Eof)
    }
    fn is_interactive(&self) -> bool {
        true
    }
}
