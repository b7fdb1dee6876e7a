"""CairnSaver against LangGraph's SqliteSaver on the same graph, same run.

The graph is the shape every chat agent has: a message-accumulating state
and one node that answers each human message. Each turn is one
``graph.invoke`` with one new human message on one thread; the turn's
latency is the wall time of that call, checkpointing included (each saver's
records are durable when the call returns: cairn fsyncs each record, SQLite
commits each checkpoint).

The state is ``messages: Annotated[list, operator.add]`` by default, so the
graph itself does constant work per turn and what grows is the saver's;
``--state messages`` uses ``MessagesState`` instead, whose ``add_messages``
reducer is itself linear in the history (it indexes every message by id on
each update), whatever the saver.

Reported, for each saver: the median latency of turns 6-15 of a fresh
thread and of the last 10 turns of the long one (interleaved, one of each
in turn, so both are measured under the same load), their ratio, and the bytes on disk after the last turn (every
file of the store: database, WAL, sessions; both stores hold the long thread
and the 15-turn one). LangGraph runs with ``durability="sync"``: a turn
returns once its checkpoints are written.

    python crates/cairn-py/bench/langgraph_bench.py [--turns 1000] [--state append|messages] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from typing import Annotated, Any, Callable, Dict, List, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph

from cairn.langgraph import CairnSaver

USER = "Please look at the build log and tell me which step failed and why. "
REPLY = "The link step failed: the linker could not find the symbol it needs, so rebuild the crate. "


class AppendState(TypedDict):
    messages: Annotated[List[AnyMessage], operator.add]


def answer(state: Dict[str, Any]) -> Dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(content=f"{REPLY}({n} messages so far)")]}


def graph(saver: BaseCheckpointSaver[Any], state: str = "append") -> Any:
    g: Any = StateGraph(MessagesState if state == "messages" else AppendState)
    g.add_node("answer", answer)
    g.add_edge(START, "answer")
    return g.compile(checkpointer=saver)


def disk_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def run(
    name: str, make: Callable[[str], BaseCheckpointSaver[Any]], turns: int, state: str
) -> Dict[str, Any]:
    """Runs `turns` turns on one thread. The last 10 are interleaved with
    turns 6-15 of a second, fresh thread of the same saver, so the two
    medians compared are measured at the same moment (the machine's load,
    and the disk's sync latency, drift over a run of minutes)."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as d:
        saver = make(d)
        app = graph(saver, state)
        long_thread = {"configurable": {"thread_id": "long"}}
        short_thread = {"configurable": {"thread_id": "short"}}

        def turn(config: Dict[str, Any], t: int) -> float:
            start = time.perf_counter()
            app.invoke(
                {"messages": [HumanMessage(content=f"{USER}(turn {t})")]},
                config,
                durability="sync",
            )
            return time.perf_counter() - start

        curve = [turn(long_thread, t) for t in range(1, turns - 9)]
        for t in range(1, 6):
            turn(short_thread, t)
        early: List[float] = []
        late: List[float] = []
        for i in range(10):
            early.append(turn(short_thread, 6 + i))
            late.append(turn(long_thread, turns - 9 + i))
        curve += late
        state_now = app.get_state(long_thread)
        assert len(state_now.values["messages"]) == 2 * turns, "every message is kept"
        close = getattr(saver, "close", None)
        if callable(close):
            close()
        size = disk_bytes(d)
    e = statistics.median(early)
    l = statistics.median(late)
    return {
        "saver": name,
        "turns": turns,
        "state": state,
        "early_ms": e * 1000,
        "late_ms": l * 1000,
        "growth": l / e,
        "bytes": size,
        "total_s": sum(curve),
        "curve_ms": [round(x * 1000, 3) for x in curve],
    }


def sqlite_saver(d: str) -> BaseCheckpointSaver[Any]:
    conn = sqlite3.connect(os.path.join(d, "checkpoints.db"), check_same_thread=False)
    return SqliteSaver(conn)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--state", choices=["append", "messages"], default="append")
    ap.add_argument("--json", help="write the results here as JSON")
    args = ap.parse_args()
    if args.turns < 20:
        ap.error("--turns must be at least 20 (turns 6-15 are the baseline)")
    results = [
        run("cairn", lambda d: CairnSaver(os.path.join(d, "store")), args.turns, args.state),
        run("sqlite", sqlite_saver, args.turns, args.state),
    ]
    c, s = results
    print(f"state: {args.state}, {args.turns} turns (medians of turns 6-15 of a fresh thread and of the last 10)")
    print(f"{'saver':8} {'turn 10 ms':>11} {'last ms':>9} {'growth':>7} {'bytes':>14} {'total s':>8}")
    for r in results:
        print(
            f"{r['saver']:8} {r['early_ms']:11.2f} {r['late_ms']:9.2f} {r['growth']:7.2f} "
            f"{r['bytes']:14,} {r['total_s']:8.1f}"
        )
    ratio = c["bytes"] / s["bytes"]
    print(f"cairn bytes / sqlite bytes: {ratio:.4f}")
    print(f"cairn latency at turn {args.turns} / at turn 10: {c['growth']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "bytes_ratio": ratio}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
