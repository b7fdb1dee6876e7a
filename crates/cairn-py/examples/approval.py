"""A LangGraph agent whose state lives in cairn, with a human approval
(an interrupt) pending across a kill -9.

    python approval.py STORE start      # runs until the approval is asked, then waits
    kill -9 <pid>                        # the process dies while the approval is pending
    python approval.py STORE resume yes  # another process resumes and finishes

The thread's checkpoints are durable before each step returns, so the
second process finds the graph paused at the interrupt and resumes it; the
refund is issued once.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from cairn.langgraph import CairnSaver

THREAD = {"configurable": {"thread_id": "refund-42"}}


class State(TypedDict, total=False):
    request: str
    amount: int
    approved: bool
    log: List[str]


def plan(state: State) -> Dict[str, Any]:
    return {"amount": 120, "log": [f"planned a refund of 120 for {state['request']!r}"]}


def approve(state: State) -> Dict[str, Any]:
    answer = interrupt({"question": f"Refund {state['amount']}?"})
    return {"approved": answer == "yes", "log": state.get("log", []) + [f"approval: {answer}"]}


def act(state: State) -> Dict[str, Any]:
    if not state.get("approved"):
        return {"log": state.get("log", []) + ["refund declined"]}
    return {"log": state.get("log", []) + [f"refunded {state['amount']}"]}


def build(saver: CairnSaver) -> Any:
    g = StateGraph(State)
    g.add_node("plan", plan)
    g.add_node("approve", approve)
    g.add_node("act", act)
    g.add_edge(START, "plan")
    g.add_edge("plan", "approve")
    g.add_edge("approve", "act")
    g.add_edge("act", END)
    return g.compile(checkpointer=saver)


def main(argv: List[str]) -> int:
    store, command = argv[1], argv[2]
    with CairnSaver(store) as saver:
        app = build(saver)
        if command == "start":
            out = app.invoke({"request": "order 42 arrived broken"}, THREAD)
            print("waiting for approval:", out["__interrupt__"][0].value["question"], flush=True)
            sys.stdin.readline()  # a person would answer here; kill -9 instead
            return 0
        if command == "resume":
            pending = app.get_state(THREAD)
            print("pending:", [t.name for t in pending.tasks], flush=True)
            out = app.invoke(Command(resume=argv[3]), THREAD)
            print("\n".join(out["log"]), flush=True)
            return 0
    print(f"unknown command {command!r}: use start or resume", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
