//! The CLI's README says what the binary does: its command table names every
//! command, and `ls`'s statuses are the ones `ls` prints.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cairn::Status;

const README: &str = include_str!("../README.md");

#[test]
fn regression_the_cli_readme_missed_commands_and_listed_stale_ls_statuses() {
    let help = assert_cmd::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() > 15, "{help}");
    for c in commands {
        assert!(
            README.contains(&format!("| `{c}")),
            "the README's command table lacks `{c}`"
        );
    }
    let statuses = [
        Status::Init,
        Status::Running,
        Status::Interrupted,
        Status::Paused,
        Status::Succeeded,
        Status::Failed,
    ];
    let said = README
        .split("`status` is")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .unwrap();
    for s in statuses.iter().map(|s| s.as_str()).chain(["unreadable"]) {
        assert!(
            said.contains(&format!("`{s}`")),
            "{s} is not explained: {said}"
        );
    }
    for stale in ["`idle`", "`in_use`"] {
        assert!(!said.contains(stale), "{stale} is not a status: {said}");
    }
}
