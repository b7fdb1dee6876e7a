//! `cairn demo` runs offline, fast, and its claims hold when checked
//! independently through the library.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use cairn::Access;
use serde_json::json;
use support::{Home, stderr, stdout};

/// The README's first command: the agent's storyboard tour, with two real
/// SIGKILLs, run through the `cairn` binary.
#[test]
fn agent_demo_runs_from_the_cli_and_its_key_claims_hold() {
    let home = Home::new();
    let out = home.cairn().arg("demo").output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let rewind = text.find("3. Rewind to panel 1").expect("a rewind step");
    assert!(
        text[rewind..].contains(r#"App state now: {"buff":"power-up","skill":"ten-palm strike"}"#),
        "the rewind restores the state: {text}"
    );
    assert!(text.contains("killed with SIGKILL"), "{text}");
    assert!(text.contains("One charge for panel 3."), "{text}");
    assert!(text.contains("TOOL_OUTCOME_UNKNOWN"), "{text}");
    assert!(text.contains("A subagent letters panel 3"), "{text}");
    // Checked through the library: the storyboard, its subagent and its
    // fork, all healthy, and every tool call in their contexts answered.
    let store = home.store();
    let list = store.list().unwrap();
    assert_eq!(list.len(), 3, "{list:?}");
    // The subagent is nested once: under the re-run whose result names it,
    // not also under the dispatch the crash cut short.
    let story = list
        .iter()
        .find(|s| s.parent.is_none() && s.forked_from.is_none())
        .unwrap();
    let steps = home.json(&["steps", story.id.as_str(), "--json"]);
    let delegates: Vec<&serde_json::Value> = steps
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "delegate")
        .collect();
    assert_eq!(delegates.len(), 2, "the crashed dispatch and its re-run");
    assert_eq!(delegates[0]["status"], "interrupted");
    assert!(delegates[0].get("child_steps").is_none());
    assert_eq!(delegates[1]["child_steps"].as_array().unwrap().len(), 4);
    for s in &list {
        let session = store.open(&s.id, Access::Read).unwrap();
        let ctx = session.context();
        for m in ctx.messages() {
            for (call, _, _) in m.message().expect("read the message").tool_calls() {
                assert!(
                    ctx.messages().iter().any(|r| r
                        .message()
                        .expect("read the message")
                        .tool_results()
                        .any(|c| c == call)),
                    "call {call} has no result in {}",
                    s.id
                );
            }
        }
    }
}

/// Runs `cairn demo`; the storyboard session it made.
fn storyboard_of_demo(home: &Home) -> cairn::SessionId {
    let out = home.cairn().arg("demo").output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    home.store()
        .list()
        .unwrap()
        .into_iter()
        .find(|s| s.parent.is_none() && s.forked_from.is_none())
        .unwrap()
        .id
}

/// What a directory holds: each path (`/`-separated) with its content
/// (`dir` for a directory).
fn tree(root: &std::path::Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                out.push((rel, "dir".to_owned()));
                stack.push(p);
            } else {
                out.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// After the demo, `rewind --files` to `panel-1` brings the whole working
/// directory back to its state there: the files the killed `bash` call and
/// the subagent wrote go too, and the one file snapshots leave out (the
/// `.gitignore`d ledger, which stands for a remote billing service) is
/// named, not skipped silently.
#[test]
fn regression_rewind_files_after_the_demo_left_the_crashed_tools_and_the_subagents_files() {
    let home = Home::new();
    let story = storyboard_of_demo(&home);
    let work = home.path().join("demo").join(story.as_str());
    let ledger = std::fs::read_to_string(work.join("ledger.json")).unwrap();
    let panel_1 = std::fs::read_to_string(work.join("panels/panel-1.svg")).unwrap();
    let script = std::fs::read_to_string(work.join("script.json")).unwrap();
    let out = home
        .cairn()
        .args(["rewind", story.as_str(), "panel-1", "--files"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for gone in ["print-queue.txt", "balloons.txt", "panels/panel-3.svg"] {
        assert!(text.contains(&format!("deleted: {gone}")), "{text}");
    }
    assert!(text.contains("left as is: ledger.json (ignored"), "{text}");
    let own = |p: &str, c: &str| (p.to_owned(), c.to_owned());
    assert_eq!(
        tree(&work),
        [
            own(".gitignore", "ledger.json\n"),
            own("ledger.json", &ledger),
            own("panels", "dir"),
            own("panels/panel-1.svg", &panel_1),
            own("script.json", &script),
        ],
        "the directory as it was at panel-1"
    );
}

/// The demo records its scripted provider, so its session resumes offline.
#[test]
fn regression_agent_resume_of_a_demo_session_asked_for_an_api_key() {
    let home = Home::new();
    let story = storyboard_of_demo(&home);
    let out = home
        .cairn()
        .args([
            "agent",
            "--resume",
            story.as_str(),
            "-p",
            "Panel 4, please.",
        ])
        .env_remove("CAIRN_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CAIRN_BASE_URL")
        .env_remove("CAIRN_MODEL")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("via the scripted provider"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn journal_demo_runs_and_its_claims_hold() {
    let home = Home::new();
    let out = home.cairn().args(["demo", "--journal"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);

    // The narrated rewind restores the power-up.
    let rewind = text.find("3. Rewind to panel-1").unwrap();
    let after = &text[rewind..];
    assert!(
        after.contains(r#"App state now: {"buff":"power-up","skill":"ten-palm strike"}"#),
        "{text}"
    );
    assert!(
        text.contains(r#"App state now: {"buff":"exhausted"}"#),
        "{text}"
    );
    assert!(
        text.contains("torn bytes") && text.contains("nothing lost"),
        "{text}"
    );
    assert!(
        text.contains("cairn --store") && text.contains("--format html"),
        "{text}"
    );
    // Narration fits 80 columns (the suggested commands are left whole).
    assert!(
        text.lines()
            .filter(|l| !l.starts_with("  cairn"))
            .all(|l| l.chars().count() <= 80),
        "{text}"
    );

    // Checked through the library: two sessions, the original on the panel 3
    // branch with the power-up, the torn tail saved beside it, a fork of panel-1.
    let store = home.store();
    let list = store.list().unwrap();
    assert_eq!(list.len(), 2);
    let original = list
        .iter()
        .find(|s| s.title.as_deref() == Some("comic storyboard"))
        .unwrap();
    let fork = list.iter().find(|s| s.forked_from.is_some()).unwrap();
    assert_eq!(fork.forked_from.as_ref(), Some(&original.id));
    let s = store.open(&original.id, Access::Write).unwrap();
    assert!(
        s.open_report().torn.is_none(),
        "the torn tail was already cut"
    );
    assert_eq!(
        s.context().app_state(),
        &json!({"buff": "power-up", "skill": "ten-palm strike"})
    );
    let panel1 = s.resolve("panel-1").unwrap();
    assert!(s.branch().contains(&panel1));
    assert!(
        s.context()
            .messages()
            .last()
            .unwrap()
            .message()
            .expect("read the message")
            .plain_text()
            .starts_with("Panel 3")
    );
    let torn: Vec<_> = std::fs::read_dir(home.path().join("sessions"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".torn-"))
        .collect();
    assert_eq!(torn.len(), 1);
    let f = store.open(&fork.id, Access::Read).unwrap();
    assert_eq!(f.leaf(), Some(panel1));
    assert!(
        cairn::fsck::check_file(std::path::Path::new(s.location()))
            .unwrap()
            .is_clean()
    );
}
