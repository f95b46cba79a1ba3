#!/usr/bin/env python3
"""A small MCP server for the tool tests: JSON-RPC 2.0 over stdin/stdout, one message a
line (MCP's stdio transport). Its tools exercise what a client has to cope with.

  echo {text}         -> "echo: <text>"
  add {a, b}          -> the sum as text
  fail {}             -> a result with isError
  notify {}           -> a progress notification first, then the result
  ping_first {}       -> asks the client for a ping (a request from the server) and
                         answers once the client has replied
  sleep {seconds}     -> sleeps, then "slept"
  crash {}            -> exits without answering
  whoami {}           -> "<pid> <cwd> <ONEBIT_MCP_TEST env var> <grandchild pid or ->"
  bare                -> a tool with no inputSchema, marked read-only

Flags: --exit-at-once (quits before reading anything), --no-tools (lists none),
--grandchild (starts a process that inherits stdin/stdout and outlives this one)."""
import json
import os
import subprocess
import sys
import time

GRANDCHILD = None


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def schema(props, required=()):
    return {"type": "object", "properties": props, "required": list(required)}


TOOLS = [
    {"name": "echo", "description": "Echo the text", "inputSchema": schema({"text": {"type": "string"}}, ["text"])},
    {"name": "add", "description": "Add two numbers", "inputSchema": schema({"a": {"type": "number"}, "b": {"type": "number"}})},
    {"name": "fail", "description": "Always an error result", "inputSchema": schema({})},
    {"name": "notify", "description": "Notification before the answer", "inputSchema": schema({})},
    {"name": "ping_first", "description": "Pings the client first", "inputSchema": schema({})},
    {"name": "sleep", "description": "Sleep", "inputSchema": schema({"seconds": {"type": "number"}})},
    {"name": "crash", "description": "Exit without answering", "inputSchema": schema({})},
    {"name": "whoami", "description": "pid, cwd and an env var", "inputSchema": schema({})},
    {"name": "bare", "description": "No schema", "annotations": {"readOnlyHint": True}},
]


def text(t):
    return {"content": [{"type": "text", "text": t}]}


def call(name, args, rid):
    if name == "echo":
        return text("echo: " + str(args.get("text", "")))
    if name == "add":
        return text(str(args.get("a", 0) + args.get("b", 0)))
    if name == "fail":
        return {"content": [{"type": "text", "text": "it failed"}], "isError": True}
    if name == "notify":
        send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})
        return text("notified")
    if name == "ping_first":
        send({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})
        while True:  # the client's reply to our ping must come before we answer
            m = json.loads(sys.stdin.readline())
            if m.get("id") == "srv-1":
                return text("pong seen" if "result" in m else "ping refused")
    if name == "sleep":
        time.sleep(float(args.get("seconds", 1)))
        return text("slept")
    if name == "crash":
        os._exit(3)
    if name == "whoami":
        gc = GRANDCHILD.pid if GRANDCHILD else "-"
        return text(f"{os.getpid()} {os.getcwd()} {os.environ.get('ONEBIT_MCP_TEST', '-')} {gc}")
    if name == "bare":
        return text("bare")
    return None


def main():
    global GRANDCHILD
    if "--exit-at-once" in sys.argv:
        sys.exit(1)
    if "--grandchild" in sys.argv:
        GRANDCHILD = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        rid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
        if rid is None:
            continue  # a notification
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                                                          "serverInfo": {"name": "onebit-test", "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [] if "--no-tools" in sys.argv else TOOLS}})
        elif method == "tools/call":
            res = call(params.get("name"), params.get("arguments") or {}, rid)
            if res is None:
                send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "no tool " + str(params.get("name"))}})
            else:
                send({"jsonrpc": "2.0", "id": rid, "result": res})
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no method " + str(method)}})


if __name__ == "__main__":
    main()
