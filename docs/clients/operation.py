#!/usr/bin/env python3
"""One operation driven end to end over cairn's HTTP API, with the Python
standard library only.

The "model" here is scripted (it asks for one tool call, then answers), so
the example runs offline; a real harness calls its provider where the
comments say. What matters is the order, which gives the crash guarantees:
announce the model attempt before calling the model, dispatch the tool (T1)
and wait for the answer before running it, record its result (T2), finish.

    CAIRN_URL=http://127.0.0.1:7171 CAIRN_TOKEN=$(cat ~/.local/share/cairn/server-token) \
        python3 docs/clients/operation.py
"""

import json
import os
import urllib.error
import urllib.request

BASE = os.environ.get("CAIRN_URL", "http://127.0.0.1:7171").rstrip("/")
TOKEN = os.environ["CAIRN_TOKEN"]


def call(method, path, body=None):
    """One request; an error answer raises with the server's message and hint."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + TOKEN)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req) as res:
            text = res.read()
            return json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        err = json.loads(e.read())["error"]
        raise SystemExit(f"{method} {path}: {err['code']}: {err['message']} ({err['hint']})")


def text(role, t):
    return {"role": role, "content": [{"type": "text", "text": t}]}


def word_count(arguments):
    """The tool: read-only, so safe to run again after a crash."""
    return str(len(arguments["text"].split()))


session = call("POST", "/sessions", {"title": "python client example"})
sid = session["id"]
op = call("POST", f"/sessions/{sid}/operations", {"input": text("user", "How many words in 'the log is the truth'?")})["op"]
ops = f"/sessions/{sid}/operations/{op}"

# 1. Announce the model attempt, then call the model (scripted here).
ticket = call("POST", f"{ops}/attempts", {"provider": "scripted", "model": "example"})
reply = {"role": "assistant", "content": [
    {"type": "tool_call", "call_id": "call-1", "name": "word_count", "arguments": {"text": "the log is the truth"}}]}
call("POST", f"{ops}/replies", {"entry": ticket["entry"], "message": reply, "usage": {"input": 12, "output": 9}})

# 2. T1: dispatch. The answer comes only once T1 is durable; run the tool after it.
t1 = call("POST", f"{ops}/dispatches", {"call_id": "call-1", "effect": "read_only"})
output = word_count(reply["content"][0]["arguments"])

# 3. T2: the result, synced before the answer.
call("POST", f"{ops}/results", {"call_id": t1["call_id"], "content": [{"type": "text", "text": output}]})

# 4. The model answers; the operation finishes.
ticket = call("POST", f"{ops}/attempts", {"provider": "scripted", "model": "example"})
call("POST", f"{ops}/replies", {"entry": ticket["entry"], "message": text("assistant", f"{output} words.")})
done = call("POST", f"{ops}/finish", {"outcome": "completed"})

print(json.dumps({"session": sid, "op": op, "key": t1["key"], "status": done["status"], "verdict": done["verdict"]["verdict"]}))
