#!/usr/bin/env python3
"""The benchmark's agent CLI: answers at once and stamps CLOCK_MONOTONIC nanoseconds so that the
benchmark can tell the daemon's time from the CLI's.

A user message "ping" is answered with the assistant text "recv=<ns when the line was read>
emit=<ns just before the answer was written>". "burst N" is answered with N assistant lines;
"stream N MS" with N assistant lines "s<i> emit=<ns>", MS milliseconds apart (a model's answer
arriving item by item).
Launched with --resume, it prints Claude Code's "No conversation found" result (stamping the
moment in $FAKE_STATE/notfound) and exits 1, like the real CLI. $FAKE_SPAWN children
(`sleep 300`) are started in its process group at launch.
"""
import json
import os
import subprocess
import sys
import time

state = os.environ.get("FAKE_STATE", "/tmp")
argv = sys.argv[1:]


def arg(name):
    return argv[argv.index(name) + 1] if name in argv else None


session = arg("--session-id") or arg("--resume")
out = sys.stdout


def write(obj):
    out.write(json.dumps(obj) + "\n")
    out.flush()


if arg("--resume"):
    with open(os.path.join(state, "notfound"), "a") as f:
        f.write("%d\n" % time.monotonic_ns())
    write({"type": "result", "subtype": "error_during_execution", "is_error": True,
           "num_turns": 0, "session_id": session,
           "errors": ["No conversation found with session ID: %s" % session]})
    sys.exit(1)

for _ in range(int(os.environ.get("FAKE_SPAWN", "0"))):
    subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)

for line in sys.stdin:
    recv = time.monotonic_ns()
    msg = json.loads(line)
    if msg.get("type") == "control_request":
        write({"type": "control_response", "response": {"subtype": "success",
               "request_id": msg["request_id"], "response": {}}})
        continue
    if msg.get("type") != "user":
        continue
    text = msg["message"]["content"]
    write({"type": "user", "isReplay": True, "session_id": session,
           "message": {"role": "user", "content": text}})
    if text.startswith("stream "):
        _, n, ms = text.split()
        for i in range(int(n)):
            if i:
                time.sleep(int(ms) / 1000)
            write({"type": "assistant", "session_id": session, "message": {
                "content": [{"type": "text", "text": "s%d emit=%d" % (i, time.monotonic_ns())}]}})
    elif text.startswith("burst "):
        n = int(text.split()[1])
        for i in range(n):
            out.write(json.dumps({"type": "assistant", "session_id": session, "message": {
                "content": [{"type": "text", "text": "b%d" % i}]}}) + "\n")
        out.flush()
    else:
        emit = time.monotonic_ns()
        write({"type": "assistant", "session_id": session, "message": {
            "content": [{"type": "text", "text": "recv=%d emit=%d" % (recv, emit)}]}})
    write({"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
           "total_cost_usd": 0, "session_id": session})
