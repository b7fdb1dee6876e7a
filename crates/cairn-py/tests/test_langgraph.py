"""CairnSaver beyond the conformance suite: one writer per thread, storage
that grows with what changed, the fold rebuilt from the log, kill -9 while
an approval is pending (the README's example)."""

from __future__ import annotations

import asyncio
import operator
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, Dict, List, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

import cairn
from cairn.langgraph import NS_CHECKPOINT, CairnSaver, ThreadBusy, thread_session_id

EXAMPLE = str(Path(__file__).parent.parent / "examples" / "approval.py")


class Chat(TypedDict):
    messages: Annotated[List[AnyMessage], operator.add]
    turns: int


def reply(state: Any) -> Dict[str, Any]:
    return {"messages": [AIMessage(content=f"answer {len(state['messages'])}")], "turns": 1}


def chat(saver: CairnSaver, state: Any = Chat) -> Any:
    g = StateGraph(state)
    g.add_node("reply", reply)
    g.add_edge(START, "reply")
    return g.compile(checkpointer=saver)


def cfg(thread: str = "t1") -> Any:
    return {"configurable": {"thread_id": thread}}


def say(app: Any, text: str, thread: str = "t1") -> Any:
    return app.invoke({"messages": [HumanMessage(content=text)], "turns": 0}, cfg(thread))


def test_readme_example_survives_kill_9_while_the_approval_is_pending(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    p = subprocess.Popen(
        [sys.executable, EXAMPLE, store, "start"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.startswith("waiting for approval: Refund 120?"), line
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    out = subprocess.run(
        [sys.executable, EXAMPLE, store, "resume", "yes"], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == [
        "pending: ['approve']",
        "planned a refund of 120 for 'order 42 arrived broken'",
        "approval: yes",
        "refunded 120",
    ]
    # Resuming again finds nothing pending and refunds nothing more.
    again = subprocess.run(
        [sys.executable, EXAMPLE, store, "resume", "yes"], capture_output=True, text=True, check=True
    ).stdout
    assert again.splitlines()[0] == "pending: []" and again.count("refunded") == 1


def test_a_second_saver_on_a_thread_gets_thread_busy_and_reads_a_snapshot(home: str) -> None:
    first = CairnSaver(home)
    app = chat(first)
    say(app, "hello")
    second = CairnSaver(home)
    with pytest.raises(ThreadBusy, match="one writer per thread"):
        say(chat(second), "me too")
    snap = chat(second).get_state(cfg())
    assert [m.content for m in snap.values["messages"]] == ["hello", "answer 1"]
    # Other threads are free, and the first saver's thread frees up on close.
    say(chat(second), "elsewhere", thread="t2")
    first.close()
    say(chat(second), "now me")
    assert len(chat(second).get_state(cfg()).values["messages"]) == 4


def test_storage_grows_with_what_changed(home: str) -> None:
    saver = CairnSaver(home)
    app = chat(saver)
    for i in range(6):
        say(app, f"question {i}")
    s = saver._thread("t1", create=False)
    assert s is not None
    blobs = [
        r["data"]["content"]["values"]
        for r in s.session.records(1)
        if r["kind"] == "custom" and r["data"]["namespace"] == NS_CHECKPOINT
    ]
    messages = [v["messages"] for v in blobs if "messages" in v]
    # The list is stored whole once, then as the messages each step added.
    assert "full" in messages[0]
    assert all("append" in m and len(m["append"]) == 1 for m in messages[1:])
    # A checkpoint stores only channels whose version changed.
    assert any("messages" not in v for v in blobs) or len(blobs) == len(messages)


def test_a_new_saver_rebuilds_every_checkpoint_from_the_log(any_store: cairn.Store) -> None:
    saver = CairnSaver(any_store)
    app = chat(saver)
    for i in range(4):
        say(app, f"q{i}")
    # Branch from an earlier checkpoint: the delta base is not the parent.
    history = list(app.get_state_history(cfg()))
    old = history[3].config
    app.invoke({"messages": [HumanMessage(content="from the past")], "turns": 0}, old)
    before = [(t.config, t.checkpoint["channel_values"], t.metadata, t.pending_writes) for t in saver.list(cfg())]
    saver.close()
    again = CairnSaver(any_store)
    after = [(t.config, t.checkpoint["channel_values"], t.metadata, t.pending_writes) for t in again.list(cfg())]
    assert after == before
    latest = chat(again).get_state(cfg()).values["messages"]
    assert [m.content for m in latest][-2:] == ["from the past", f"answer {len(latest) - 1}"]


def test_messages_state_and_async_runs_work_too(home: str) -> None:
    async def go() -> List[str]:
        saver = CairnSaver(home)
        app = chat(saver, MessagesState)
        await app.ainvoke({"messages": [HumanMessage(content="a")]}, cfg("async"))
        await app.ainvoke({"messages": [HumanMessage(content="b")]}, cfg("async"))
        state = await app.aget_state(cfg("async"))
        saver.close()
        return [m.content for m in state.values["messages"]]

    assert asyncio.run(go()) == ["a", "answer 1", "b", "answer 3"]


def test_copy_thread_is_a_fork_and_delete_thread_removes_the_session(store: cairn.Store) -> None:
    saver = CairnSaver(store)
    app = chat(saver)
    say(app, "hi")
    saver.copy_thread("t1", "t2")
    copy = store.open(thread_session_id("t2"), write=False)
    assert copy.header["lineage"]["forked_from"]["session"] == thread_session_id("t1")
    assert [m.content for m in app.get_state(cfg("t2")).values["messages"]] == ["hi", "answer 1"]
    with pytest.raises(cairn.SessionExists, match="already exists"):
        saver.copy_thread("t1", "t2")
    saver.delete_thread("t1")
    assert not store.exists(thread_session_id("t1"))
    assert app.get_state(cfg("t1")).values == {}
    assert saver.get_tuple(cfg("t2")) is not None


def test_a_restarted_saver_keeps_storing_only_the_new_messages(home: str) -> None:
    # Regression: the first put after a restart stored the whole list again
    # (one full copy per process start: quadratic for one process per turn).
    for i in range(3):
        saver = CairnSaver(home)
        say(chat(saver), f"turn {i}")
        saver.close()
    saver = CairnSaver(home)
    th = saver._thread("t1", create=False)
    assert th is not None
    stored = [
        r["data"]["content"]["values"]["messages"]
        for r in th.session.records(1)
        if r["kind"] == "custom"
        and r["data"]["namespace"] == NS_CHECKPOINT
        and "messages" in r["data"]["content"]["values"]
    ]
    assert "full" in stored[0] and all("append" in m for m in stored[1:])
    assert [m.content for m in chat(saver).get_state(cfg()).values["messages"]] == [
        "turn 0", "answer 1", "turn 1", "answer 3", "turn 2", "answer 5",
    ]


def test_a_write_based_on_a_stale_read_is_refused_not_forked(home: str) -> None:
    # langgraph #8796/#8810: a worker that read the thread before another
    # worker ran it must not append a checkpoint on top of what it read.
    from langgraph.checkpoint.base.id import uuid6

    first = CairnSaver(home)
    say(chat(first), "one")
    first.close()
    late = CairnSaver(home)
    read = late.get_tuple(cfg())
    assert read is not None
    other = CairnSaver(home)
    say(chat(other), "two")
    other.close()
    stale = read.checkpoint.copy()
    stale["id"] = str(uuid6())
    with pytest.raises(ThreadBusy, match="changed since this saver read it"):
        late.put(read.config, stale, read.metadata, {})
    # Reading again and running the graph continues from the latest state.
    say(chat(late), "three")
    assert [m.content for m in chat(late).get_state(cfg()).values["messages"]][-2:] == ["three", "answer 5"]


def test_maintenance_calls_hold_a_thread_only_while_they_run(home: str) -> None:
    worker = CairnSaver(home)
    say(chat(worker), "hi")
    worker.close()
    admin = CairnSaver(home)
    admin.delete_for_runs(["no-such-run"])
    admin.prune(["t1"])
    admin.copy_thread("t1", "t1-copy")
    assert len(list(admin.list(None))) > 0
    say(chat(CairnSaver(home)), "again")  # nobody holds t1
