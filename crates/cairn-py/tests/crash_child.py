"""A child process the crash tests SIGKILL: it does one thing to a session,
prints a line once that thing is acknowledged, and waits to be killed."""

from __future__ import annotations

import sys
import time

import cairn


def main() -> None:
    home, sid, what = sys.argv[1], sys.argv[2], sys.argv[3]
    store = cairn.Store(home)
    s = store.create(id=sid)
    if what == "appends":
        # Acknowledge record after record until killed.
        i = 0
        while True:
            a = s.add_custom("crash.test", {"i": i})
            print(f"acked {a.seq}", flush=True)
            i += 1
    op = s.start_operation("pay the invoice")
    if what == "model":
        op.model_attempt("scripted", "m")
        print("attempted", flush=True)
    elif what == "tool":
        t = op.model_attempt("scripted", "m")
        op.record_assistant(
            t,
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_call", "call_id": "p1", "name": "pay", "arguments": {"amount": 5}}
                ],
            },
        )
        ticket = op.tool("p1", effect="side_effect")
        # The tool "runs" (T1 is durable); the process dies before T2.
        print(f"dispatched {ticket.key}", flush=True)
    else:
        raise SystemExit(f"unknown step {what}")
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
