"""A Python process SIGKILLed mid-operation, and recovered by another."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import cairn

CHILD = str(Path(__file__).with_name("crash_child.py"))
SID = "01jcrash00000000000000000a"


def run_until(home: str, what: str, lines: int = 1) -> Tuple[List[str], int]:
    """Starts the child, reads `lines` lines, SIGKILLs it; returns the lines."""
    p = subprocess.Popen(
        [sys.executable, CHILD, home, SID, what], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    got = []
    for _ in range(lines):
        line = p.stdout.readline()
        assert line, f"child exited early with {p.wait()}"
        got.append(line.strip())
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    p.stdout.close()
    return got, p.pid


def test_killed_after_dispatch_is_recovered_as_unknown_never_rerun(home: str) -> None:
    (line,), _pid = run_until(home, "tool")
    key = line.split()[1]
    store = cairn.Store(home)
    assert store.status(SID) == "interrupted"
    s = store.open(SID)  # the dead writer's lock is gone
    v = s.verdict()
    assert v["verdict"] == "indeterminate_tool"
    assert v["calls"][0]["call_id"] == "p1" and v["calls"][0]["key"] == key

    class NeverRun:
        def effect(self, tool: str) -> str:
            return "side_effect"

        def run(self, call_id: str, tool: str, arguments: object, key: str) -> str:
            raise AssertionError("a side effect must not be re-run without a person")

    report = s.recover(runner=NeverRun())
    assert [a["action"] for a in report["actions"]] == ["recorded_unknown"]
    assert s.verdict()["verdict"] == "ready"
    last = s.context()["messages"][-1]["message"]["content"][0]
    assert last["code"] == "TOOL_OUTCOME_UNKNOWN"
    # The loop goes on in the recovering process.
    op = s.resume_operation()
    assert op is not None
    op.record_assistant(op.model_attempt(), "I could not confirm the payment; please check.")
    op.finish()
    assert store.status(SID) == "succeeded"


def test_killed_during_a_model_request_is_retried(home: str) -> None:
    run_until(home, "model")
    s = cairn.Store(home).open(SID)
    v = s.verdict()
    assert v["verdict"] == "provider_interrupted" and v["attempt"] == 1
    op = s.resume_operation()
    assert op is not None
    t = op.model_attempt("scripted", "m")
    assert t.attempt == 2
    op.record_assistant(t, "paid")
    op.finish()
    assert s.verdict()["verdict"] == "finished"


def test_every_acknowledged_record_survives_a_kill_at_a_random_moment(home: str) -> None:
    n = random.Random().randint(1, 200)
    lines, _pid = run_until(home, "appends", lines=n)
    acked = [int(line.split()[1]) for line in lines]
    s = cairn.Store(home).open(SID)
    recs = s.records(1)
    assert [r["seq"] for r in recs][: len(acked)] == acked
    assert [r["data"]["content"]["i"] for r in recs] == list(range(len(recs)))
    s.add_custom("crash.test", {"after": True})  # and the session takes appends again
