"""The Python API: sessions, derived reads, operations, exceptions, threads."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import cairn


def call(call_id: str, name: str = "echo", **arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "tool_call", "call_id": call_id, "name": name, "arguments": arguments}],
    }


def test_appended_entries_make_the_context(any_store: cairn.Store) -> None:
    s = any_store.create(title="first")
    a = s.add_message("hello")
    b = s.add_message("hi there", role="assistant")
    ctx = s.context()
    assert ctx["leaf"] == b.id == s.leaf
    assert [m["entry"] for m in ctx["messages"]] == [a.id, b.id]
    assert ctx["messages"][1]["message"] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi there"}],
    }
    assert s.title == "first"
    assert len(s) == 3  # header + two entries


def test_app_state_is_set_then_patched(store: cairn.Store) -> None:
    s = store.create(app_state={"todos": [], "n": 1})
    s.patch_state({"n": 2, "extra": True})
    assert s.app_state == {"todos": [], "n": 2, "extra": True}
    s.patch_state({"extra": None})
    assert s.app_state == {"todos": [], "n": 2}
    s.set_state([1, 2])
    assert s.app_state == [1, 2]


def test_records_read_back_as_written(store: cairn.Store) -> None:
    s = store.create()
    e = s.add_custom("myapp.notes", {"k": [1, 2.5, "x", None]})
    rec = s.record(e.seq)
    assert rec["kind"] == "custom" and rec["id"] == e.id
    assert rec["data"] == {"namespace": "myapp.notes", "visible": False, "content": {"k": [1, 2.5, "x", None]}}
    assert e.id is not None and s.entry(e.id[:4]) == rec
    assert [r["seq"] for r in s.records()] == [0, 1]


def test_checkout_moves_the_leaf_and_a_fork_copies_the_branch(store: cairn.Store) -> None:
    s = store.create()
    a = s.add_message("one")
    s.add_message("two")
    s.label("start", a.id)
    assert s.labels == {"start": a.id}
    s.checkout("start", summary="tried two")
    c = s.add_message("three")
    assert [m["message"]["content"][0]["text"] for m in s.context()["messages"]][-1] == "three"
    tree = s.tree()
    assert {n["kind"] for n in tree} == {"message", "label", "checkout"}
    assert s.branch()[0] == a.id and s.branch()[-1] == c.id
    fork = store.fork(s, a.id, title="what if")
    assert fork.id != s.id
    assert [m["entry"] for m in fork.context()["messages"]] == [a.id]
    assert fork.header["lineage"]["forked_from"] == {"session": s.id, "entry": a.id}
    assert {x["id"] for x in store.list()} == {s.id, fork.id}


def test_second_writer_gets_session_in_use_and_a_reader_sees_a_snapshot(store: cairn.Store) -> None:
    s = store.create()
    s.add_message("hello")
    with pytest.raises(cairn.SessionInUse, match="in use by process"):
        store.open(s.id)
    r = store.open(s.id, write=False)
    assert not r.is_writer
    assert len(r.context()["messages"]) == 1
    with pytest.raises(cairn.ReadOnlyError, match="read-only"):
        r.add_message("nope")
    s.close()
    with pytest.raises(cairn.ClosedError):
        s.add_message("closed")
    again = store.open(s.id[:8])
    assert again.is_writer


def test_refused_appends_raise_typed_errors_and_write_nothing(store: cairn.Store) -> None:
    s = store.create()
    before = len(s)
    with pytest.raises(cairn.InputError, match="unknown record kind"):
        s.append("nonsense", {})
    with pytest.raises(cairn.InputError, match="message"):
        s.append("message", {"role": "robot", "content": []})
    with pytest.raises(cairn.InvalidEntry, match="answers no tool call"):
        s.append(
            "message",
            {"role": "tool", "content": [{"type": "tool_result", "call_id": "c9", "content": []}]},
        )
    with pytest.raises(cairn.EntryNotFound, match="nope"):
        s.append("message", {"role": "user", "content": []}, parent="nope")
    with pytest.raises(cairn.InvalidEntry, match="already used"):
        first = s.add_message("x")
        s.append("message", {"role": "user", "content": []}, id=first.id)
    before = len(s)
    with pytest.raises(cairn.InputError, match="cannot store"):
        s.add_custom("myapp", {"x": object()})
    with pytest.raises(cairn.EntryNotFound):
        s.resolve("zzz")
    with pytest.raises(cairn.SessionNotFound):
        store.open("7zzzzzzzzzzzzzzzzzzzzzzzzz")
    assert len(s) == before
    assert isinstance(cairn.InvalidEntry("x"), cairn.AppendError)
    assert isinstance(cairn.SessionInUse("x"), cairn.CairnError)


def test_an_operation_records_model_and_tool_steps(store: cairn.Store) -> None:
    s = store.create()
    op = s.start_operation("echo something")
    t = op.model_attempt("scripted", "m1")
    op.record_assistant(t, call("c1", text="hi"))
    assert s.verdict()["verdict"] == "tools_not_started"
    with op.tool("c1", effect="read_only") as ticket:
        assert ticket.pending and ticket.effect == "read_only" and ticket.key
        assert s.verdict()["verdict"] == "indeterminate_tool"  # T1 is durable before the tool runs
        done = ticket.result("hi")
    assert done.id == ticket.result_entry and not ticket.pending
    t2 = op.model_attempt("scripted", "m1")
    op.record_assistant(t2, "done")
    op.finish()
    assert s.verdict() == {"verdict": "finished", "op": op.id, "outcome": "completed"}
    assert s.status() == "succeeded"
    kinds = [step["kind"] for step in s.steps()]
    assert kinds == ["input", "model", "tool", "model"]


def test_an_exception_in_the_tool_block_is_recorded_as_its_error_result(store: cairn.Store) -> None:
    s = store.create()
    op = s.start_operation("go")
    op.record_assistant(op.model_attempt(), call("c1", "fail"))
    with pytest.raises(RuntimeError, match="boom"):
        with op.tool("c1"):
            raise RuntimeError("boom")
    result = s.context()["messages"][-1]["message"]["content"][0]
    assert result["is_error"] is True and "RuntimeError: boom" in result["content"][0]["text"]
    assert s.verdict()["verdict"] == "ready"


def test_a_tool_block_without_a_result_leaves_the_call_indeterminate(store: cairn.Store) -> None:
    s = store.create()
    op = s.start_operation("go")
    op.record_assistant(op.model_attempt(), call("c1", "pay"))
    with pytest.raises(cairn.CairnError, match="without a result"):
        with op.tool("c1", effect="side_effect"):
            pass
    v = s.verdict()
    assert v["verdict"] == "indeterminate_tool" and v["calls"][0]["call_id"] == "c1"


def test_tickets_are_used_once_and_calls_dispatched_once(store: cairn.Store) -> None:
    s = store.create()
    op = s.start_operation("go")
    t = op.model_attempt()
    op.record_assistant(t, call("c1"))
    with pytest.raises(cairn.CairnError, match="already used"):
        op.record_assistant(t, "again")
    ticket = op.tool("c1", effect="idempotent")
    with pytest.raises(cairn.InvalidEntry, match="already dispatched"):
        op.tool("c1")
    ticket.result("ok")
    with pytest.raises(cairn.CairnError, match="already used"):
        ticket.result("twice")
    with pytest.raises(cairn.InputError, match="effect class"):
        op.tool("c1", effect="maybe")  # type: ignore[arg-type]


def test_approvals_and_denials_are_recorded(store: cairn.Store) -> None:
    s = store.create()
    op = s.start_operation("delete it")
    op.record_assistant(op.model_attempt(), call("c1", "rm"))
    op.request_approval("c1", "rm")
    assert s.verdict()["verdict"] == "awaiting_approval"
    assert s.status() == "paused"
    op.resolve_approval("c1", False, by="alice")
    op.deny("c1", "alice said no")
    assert s.verdict()["verdict"] == "ready"
    op.finish("aborted")
    assert s.status() == "failed"


def test_recover_reruns_safe_calls_with_the_runner_and_marks_side_effects_unknown(store: cairn.Store) -> None:
    s = store.create()
    op = s.start_operation("go")
    op.record_assistant(
        op.model_attempt(),
        {
            "role": "assistant",
            "content": [
                {"type": "tool_call", "call_id": "r1", "name": "read", "arguments": {}},
                {"type": "tool_call", "call_id": "p1", "name": "pay", "arguments": {"amount": 5}},
            ],
        },
    )
    op.tool("r1", effect="read_only")
    op.tool("p1", effect="side_effect")
    s.close()  # the process "dies" with both calls dispatched, neither answered

    ran = []

    class Runner:
        def effect(self, tool: str) -> str:
            return "read_only" if tool == "read" else "side_effect"

        def run(self, call_id: str, tool: str, arguments: Any, key: str) -> str:
            ran.append(call_id)
            return f"{tool} ok"

    s = store.open(s.id)
    assert s.verdict()["verdict"] == "indeterminate_tool"
    report = s.recover(runner=Runner())
    assert ran == ["r1"]
    assert [a["action"] for a in report["actions"]] == ["reran", "recorded_unknown"]
    assert report["after"]["verdict"] == "ready"
    results = {m["message"]["content"][0]["call_id"]: m["message"]["content"][0] for m in s.context()["messages"][-2:]}
    assert results["p1"]["code"] == "TOOL_OUTCOME_UNKNOWN"


def test_memory_is_derived_from_the_branch(store: cairn.Store) -> None:
    s = store.create()
    s.add_message("please write the tests")
    mem = s.memory()
    assert "Goal: please write the tests" in mem["text"]


def test_appends_from_many_threads_all_land_in_order(store: cairn.Store) -> None:
    s = store.create()
    s.durability = "group"
    assert s.durability == "group"

    def work(n: int) -> None:
        for i in range(25):
            s.add_custom("t", {"thread": n, "i": i})

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recs = s.records(1)
    assert [r["seq"] for r in recs] == list(range(1, 101))
    for n in range(4):
        assert [r["data"]["content"]["i"] for r in recs if r["data"]["content"]["thread"] == n] == list(range(25))
    s.close()
    assert len(store.open(s.id, write=False)) == 101


def test_removed_sessions_are_gone(store: cairn.Store) -> None:
    s = store.create()
    sid = s.id
    s.close()
    assert store.exists(sid)
    store.remove(sid)
    assert not store.exists(sid)


def test_the_readme_python_example_runs(tmp_path: Any) -> None:
    from pathlib import Path

    readme = (Path(__file__).parents[3] / "README.md").read_text()
    section = readme[readme.index("## Python and LangGraph") :]
    code = section[section.index("```python\n") + len("```python\n") :]
    code = code[: code.index("```")].replace("/tmp/cairn-home", str(tmp_path / "home"))
    scope: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), scope)
    s = scope["s"]
    assert s.verdict()["verdict"] == "finished"
    assert "refunded (key " in s.context()["messages"][-1]["message"]["content"][0]["content"][0]["text"]
