"""CairnSaver against LangGraph's SqliteSaver on the same graph, same run.

The graph is the shape every chat agent has: a message-accumulating state
(``MessagesState``, whose ``add_messages`` reducer appends) and one node that
answers each human message. Each turn is one ``graph.invoke`` with one new
human message on one thread; the turn's latency is the wall time of that
call, checkpointing included (each saver's records are durable when the
call returns: cairn fsyncs each record, SQLite commits each checkpoint).

Reported, for each saver: the median latency of the 10 turns around turn 10
(turns 6-15) and of the last 10 turns, their ratio, and the bytes on disk
after the last turn (every file of the store: database, WAL, sessions).

    python crates/cairn-py/bench/langgraph_bench.py [--turns 1000] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph

from cairn.langgraph import CairnSaver

USER = "Please look at the build log and tell me which step failed and why. "
REPLY = "The link step failed: the linker could not find the symbol it needs, so rebuild the crate. "


def answer(state: MessagesState) -> Dict[str, Any]:
    n = len(state["messages"])
    return {"messages": [AIMessage(content=f"{REPLY}({n} messages so far)")]}


def graph(saver: BaseCheckpointSaver[Any]) -> Any:
    g = StateGraph(MessagesState)
    g.add_node("answer", answer)
    g.add_edge(START, "answer")
    return g.compile(checkpointer=saver)


def disk_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def run(name: str, make: Callable[[str], BaseCheckpointSaver[Any]], turns: int) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as d:
        saver = make(d)
        app = graph(saver)
        config = {"configurable": {"thread_id": "bench"}}
        latencies: List[float] = []
        for t in range(1, turns + 1):
            start = time.perf_counter()
            app.invoke({"messages": [HumanMessage(content=f"{USER}(turn {t})")]}, config)
            latencies.append(time.perf_counter() - start)
        state = app.get_state(config)
        assert len(state.values["messages"]) == 2 * turns, "every message is kept"
        size = disk_bytes(d)
        close = getattr(saver, "close", None)
        if callable(close):
            close()
    early = statistics.median(latencies[5:15])
    late = statistics.median(latencies[-10:])
    return {
        "saver": name,
        "turns": turns,
        "early_ms": early * 1000,
        "late_ms": late * 1000,
        "growth": late / early,
        "bytes": size,
        "total_s": sum(latencies),
    }


def sqlite_saver(d: str) -> BaseCheckpointSaver[Any]:
    conn = sqlite3.connect(os.path.join(d, "checkpoints.db"), check_same_thread=False)
    return SqliteSaver(conn)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--json", help="write the results here as JSON")
    args = ap.parse_args()
    if args.turns < 20:
        ap.error("--turns must be at least 20 (turns 6-15 are the baseline)")
    results = [
        run("cairn", lambda d: CairnSaver(os.path.join(d, "store")), args.turns),
        run("sqlite", sqlite_saver, args.turns),
    ]
    c, s = results
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
