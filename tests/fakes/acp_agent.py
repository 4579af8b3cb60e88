"""A fake coding agent that speaks ACP (agentclientprotocol.com, protocol version 1) on stdin/stdout.

Written from the protocol's description, not from our client: JSON-RPC 2.0, one message per line;
malformed input gets the JSON-RPC error the spec names (-32700 parse error, -32600 invalid request,
-32601 method not found, -32602 invalid params); nothing but ``initialize`` is accepted before
``initialize``; ``session/new`` wants an absolute ``cwd`` and an ``mcpServers`` list; files are written
only through the client's ``fs/write_text_file`` and only when the client said it can.

The brief steers it (tests write the brief):

* ``WRITE <name>: <text>`` — streams a message, reports a tool call, asks ``session/request_permission``
  to write ``<cwd>/<name>``; allowed → writes it through ``fs/write_text_file``, says ``WROTE <name>``;
  rejected → writes nothing and says ``NOT WRITTEN``; cancelled → stops with ``cancelled``.
* ``HANG`` — starts a heartbeat child (``<cwd>/beat`` rewritten every 0.1 s) and never finishes; on
  ``session/cancel`` it writes ``<cwd>/cancelled`` and answers ``cancelled``, but leaves the child
  running, so only a kill ends it.
* ``ENV <NAME>`` — says whether ``<NAME>`` is in its environment and how long its value is (never the
  value): ``ENV <NAME> set=yes length=12``.
* ``LEAK <NAME>`` — does what a careless agent does: puts ``<NAME>``'s value into a tool call's title and
  into its answer (the client must mask it).
* ``WHERE`` — says the file it runs from and whether it could write a file next to it:
  ``RUNNING FROM <path>; beside it: <written | read-only | error>``.

Started with ``--require <NAME>`` it offers an ``authMethods`` entry in ``initialize`` and answers
``session/new`` with ``-32000 Authentication required`` while ``<NAME>`` is not in its environment.

Standard library only: it runs on the sandbox's own Python (``python3 -I -c SOURCE``).
"""

import json
import os
import re
import subprocess
import sys

VERSION = 1
state = {"initialized": False, "can_write": False, "sessions": {}, "next_id": 1000, "cancelled": set()}
pending = []  # messages read while waiting for an answer, handled afterwards


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def error(ident, code, text):
    send({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": text}})


def update(session_id, body):
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": body}})


def say(session_id, text):
    for i in range(0, len(text), 6):  # in chunks, as a streaming agent does
        update(
            session_id,
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text[i : i + 6]}},
        )


def read_message():
    """The next valid message, or None at EOF; answers malformed lines itself."""
    while True:
        line = sys.stdin.readline()
        if not line:
            return None
        try:
            message = json.loads(line)
        except ValueError:
            error(None, -32700, "Parse error")
            continue
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            error(message.get("id") if isinstance(message, dict) else None, -32600, "Invalid Request")
            continue
        return message


def call(method, params):
    """Send a request to the client and wait for its answer (handling cancels meanwhile)."""
    state["next_id"] += 1
    ident = state["next_id"]
    send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
    while True:
        message = read_message()
        if message is None:
            sys.exit(0)
        if message.get("id") == ident and "method" not in message:
            return message
        if message.get("method") == "session/cancel":
            state["cancelled"].add((message.get("params") or {}).get("sessionId"))
        else:
            pending.append(message)


def required():
    """The environment variable named after ``--require``, or None."""
    args = sys.argv[1:]
    return args[args.index("--require") + 1] if "--require" in args else None


class AuthRequired(Exception):
    pass


def on_initialize(params):
    if not isinstance(params.get("protocolVersion"), int):
        raise ValueError("protocolVersion must be an integer")
    fs = (params.get("clientCapabilities") or {}).get("fs") or {}
    state["can_write"] = fs.get("writeTextFile") is True
    state["initialized"] = True
    return {
        "protocolVersion": min(VERSION, params["protocolVersion"]),
        "agentCapabilities": {
            "loadSession": False,
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False},
        },
        "authMethods": (
            [{"id": "api-key", "name": "API key", "description": f"set {required()}"}] if required() else []
        ),
    }


def on_new(params):
    cwd = params.get("cwd")
    if not isinstance(cwd, str) or not cwd.startswith("/"):
        raise ValueError("cwd must be an absolute path")
    if not isinstance(params.get("mcpServers"), list):
        raise ValueError("mcpServers must be a list")
    if required() and not os.environ.get(required()):
        raise AuthRequired()
    session_id = f"sess-{len(state['sessions']) + 1}"
    state["sessions"][session_id] = cwd
    return {"sessionId": session_id}


def on_prompt(params):
    session_id = params.get("sessionId")
    if session_id not in state["sessions"]:
        raise ValueError("unknown sessionId")
    blocks = params.get("prompt")
    if not isinstance(blocks, list) or not all(isinstance(b, dict) and "type" in b for b in blocks):
        raise ValueError("prompt must be a list of content blocks")
    brief = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
    cwd = state["sessions"][session_id]
    if "HANG" in brief:
        return hang(session_id, cwd)
    told = re.search(r"(ENV|LEAK) (\w+)", brief)
    if told and told.group(1) == "ENV":
        value = os.environ.get(told.group(2))
        say(
            session_id,
            f"ENV {told.group(2)} set={'no' if value is None else 'yes'} length={len(value or '')}",
        )
        return {"stopReason": "end_turn"}
    if told:
        value = os.environ.get(told.group(2), "")
        update(session_id, {"sessionUpdate": "tool_call", "toolCallId": "c-2", "title": f"login {value}"})
        say(session_id, f"My key is {value}, do not tell anyone.")
        return {"stopReason": "end_turn"}
    if "WHERE" in brief:
        return where(session_id)
    wanted = re.search(r"WRITE (\S+): (.*)", brief)
    if not wanted:
        say(session_id, "Nothing to do.")
        return {"stopReason": "end_turn"}
    name, text = wanted.group(1), wanted.group(2)
    path = os.path.join(cwd, name)
    say(session_id, f"I will write {name}. ")
    tool = {"toolCallId": "call-1", "title": f"Write {name}", "kind": "edit", "status": "pending"}
    update(session_id, dict(tool, sessionUpdate="tool_call"))
    answer = call(
        "session/request_permission",
        {
            "sessionId": session_id,
            "toolCall": {"toolCallId": "call-1", "title": f"Write {name}", "rawInput": {"path": path}},
            "options": [
                {"optionId": "yes-always", "name": "Always allow", "kind": "allow_always"},
                {"optionId": "yes-once", "name": "Allow", "kind": "allow_once"},
                {"optionId": "no", "name": "Reject", "kind": "reject_once"},
            ],
        },
    )
    outcome = (answer.get("result") or {}).get("outcome") or {}
    if outcome.get("outcome") == "cancelled" or session_id in state["cancelled"]:
        return {"stopReason": "cancelled"}
    if outcome.get("outcome") != "selected" or outcome.get("optionId") not in ("yes-once", "yes-always"):
        update(session_id, {"sessionUpdate": "tool_call_update", "toolCallId": "call-1", "status": "failed"})
        say(session_id, "NOT WRITTEN: permission was refused.")
        return {"stopReason": "end_turn"}
    if not state["can_write"]:
        say(session_id, "NOT WRITTEN: the client cannot write files.")
        return {"stopReason": "end_turn"}
    wrote = call("fs/write_text_file", {"sessionId": session_id, "path": path, "content": text})
    if "error" in wrote:
        update(session_id, {"sessionUpdate": "tool_call_update", "toolCallId": "call-1", "status": "failed"})
        say(session_id, f"NOT WRITTEN: {wrote['error'].get('message')}")
        return {"stopReason": "end_turn"}
    update(session_id, {"sessionUpdate": "tool_call_update", "toolCallId": "call-1", "status": "completed"})
    say(session_id, f"WROTE {name}")
    return {"stopReason": "end_turn"}


def where(session_id):
    here = os.path.abspath(sys.argv[0])
    try:
        with open(os.path.join(os.path.dirname(here), "planted"), "w") as planted:
            planted.write("x")
        beside = "written"
    except OSError as exc:
        beside = "read-only" if exc.errno == 30 else f"error {exc.errno}"  # 30: EROFS
    say(session_id, f"RUNNING FROM {here}; beside it: {beside}")
    return {"stopReason": "end_turn"}


def hang(session_id, cwd):
    script = "while :; do date +%%s%%N > %s/beat.new && mv -f %s/beat.new %s/beat; sleep 0.1; done" % (
        (cwd,) * 3
    )
    subprocess.Popen(["/bin/sh", "-c", script])
    update(
        session_id,
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "call-9",
            "title": "Watch the disk",
            "status": "in_progress",
        },
    )
    while session_id not in state["cancelled"]:
        message = read_message()
        if message is None:
            sys.exit(0)
        if message.get("method") == "session/cancel":
            state["cancelled"].add((message.get("params") or {}).get("sessionId"))
    with open(os.path.join(cwd, "cancelled"), "w") as mark:  # so a test can see session/cancel came
        mark.write(session_id)
    return {"stopReason": "cancelled"}  # the heartbeat child keeps running: only a kill ends it


HANDLERS = {"initialize": on_initialize, "session/new": on_new, "session/prompt": on_prompt}


def handle(message):
    method, ident = message.get("method"), message.get("id")
    if not isinstance(method, str):
        return  # an answer to nothing we asked
    params = message.get("params", {})
    if "id" not in message:  # a notification: never answered
        if method == "session/cancel":
            state["cancelled"].add(params.get("sessionId") if isinstance(params, dict) else None)
        return
    if method != "initialize" and not state["initialized"]:
        error(ident, -32600, "Invalid Request: initialize first")
        return
    handler = HANDLERS.get(method)
    if handler is None:
        error(ident, -32601, f"Method not found: {method}")
        return
    if not isinstance(params, dict):
        error(ident, -32602, "Invalid params: params must be an object")
        return
    try:
        result = handler(params)
    except ValueError as exc:
        error(ident, -32602, f"Invalid params: {exc}")
        return
    except AuthRequired:
        error(ident, -32000, "Authentication required")
        return
    send({"jsonrpc": "2.0", "id": ident, "result": result})


def main():
    while True:
        message = pending.pop(0) if pending else read_message()
        if message is None:
            return
        handle(message)


if __name__ == "__main__":
    main()
