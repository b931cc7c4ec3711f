#!/usr/bin/env python3
"""A scripted stand-in for the Claude Code CLI, for faults the real CLI will not produce on demand
(tier 2 of the tests). It speaks the same stream-json protocol (see shared/claude-code-facts.md).

Environment:
  FAKE_CLAUDE_STATE  a folder: launches.jsonl (argv of each launch, in order) and messages.jsonl
                     (each user message read, with its launch number) are appended there.
  FAKE_CLAUDE_PLAN   a JSON list; launch N (0-based) follows entry N, or the last entry:
    {"mode": "normal"}             answer every message: init, replay, assistant, result
    {"mode": "not_found", "linger_s": S, "ignore_term": B}
                                   print the CLI's "No conversation found" result, then wait S s
    {"mode": "in_use"}             print "Error: Session ID X is already in use." on stderr, exit 1
    {"mode": "die_before_replay", "code": C}   read one message, exit C without a replay
    {"mode": "die_after_replay", "code": C}    replay one message, exit C
    {"mode": "unrecognized_error", "code": C, "text": T}  at start, an error result in words the
                                   daemon does not know (T, else a future CLI's "not found"), then exit C
    {"mode": "garbage"}            print lines that are not the protocol, then behave normally
    {"mode": "die_at_start", "code": C}        exit C at once
    {"mode": "auth_error"}         replay, then an authentication error result, then exit 1
    {"mode": "auth_exit"}          replay, then an authentication failure on stderr only, exit 1
    {"mode": "silent"}             read messages and never answer
    {"mode": "take_then_die"}      write the message into the transcript, then exit 1 unreplayed
    {"mode": "mute"}               print nothing at all, read nothing (a CLI hung at start-up)
    {"mode": "hook_then_hang"}     print a hook's progress line and a plain line, then hang (a
                                   CLI hung in a start-up hook)
    {"mode": "hang_after_replay"}  replay a message, write the transcript, then hang without
                                   reading stdin (an interrupt is never answered)
  Any entry may have "report_session": "ID" (init, replay and result carry ID while the transcript
  is still written under the launched id, as a CLI that reports another id), "fork": true (the
  events carry a new id and the transcript is written under it, as --fork-session or /clear),
  "result_is_error": true (the result says subtype "success" with is_error true, as an API 403),
  "stream_s": S (after the replay, stream the reply as text deltas for S seconds first),
  "reply_after_s": S (after the replay, wait S seconds before answering),
  "reply_size": N (the reply is N letters "x"),
  "cost_usd": X (each result adds X US dollars to this process's running total, told as its
  "total_cost_usd", as Claude Code tells the conversation's cost so far; default 0),
  "usage": {...} (each result's usage, for example {"input_tokens": 10, "output_tokens": 2}),
  "no_cost": true (results tell no "total_cost_usd" at all, as a CLI that tells tokens only),
  "burst": N (before the reply, N assistant messages "burst 0" … in one write),
  "stream_reply": true (the reply is streamed as one text delta before its assistant message),
  "stop_reading_after": N (after answering N messages, read nothing more: stdin's pipe fills,
  as a CLI that stopped reading, and a big message written to it stays cut),
  "ignore_control": true (control requests other than `initialize` get no answer),
  "ignore_term": true (SIGTERM ignored), "not_found_on_term": true (on
  SIGTERM, print the "No conversation found" result and linger, ignoring SIGTERM), "reply": "text", and
  "spawn": ["shell command", ...]: started at launch as children (their pids are appended to
  spawned.jsonl in the state folder).
  "run_until_interrupt": ["shell command", ...]: "tools_after_s" (default 1) after the first
  replay, as a model's answer would come, the turn runs these as
  children (pids in tools.jsonl) and waits; an `interrupt` control request ends the turn (an
  `error_during_execution` result) and leaves them running, as Codex was seen to (issue 23).
  "tools_on_message": N (default 1): the Nth message of the launch is the one that runs them;
  the ones before are answered as usual. "tools_before_replay": true: they start
  "tools_after_s" after the message is read and before its replay, as a hook the prompt ran
  would (Claude Code prints the replay only once the model answered). "init_at_read": true:
  the turn's `system`/`init` is printed as the message is read, before those and the replay,
  as Claude Code 2.1.328 prints it before it asks the model (tests/facts/claude.rs).
  Big output, in "normal" mode:
    "echo_bytes": N    the reply is the message repeated and cut to N characters (N bytes for
                       an ASCII message), e.g. 12 MiB of assistant text from a short message
    "ask": {"tool": T, "input_bytes": N, "count": K, "input": {...}}
                       before replying, ask permission for tool T (a can_use_tool control
                       request `ask-L-N`: launch L, its Nth question) with input {"file_path": "/dev/null", "content": N "x"s}
                       (or "input" when given), K times at once (default 1), wait for every
                       answer and append {"behavior", "input_equal"} to answers.jsonl for each;
                       with "suggestions": [...] they are the request's permission_suggestions,
                       and each answer's updatedPermissions (or null) goes to grants.jsonl
    "stream_then_wait": true
                       stream the reply as one text delta (stream_event lines), then wait until
                       the file "release" appears in the state folder before the assistant message
"""
import json
import os
import signal
import sys
import time

state = os.environ.get("FAKE_CLAUDE_STATE", "/tmp")
plan = json.loads(os.environ.get("FAKE_CLAUDE_PLAN", '[{"mode": "normal"}]'))
os.makedirs(state, exist_ok=True)
with open(os.path.join(state, "launches.jsonl"), "a+") as f:
    f.seek(0)
    launch = sum(1 for _ in f)
    f.write(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "pid": os.getpid()}) + "\n")
step = plan[min(launch, len(plan) - 1)]
mode = step.get("mode", "normal")
if step.get("ignore_term"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def not_found_on_term(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.stdout.write(json.dumps({"type": "result", "subtype": "error_during_execution",
                                 "is_error": True, "num_turns": 0, "session_id": "x",
                                 "errors": ["No conversation found with session ID: x"]}) + "\n")
    sys.stdout.flush()
    time.sleep(60)


if step.get("not_found_on_term"):
    signal.signal(signal.SIGTERM, not_found_on_term)


def arg(name):
    a = sys.argv[1:]
    return a[a.index(name) + 1] if name in a else None


session = arg("--session-id") or arg("--resume")
reported = step.get("report_session") or session
if step.get("fork"):
    import uuid
    session = reported = str(uuid.uuid4())


def out(obj):
    sys.stdout.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    sys.stdout.flush()


def slug(path):
    units = path.encode("utf-16-le")
    res = []
    for i in range(0, len(units), 2):
        u = units[i] | (units[i + 1] << 8)
        res.append(chr(u) if u < 128 and chr(u).isalnum() else "-")
    return "".join(res)


def write_transcript(entry=None):
    base = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.environ["HOME"], ".claude")
    folder = os.path.join(base, "projects", slug(os.getcwd())[:200])
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, session + ".jsonl"), "a") as f:
        f.write(json.dumps(entry or {}) + "\n")


spent = [0.0]  # this process's running total, told as each result's total_cost_usd


def result(subtype="success", errors=None):
    spent[0] += step.get("cost_usd", 0)
    r = {"type": "result", "subtype": subtype, "is_error": subtype != "success", "num_turns": 1,
         "duration_ms": 1, "total_cost_usd": spent[0] or 0, "usage": step.get("usage", {}),
         "session_id": reported}
    if step.get("no_cost"):
        del r["total_cost_usd"]
    if errors:
        r["errors"] = errors
    if subtype == "success":
        r["result"] = "ok"
    if step.get("result_is_error"):
        r["is_error"] = True
        r["result"] = "API Error: 403 {\"type\":\"error\",\"error\":{\"type\":\"permission_error\"}}"
    out(r)


if mode == "not_found":
    result("error_during_execution", ["No conversation found with session ID: %s" % session])
    time.sleep(step.get("linger_s", 0))
    sys.exit(1)
import subprocess
for cmd in step.get("spawn", []):
    child = subprocess.Popen(["/bin/sh", "-c", cmd], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(state, "spawned.jsonl"), "a") as f:
        f.write(json.dumps({"launch": launch, "pid": child.pid, "cmd": cmd}) + "\n")
if mode == "mute":
    time.sleep(600)
    sys.exit(0)
if mode == "hook_then_hang":
    out({"type": "system", "subtype": "hook_started", "session_id": session})
    out("Loading configuration...")
    time.sleep(600)
    sys.exit(0)
if mode == "die_at_start":
    sys.exit(step.get("code", 1))
if mode == "unrecognized_error":
    result("error_during_execution", [step.get("text", "The conversation %s went missing" % session)])
    sys.exit(step.get("code", 1))
if mode == "in_use":
    # On stderr, as Claude Code 2.1.284 to 2.1.332 print it (tests/facts/claude.rs).
    sys.stderr.write("Error: Session ID %s is already in use.\n" % session)
    sys.stderr.flush()
    sys.exit(1)
if mode == "garbage":
    out("this is not json")
    out("[1, 2, 3]")
    out("x" * 300000)

def start_tools(cmds):
    for cmd in cmds:
        tool = subprocess.Popen(["/bin/sh", "-c", cmd], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(state, "tools.jsonl"), "a") as f:
            f.write(json.dumps({"launch": launch, "pid": tool.pid, "cmd": cmd}) + "\n")


for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    msg = json.loads(line)
    if msg.get("type") == "control_request":
        if step.get("ignore_control") and msg["request"].get("subtype") != "initialize":
            continue
        out({"type": "control_response", "response": {"subtype": "success",
             "request_id": msg["request_id"], "response": {}}})
        continue
    if msg.get("type") != "user":
        continue
    text = msg["message"]["content"]
    messages_read = globals().get("messages_read", 0) + 1
    with open(os.path.join(state, "messages.jsonl"), "a") as f:
        f.write(json.dumps({"launch": launch, "text": text}) + "\n")
    if mode == "die_before_replay":
        sys.exit(step.get("code", 1))
    if mode == "silent":
        continue
    if mode == "take_then_die":
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000Z"
        write_transcript({"type": "user", "message": {"role": "user", "content": text},
                          "timestamp": stamp})
        sys.exit(1)
    if step.get("transcript_lines"):
        # As Claude Code 2.1.328 keeps its transcript: the message's line (chained by uuid and
        # parentUuid, with its time) before its replay, the answer's after the answer.
        import uuid as uuidlib
        prompt_uuid = str(uuidlib.uuid4())
        write_transcript({"type": "user", "uuid": prompt_uuid,
                          "parentUuid": globals().get("last_uuid"),
                          "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000Z",
                          "message": {"role": "user", "content": text}})
        last_uuid = prompt_uuid
    init_line = {"type": "system", "subtype": "init", "session_id": reported, "model": "fake",
                 "permissionMode": "default", "cwd": os.getcwd(), "tools": []}
    if step.get("init_at_read"):
        out(init_line)
    if (step.get("tools_before_replay") and not globals().get("tools_ran")
            and messages_read == step.get("tools_on_message", 1)):
        time.sleep(step.get("tools_after_s", 1))
        start_tools(step["run_until_interrupt"])
    time.sleep(step.get("replay_after_s", 0))
    if not step.get("init_at_read"):
        out(init_line)
    out({"type": "user", "isReplay": True, "session_id": reported,
         "message": {"role": "user", "content": text}})
    if mode == "hang_after_replay":
        write_transcript({"type": "user", "message": {"role": "user", "content": text}})
        time.sleep(600)
    if mode == "die_after_replay":
        sys.exit(step.get("code", 1))
    if mode == "auth_error":
        result("error_during_execution", ["Invalid API key · Please run /login"])
        sys.exit(1)
    if mode == "auth_exit":
        sys.stderr.write("Invalid API key · Please run /login\n")
        sys.stderr.flush()
        sys.exit(1)
    write_transcript()
    if (step.get("run_until_interrupt") and not globals().get("tools_ran")
            and messages_read == step.get("tools_on_message", 1)):
        tools_ran = True
        if not step.get("tools_before_replay"):
            # The model's round trip: a tool starts well after the replay.
            time.sleep(step.get("tools_after_s", 1))
            start_tools(step["run_until_interrupt"])
        while True:
            request = sys.stdin.readline()
            if not request:
                sys.exit(0)
            request = json.loads(request)
            if request.get("type") != "control_request":
                continue
            out({"type": "control_response", "response": {"subtype": "success",
                 "request_id": request["request_id"], "response": {}}})
            if request["request"].get("subtype") == "interrupt":
                break
        result("error_during_execution", ["Request interrupted by user"])
        continue
    reply = step.get("reply", "fake: " + text)
    if step.get("reply_size"):
        reply = "x" * step["reply_size"]
    time.sleep(step.get("reply_after_s", 0))
    if step.get("stream_s"):
        pieces = 30
        for i in range(pieces):
            out({"type": "stream_event", "event": {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "text_delta", "text": "piece%d " % i}}})
            time.sleep(step["stream_s"] / pieces)
    if step.get("stream_reply"):
        out({"type": "stream_event", "session_id": session, "event": {"type": "message_start"}})
        out({"type": "stream_event", "session_id": session, "event": {
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": reply}}})
    if "echo_bytes" in step:
        n = step["echo_bytes"]
        reply = (text * (n // max(len(text), 1) + 1))[:n]
    ask = step.get("ask")
    if ask:
        tool_input = ask.get("input") or {"file_path": "/dev/null",
                                          "content": "x" * ask.get("input_bytes", 0)}
        asked = []
        for _ in range(ask.get("count", 1)):
            question = globals().get("questions", 0)
            globals()["questions"] = question + 1
            asked.append(ask.get("rid_prefix", "ask-") + "%d-%d" % (launch, question))
            request = {"subtype": "can_use_tool", "tool_name": ask["tool"],
                       "input": tool_input, "tool_use_id": "toolu_ask"}
            if "suggestions" in ask:
                request["permission_suggestions"] = ask["suggestions"]
            out({"type": "control_request", "request_id": asked[-1], "request": request})
        while asked:
            answer = json.loads(sys.stdin.readline())
            if answer.get("type") != "control_response":
                continue
            asked = [a for a in asked if a != answer["response"].get("request_id")]
            decided = answer["response"]["response"]
            with open(os.path.join(state, "answers.jsonl"), "a") as f:
                f.write(json.dumps({"behavior": decided.get("behavior"),
                                    "input_equal": decided.get("updatedInput") == tool_input})
                        + "\n")
            if "suggestions" in ask:
                with open(os.path.join(state, "grants.jsonl"), "a") as f:
                    f.write(json.dumps({"updatedPermissions":
                                        decided.get("updatedPermissions")}) + "\n")
    if step.get("stream_then_wait"):
        out({"type": "stream_event", "session_id": session, "event": {"type": "message_start"}})
        out({"type": "stream_event", "session_id": session, "event": {
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": reply}}})
        while not os.path.exists(os.path.join(state, "release")):
            time.sleep(0.02)
    if step.get("burst"):
        # Many messages in one write, as a CLI that prints a burst: they arrive together.
        sys.stdout.write("".join(json.dumps({"type": "assistant", "session_id": reported,
                                             "message": {"role": "assistant", "content": [
                                                 {"type": "text", "text": "burst %d" % i}]}})
                                 + "\n" for i in range(step["burst"])))
        sys.stdout.flush()
    out({"type": "assistant", "session_id": reported, "message": {"role": "assistant", "content": [
        {"type": "text", "text": reply}]}})
    if step.get("transcript_lines"):
        answer_uuid = str(uuidlib.uuid4())
        write_transcript({"type": "assistant", "uuid": answer_uuid, "parentUuid": last_uuid,
                          "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000Z",
                          "message": {"role": "assistant", "stop_reason": "end_turn",
                                      "content": [{"type": "text", "text": reply}]}})
        last_uuid = answer_uuid
    result()
    with open(os.path.join(state, "printed.jsonl"), "a") as f:
        f.write(json.dumps({"launch": launch, "text": text}) + "\n")
    answered = globals().get("answered", 0) + 1
    if answered == step.get("stop_reading_after"):
        time.sleep(600)

if mode == "silent":
    # Like the real CLI with work left: it does not end when stdin closes.
    time.sleep(60)
