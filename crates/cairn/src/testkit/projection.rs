//! Tree and projection: whatever the backend, a reopened session has the
//! same tree and the same context as before, and that context is
//! [`Context::fold`] of its entries.

use serde_json::json;

use super::Rng;
use super::build::{assistant, calls, tool_result, user};
use super::fixture::Fixture;
use super::util::{OrFail, all_entries, other_store, store};
use crate::backend::Access;
use crate::error::AppendError;
use crate::projection::Context;
use crate::record::{AppStateChange, Compaction, Custom, EntryBody, Label, SessionInfo, Settings};
use crate::session::{NewEntry, NewSession, Parent, Session};

/// What must survive a reopen unchanged.
fn snapshot(s: &Session) -> impl PartialEq + std::fmt::Debug + use<> {
    (
        s.context(),
        s.leaf(),
        s.branch(),
        s.labels(),
        s.title(),
        s.nodes(),
        s.children(None),
        s.len(),
    )
}

/// Checks that the session's context is [`Context::fold`] of its entries
/// read back (what the fuzz targets check after every step, too).
///
/// # Panics
///
/// When it is not, or an entry of the tree does not read back; the message
/// names `name` (the backend or target) and `when`.
pub fn assert_folds(name: &str, s: &Session, when: &str) {
    let entries = all_entries(s);
    let fold = Context::fold(&s.header().app_state, &entries, s.leaf().as_ref());
    assert_eq!(
        *s.context(),
        fold,
        "{name}: the context {when} is Context::fold of the entries"
    );
}

/// Accepts an append or a rejection by an invariant (the random history
/// proposes some invalid records on purpose: they must write nothing).
fn tolerate(name: &str, r: Result<impl Sized, AppendError>) {
    match r {
        Ok(_) | Err(AppendError::Invalid(_)) => {}
        Err(e) => panic!("{name}: append failed: {e}"),
    }
}

/// One random step of a history: messages, tool calls with results, app
/// state sets and merge patches, settings, moves (with and without
/// summaries), compactions, labels, explicit parents, titles, custom entries.
fn random_step(name: &str, s: &Session, rng: &mut Rng, step: usize) {
    let nodes = s.nodes();
    let any_node =
        |rng: &mut Rng| (!nodes.is_empty()).then(|| nodes[rng.index(nodes.len())].id.clone());
    match rng.index(11) {
        0 => tolerate(name, s.append(user(&format!("user {step}")))),
        1 => tolerate(name, s.append(assistant(&format!("assistant {step}")))),
        2 => {
            let call = format!("call-{step}");
            tolerate(
                name,
                s.append(EntryBody::Message(calls(
                    "",
                    &[(call.as_str(), "tool", json!({"step": step}))],
                ))),
            );
            tolerate(
                name,
                s.append(tool_result(&call, &format!("result {step}"))),
            );
        }
        3 => {
            let change = if rng.index(2) == 0 {
                AppStateChange::Set(json!({"step": step, "list": [step]}))
            } else {
                AppStateChange::Patch(json!({"patched": step, "list": null}))
            };
            tolerate(name, s.append(EntryBody::AppState(change)));
        }
        4 => {
            let mut values = serde_json::Map::new();
            values.insert(format!("k{}", rng.index(3)), json!(step));
            values.insert(format!("k{}", rng.index(3)), serde_json::Value::Null);
            tolerate(name, s.append(EntryBody::Settings(Settings { values })));
        }
        5 => {
            let target = if rng.index(5) == 0 {
                None
            } else {
                any_node(rng)
            };
            let summary = (rng.index(2) == 0).then(|| format!("left at step {step}"));
            tolerate(name, s.checkout(target.as_ref(), summary));
        }
        6 => {
            let branch = s.branch();
            let first_kept = (!branch.is_empty() && rng.index(4) != 0)
                .then(|| branch[rng.index(branch.len())].clone());
            tolerate(
                name,
                s.append(EntryBody::Compaction(Compaction {
                    summary: format!("summary at step {step}"),
                    first_kept,
                    tokens_before: Some(step as u64),
                })),
            );
        }
        7 => {
            let label = format!("l{}", rng.index(3));
            let target = if rng.index(4) == 0 {
                None
            } else {
                any_node(rng)
            };
            tolerate(
                name,
                s.append(EntryBody::Label(Label {
                    name: label,
                    target,
                })),
            );
        }
        8 => {
            let parent = any_node(rng).map_or(Parent::Root, Parent::Entry);
            tolerate(
                name,
                s.append_entry(NewEntry {
                    id: None,
                    parent,
                    body: user(&format!("explicit parent {step}")),
                }),
            );
        }
        9 => tolerate(
            name,
            s.append(EntryBody::SessionInfo(SessionInfo {
                title: Some(format!("title {step}")),
            })),
        ),
        _ => tolerate(
            name,
            s.append(EntryBody::Custom(Custom {
                namespace: "test.random".into(),
                visible: rng.index(2) == 0,
                content: json!({"step": step}),
            })),
        ),
    }
}

/// Random branching histories (moves, compactions, app state, labels,
/// explicit parents): the context always equals [`Context::fold`] of the
/// entries, and reopening — for writing, through another handle, several
/// times along the way — gives back the same tree, leaf, branch, labels,
/// title and context. Appends then go on from the reopened session.
pub fn tree_and_projection_equal_the_fold(f: &dyn Fixture) {
    let name = f.name();
    for seed in [1_u64, 7, 2024] {
        let mut rng = Rng::new(seed);
        let created = store(f)
            .create(NewSession {
                app_state: Some(json!({"seed": seed})),
                ..NewSession::default()
            })
            .or_fail(format_args!("{name}: create"));
        let id = created.id().clone();
        let mut s = created;
        for step in 0..160 {
            random_step(&name, &s, &mut rng, step);
            if step % 10 == 9 {
                assert_folds(&name, &s, &format!("after step {step} (seed {seed})"));
            }
            if step % 40 == 39 {
                let before = snapshot(&s);
                drop(s);
                let reader = other_store(f)
                    .open(&id, Access::Read)
                    .or_fail(format_args!("{name}: reopen for reading"));
                assert_eq!(snapshot(&reader), before, "{name}: a reader sees the same");
                drop(reader);
                s = other_store(f)
                    .open(&id, Access::Write)
                    .or_fail(format_args!("{name}: reopen for writing"));
                assert_eq!(
                    snapshot(&s),
                    before,
                    "{name}: the session reopens as it was (seed {seed}, step {step})"
                );
                assert_folds(&name, &s, "after reopening");
            }
        }
    }
}

/// A fixed history with app-state sets and patches, a compaction and a
/// move back before it: after reopening, the app state, settings, the
/// active compaction and the messages are as they were, on both branches.
pub fn compaction_and_app_state_are_restored_on_reopen(f: &dyn Fixture) {
    let name = f.name();
    let s = store(f)
        .create(NewSession {
            app_state: Some(json!({"panels": 0})),
            ..NewSession::default()
        })
        .or_fail(format_args!("{name}: create"));
    let id = s.id().clone();
    let ok = |what: &str| format!("{name}: append {what}");
    let first = s.append(user("draw a pig")).or_fail(ok("a message"));
    s.append(EntryBody::AppState(AppStateChange::Set(
        json!({"panels": 1, "style": "ink"}),
    )))
    .or_fail(ok("app state"));
    let kept = s.append(assistant("panel 1 done")).or_fail(ok("a reply"));
    s.append(EntryBody::AppState(AppStateChange::Patch(
        json!({"panels": 2, "style": null}),
    )))
    .or_fail(ok("a patch"));
    let mut values = serde_json::Map::new();
    values.insert("model".into(), json!("m1"));
    s.append(EntryBody::Settings(Settings { values }))
        .or_fail(ok("settings"));
    s.append(EntryBody::Compaction(Compaction {
        summary: "a pig in ink".into(),
        first_kept: kept.id.clone(),
        tokens_before: Some(9000),
    }))
    .or_fail(ok("a compaction"));
    let after = s.append(user("panel 3 please")).or_fail(ok("a message"));

    let check_compacted = |s: &Session, when: &str| {
        let ctx = s.context();
        assert_eq!(
            ctx.app_state(),
            &json!({"panels": 2}),
            "{name}: app state {when}"
        );
        assert_eq!(ctx.settings().get("model"), Some(&json!("m1")));
        let c = ctx
            .compaction()
            .or_fail(format_args!("{name}: a compaction is active {when}"));
        assert_eq!(c.summary, "a pig in ink");
        assert_eq!(c.first_kept, kept.id);
        assert_eq!(c.tokens_before, Some(9000));
        let texts: Vec<String> = ctx
            .messages()
            .iter()
            .map(|m| m.message().or_fail("read a message").plain_text())
            .collect();
        assert_eq!(
            texts.len(),
            3,
            "{name}: summary, kept reply, new message {when}"
        );
        assert!(texts[0].contains("a pig in ink"));
        assert_eq!(texts[1], "panel 1 done");
        assert_eq!(texts[2], "panel 3 please");
        assert_folds(&name, s, when);
    };
    check_compacted(&s, "before reopening");
    drop(s);
    let s = other_store(f)
        .open(&id, Access::Write)
        .or_fail(format_args!("{name}: reopen"));
    check_compacted(&s, "after reopening");

    // Move back before the compaction: its state and summary are gone.
    s.checkout(first.id.as_ref(), None)
        .or_fail(ok("a checkout"));
    let check_rewound = |s: &Session, when: &str| {
        let ctx = s.context();
        assert_eq!(
            ctx.app_state(),
            &json!({"panels": 0}),
            "{name}: state {when}"
        );
        assert!(ctx.compaction().is_none(), "{name}: no compaction {when}");
        assert!(ctx.settings().is_empty());
        assert_eq!(ctx.messages().len(), 1);
        assert_folds(&name, s, when);
    };
    check_rewound(&s, "after moving back");
    drop(s);
    let s = other_store(f)
        .open(&id, Access::Read)
        .or_fail(format_args!("{name}: reopen"));
    check_rewound(&s, "after moving back and reopening");
    drop(s);
    let s = store(f)
        .open(&id, Access::Write)
        .or_fail(format_args!("{name}: reopen"));
    s.checkout(after.id.as_ref(), None)
        .or_fail(ok("a checkout forward"));
    check_compacted(&s, "after moving forward again");
}
