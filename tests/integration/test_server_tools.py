"""llama-server's agent features in `1bit serve` (issue 44): the built-in tools (--tools,
GET/POST /tools), MCP servers (--mcp-servers-json/-config, our own mcp_echo.py) and the
CORS proxy (--ui-mcp-proxy, /cors-proxy against a local http.server); all off by
default, all behind --api-key, none able to hold up the server or outlive it."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from serverutil import BIN, Server, default_model

HERE = os.path.dirname(os.path.abspath(__file__))
ECHO = os.path.join(HERE, "mcp_echo.py")


def mcp_json(servers):
    return json.dumps({"mcpServers": servers})


def echo_server(*args, **extra):
    return dict({"command": sys.executable, "args": [ECHO, *args]}, **extra)


def tool(s, name, params=None, headers=None, **body):
    return requests.post(s.url + "/tools", json=dict({"tool": name, "params": params or {}}, **body),
                         headers=headers, timeout=120)


def ok(s, name, params=None, headers=None):
    r = tool(s, name, params, headers)
    assert r.status_code == 200 and "error" not in r.json(), r.text
    return r.json()


def err(s, name, params=None):
    r = tool(s, name, params)
    assert r.status_code == 200 and "error" in r.json(), r.text
    return r.json()["error"]


def sse(r):
    return [json.loads(ln[6:].decode()) for ln in r.iter_lines() if ln.startswith(b"data: ")]


def gone(pid):
    try:
        os.kill(pid, 0)
        # a zombie not yet reaped by its parent counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")
    except (ProcessLookupError, FileNotFoundError):
        return True


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    wd = tmp_path_factory.mktemp("mcpwd")
    s = Server(["--tools", "all", "--mcp-servers-json", mcp_json({
        "echo": echo_server(env={"ONEBIT_MCP_TEST": "from-config"}, cwd=str(wd)),
        "quick": echo_server(timeout_ms=700),
        "bad": {"command": "no_such_command_onebit_12345"},
        "dies": echo_server("--exit-at-once"),
        "web": {"url": "http://127.0.0.1:1/mcp"},
    })])
    s.mcp_wd = str(wd)
    yield s
    rc, out = s.stop()
    assert rc == 0, out


# ---- off by default, the listing ---------------------------------------------------------

def test_off_by_default():
    s = Server([])
    try:
        for m in (requests.get, requests.post):
            for path in ("/tools", "/cors-proxy?url=http://127.0.0.1:1/"):
                r = m(s.url + path, timeout=30)
                assert r.status_code == 403 and r.json()["error"]["type"] == "feature_disabled", r.text
    finally:
        s.stop()


def test_listing(srv):
    r = requests.get(srv.url + "/tools", timeout=30)
    assert r.status_code == 200
    tools = {t["tool"]: t for t in r.json()}
    builtin = [t["tool"] for t in r.json() if t["type"] == "builtin"]
    assert builtin == ["read_file", "file_glob_search", "grep_search", "exec_shell_command", "write_file", "edit_file",
                       "get_datetime", "get_info"]
    for name, t in tools.items():
        d = t["definition"]
        assert d["type"] == "function" and d["function"]["name"] == name and t["display_name"]
        assert d["function"]["parameters"]["type"] == "object" and "properties" in d["function"]["parameters"]
    writes = {n for n, t in tools.items() if t["permissions"]["write"] and t["type"] == "builtin"}
    assert writes == {"exec_shell_command", "write_file", "edit_file"}
    assert tools["read_file"]["definition"]["function"]["parameters"]["required"] == ["path"]
    edits = tools["edit_file"]["definition"]["function"]["parameters"]["properties"]["edits"]
    assert edits["type"] == "array" and edits["items"]["required"] == ["old_text", "new_text"]
    # MCP tools as <server>_<tool>; the servers that could not start list nothing
    mcp = {n for n, t in tools.items() if t["type"] == "mcp"}
    assert {"echo_echo", "echo_add", "quick_sleep", "echo_bare"} <= mcp
    assert not [n for n in mcp if n.startswith(("bad_", "dies_", "web_"))]
    assert tools["echo_echo"]["definition"]["function"]["description"] == "Echo the text"
    assert tools["echo_echo"]["permissions"]["write"] is True  # not said to be read-only
    assert tools["echo_bare"]["permissions"]["write"] is False
    assert tools["echo_bare"]["definition"]["function"]["parameters"] == {"type": "object", "properties": {}}


def test_bad_requests(srv):
    r = requests.post(srv.url + "/tools", data="{not json", timeout=30)
    assert r.status_code == 400
    r = requests.post(srv.url + "/tools", json={"params": {}}, timeout=30)
    assert r.status_code == 400
    r = tool(srv, "no_such_tool")
    assert r.status_code == 404 and "unknown tool" in r.json()["error"]["message"]
    r = tool(srv, "read_file", {"path": "x"}, stream=True)
    assert r.status_code == 404 and "stream" in r.json()["error"]["message"]
    r = tool(srv, "read_file", {})  # a required parameter missing: 400, as llama-server
    assert r.status_code == 400 and "path" in r.json()["error"]["message"]
    r = tool(srv, "read_file", {"path": 5})
    assert r.status_code == 400
    r = requests.put(srv.url + "/tools", json={}, timeout=30)
    assert r.status_code == 405


# ---- files -------------------------------------------------------------------------------

def test_read_file(srv, tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("one\ntwo\nthree")
    assert ok(srv, "read_file", {"path": str(f)})["plain_text_response"] == "one\ntwo\nthree\n"
    r = ok(srv, "read_file", {"path": str(f), "start_line": 2, "end_line": 3, "append_loc": True})
    assert r["plain_text_response"] == "2\u2192two\n3\u2192three\n"
    assert "cannot stat" in err(srv, "read_file", {"path": str(tmp_path / "missing")})
    assert "cannot stat" in err(srv, "read_file", {"path": str(tmp_path)})
    big = tmp_path / "big.txt"
    big.write_text("".join(f"line {i}\n" for i in range(5000)))
    assert "too large" in err(srv, "read_file", {"path": str(big)})
    part = ok(srv, "read_file", {"path": str(big), "start_line": 10, "end_line": 12})["plain_text_response"]
    assert part == "line 9\nline 10\nline 11\n"
    # a range over 16 KiB is cut, and says so
    cut = ok(srv, "read_file", {"path": str(big), "start_line": 1, "end_line": 5000})["plain_text_response"]
    assert len(cut) <= 16 * 1024 + len("[output truncated]") and cut.endswith("\nline 1748\n[output truncated]")
    # relative paths: to x-tool-cwd; '~' is $HOME
    assert "two" in ok(srv, "read_file", {"path": "a.txt"}, headers={"x-tool-cwd": str(tmp_path)})["plain_text_response"]
    assert "two" in ok(srv, "read_file", {"path": "../" + tmp_path.name + "/./a.txt", "cwd": str(tmp_path)})["plain_text_response"]
    # invalid UTF-8 becomes U+FFFD instead of breaking the JSON
    (tmp_path / "bin.txt").write_bytes(b"ok \xff\xfe end\n")
    assert ok(srv, "read_file", {"path": str(tmp_path / "bin.txt")})["plain_text_response"] == "ok \ufffd\ufffd end\n"


def test_write_and_edit(srv, tmp_path):
    f = tmp_path / "deep" / "er" / "f.txt"
    r = ok(srv, "write_file", {"path": str(f), "content": "alpha\nbeta\ngamma\n"})
    assert r["result"] == "file written successfully" and r["bytes"] == 17 and f.read_text() == "alpha\nbeta\ngamma\n"
    r = ok(srv, "edit_file", {"path": str(f), "edits": [{"old_text": "beta", "new_text": "BETA"},
                                                       {"old_text": "alpha\n", "new_text": ""}]})
    assert r["result"] == "file edited successfully" and r["edits_applied"] == 2
    assert f.read_text() == "BETA\ngamma\n"
    f.write_text("x\nx\n")
    assert "unique" in err(srv, "edit_file", {"path": str(f), "edits": [{"old_text": "x", "new_text": "y"}]})
    f.write_text("a b c\n")
    assert "overlap" in err(srv, "edit_file", {"path": str(f), "edits": [{"old_text": "a b", "new_text": "1"},
                                                                        {"old_text": "b c", "new_text": "2"}]})
    assert "not found" in err(srv, "edit_file", {"path": str(f), "edits": [{"old_text": "zzz", "new_text": "1"}]})
    assert "no changes" in err(srv, "edit_file", {"path": str(f), "edits": [{"old_text": "b", "new_text": "b"}]})
    assert "non-empty" in err(srv, "edit_file", {"path": str(f), "edits": []})
    assert "empty" in err(srv, "edit_file", {"path": str(f), "edits": [{"old_text": "", "new_text": "1"}]})
    assert tool(srv, "edit_file", {"path": str(f), "edits": [{"old_text": "a"}]}).status_code == 400
    assert f.read_text() == "a b c\n"  # every refusal left the file alone
    # typographic quotes and spaces at line ends match; the other lines stay byte for byte
    f.write_text("keep \u201cthis\u201d  \nsay \u201chello\u201d   \nkeep\ttabs \n")
    ok(srv, "edit_file", {"path": str(f), "edits": [{"old_text": 'say "hello"', "new_text": "say bye"}]})
    assert f.read_text() == "keep \u201cthis\u201d  \nsay bye\nkeep\ttabs \n"
    assert "failed to open" in err(srv, "edit_file", {"path": str(tmp_path / "nope"), "edits": [{"old_text": "a", "new_text": "b"}]})


# ---- search ------------------------------------------------------------------------------

@pytest.fixture
def tree(tmp_path):
    for p, t in {"top.txt": "needle one\n", "a/mid.txt": "x\nNeedle two\ny\n", "a/b/deep.c": "int needle3;\n",
                 "build/gen.txt": "needle in build\n", "node_modules/m/i.js": "needle\n", "bin.dat": "needle\0\n",
                 "sub/top.txt": "z\n"}.items():
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).write_text(t)
    os.symlink(tmp_path / "a", tmp_path / "loop")  # a link to a directory is listed, never entered
    (tmp_path / "empty").mkdir()
    return tmp_path


def entries(srv, **params):
    return [e["path"] + ("/" if e["type"] == "dir" else "") for e in ok(srv, "file_glob_search", params)["entries"]]


def test_file_glob_search(srv, tree):
    base = str(tree)
    assert entries(srv, path=base) == ["bin.dat", "top.txt", "a/mid.txt", "a/b/deep.c", "sub/top.txt"]
    assert entries(srv, path=base, type="dir") == ["a/", "build/", "empty/", "loop/", "node_modules/", "sub/", "a/b/"]
    assert entries(srv, path=base, include="*.txt", max_depth=1) == ["top.txt"]
    assert entries(srv, path=base, include="sub/*.txt") == ["sub/top.txt"]          # any depth, the root too
    assert entries(srv, path=base, include="**/b/*.c") == ["a/b/deep.c"]
    assert entries(srv, path=base, include="/top.txt") == ["top.txt"]              # anchored at the base
    assert entries(srv, path=base, include="*.[ct]xt") == ["top.txt", "a/mid.txt", "sub/top.txt"]
    assert entries(srv, path=base, exclude="a/**") == ["bin.dat", "top.txt", "sub/top.txt"]
    r = ok(srv, "file_glob_search", {"path": base, "limit": 2})
    assert len(r["entries"]) == 2 and "Total matches: 5" in r["plain_text_response"] and r["base"] == base
    assert "invalid type" in err(srv, "file_glob_search", {"path": base, "type": "x"})
    assert "invalid limit" in err(srv, "file_glob_search", {"path": base, "limit": 0})
    assert "not a directory" in err(srv, "file_glob_search", {"path": base + "/top.txt"})


def test_file_glob_search_git(srv, tmp_path):
    """Inside a git checkout the files git ignores are left out."""
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("SKIPPED: no git")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("*.log\n")
    (tmp_path / "kept.c").write_text("x")
    (tmp_path / "noise.log").write_text("x")
    assert sorted(entries(srv, path=str(tmp_path))) == [".gitignore", "kept.c"]


def test_grep_search(srv, tree):
    base = str(tree)
    t = ok(srv, "grep_search", {"path": base, "pattern": "needle"})["plain_text_response"]
    assert t.splitlines()[:2] == ["top.txt:needle one", "a/b/deep.c:int needle3;"]
    assert "Total matches: 2" in t and "build" not in t and "node_modules" not in t and "bin.dat" not in t
    t = ok(srv, "grep_search", {"path": base, "pattern": "NEEDLE", "ignore_case": True, "include": "*.txt"})["plain_text_response"]
    assert "a/mid.txt:Needle two" in t and "Total matches: 2" in t
    t = ok(srv, "grep_search", {"path": base, "pattern": "Needle", "context_lines": 1})["plain_text_response"]
    assert t.startswith("a/mid.txt-1-x\na/mid.txt:2:Needle two\na/mid.txt-3-y\n--\n")
    t = ok(srv, "grep_search", {"path": base + "/a/b/deep.c", "pattern": "needle3;", "literal": True,
                                "return_line_numbers": True})["plain_text_response"]
    assert t.startswith(base + "/a/b/deep.c:1:int needle3;")
    assert "Total matches: 0" in ok(srv, "grep_search", {"path": base, "pattern": "needle.", "literal": True})["plain_text_response"]
    assert "invalid regex" in err(srv, "grep_search", {"path": base, "pattern": "(unclosed"})
    assert "does not exist" in err(srv, "grep_search", {"path": base + "/nope", "pattern": "x"})
    many = tree / "many.txt"
    many.write_text("hit\n" * 150)
    t = ok(srv, "grep_search", {"path": str(many), "pattern": "hit"})["plain_text_response"]
    assert "Total matches: 100" in t and "100 matches" in t


# ---- commands ----------------------------------------------------------------------------

def test_exec(srv, tmp_path):
    t = ok(srv, "exec_shell_command", {"command": "echo out; echo err >&2; exit 3"})["plain_text_response"]
    assert t == "out\nerr\n\n[exit code: 3]"
    t = ok(srv, "exec_shell_command", {"command": "pwd"}, headers={"x-tool-cwd": str(tmp_path)})["plain_text_response"]
    assert t.startswith(str(tmp_path) + "\n")
    t = ok(srv, "exec_shell_command", {"command": "head -c 100000 /dev/zero | tr '\\0' a", "max_output_size": 10})["plain_text_response"]
    assert t == "aaaaaaaaaa\n[output truncated]\n[exit code: 0]"
    t0 = time.time()
    t = ok(srv, "exec_shell_command", {"command": "echo started; sleep 30", "timeout": 1})["plain_text_response"]
    assert time.time() - t0 < 5 and t.startswith("started\n") and "[exit due to timed out]" in t
    # what a command leaves running in the background is killed with it
    t = ok(srv, "exec_shell_command", {"command": "sleep 300 & echo $!"})["plain_text_response"]
    pid = int(t.split()[0])
    deadline = time.time() + 5
    while not gone(pid) and time.time() < deadline:
        time.sleep(0.1)
    assert gone(pid)
    assert "not a directory" in err(srv, "exec_shell_command", {"command": "true", "cwd": str(tmp_path / "none")})


def test_exec_stream(srv):
    r = requests.post(srv.url + "/tools", json={"tool": "exec_shell_command", "stream": True,
                                                 "params": {"command": "echo one; sleep 0.5; echo two"}},
                      stream=True, timeout=60)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    ev = sse(r)
    assert ev[-1] == {"done": True}
    chunks = [e["chunk"] for e in ev[:-1]]
    assert len(chunks) >= 3 and chunks[0] == "one\n"  # sent as it came, not at the end
    assert "".join(chunks) == "one\ntwo\n\n[exit code: 0]"
    # a character split across two reads arrives whole
    r = requests.post(srv.url + "/tools", json={"tool": "exec_shell_command", "stream": True, "params": {
        "command": "printf 'caf\\303'; sleep 0.3; printf '\\251!'"}}, stream=True, timeout=60)
    assert "".join(e.get("chunk", "") for e in sse(r)).startswith("caf\u00e9!")
    # a command that cannot start: the final event says why
    r = requests.post(srv.url + "/tools", json={"tool": "exec_shell_command", "stream": True,
                                                 "params": {"command": "true", "cwd": "/no/such/dir"}}, stream=True, timeout=60)
    ev = sse(r)
    assert len(ev) == 1 and ev[0]["done"] is True and "not a directory" in ev[0]["error"]


def test_exec_stream_disconnect_kills(srv, tmp_path):
    pidf = tmp_path / "pid"
    r = requests.post(srv.url + "/tools", json={"tool": "exec_shell_command", "stream": True, "params": {
        "command": f"echo $$ > {pidf}; echo go; sleep 30", "timeout": 60}}, stream=True, timeout=60)
    next(r.iter_lines())
    pid = int(pidf.read_text())
    r.close()
    deadline = time.time() + 5
    while not gone(pid) and time.time() < deadline:
        time.sleep(0.1)
    assert gone(pid)


def test_slow_tools_block_nothing_else(srv):
    """A long command and a slow MCP call hold their own requests only."""
    res = {}

    def slow(key, name, params):
        res[key] = tool(srv, name, params)

    ths = [threading.Thread(target=slow, args=("exec", "exec_shell_command", {"command": "sleep 3"})),
           threading.Thread(target=slow, args=("mcp", "quick_sleep", {"seconds": 0.5}))]
    for th in ths:
        th.start()
    time.sleep(0.3)
    t0 = time.time()
    assert requests.get(srv.url + "/health", timeout=10).status_code == 200
    assert ok(srv, "echo_echo", {"text": "meanwhile"})["plain_text_response"] == "echo: meanwhile"
    assert ok(srv, "get_datetime")["result"]
    assert time.time() - t0 < 2
    for th in ths:
        th.join()
    assert "[exit code: 0]" in res["exec"].json()["plain_text_response"]
    assert res["mcp"].json() == {"plain_text_response": "slept"}


def test_datetime_and_info(srv, tmp_path):
    d = ok(srv, "get_datetime")["result"]
    assert len(d) == 20 and d[4] == "-" and d.endswith("Z")
    assert ok(srv, "get_datetime", {"format": "%Y"})["result"] == time.strftime("%Y", time.gmtime())
    info = ok(srv, "get_info", headers={"x-tool-cwd": str(tmp_path)})
    assert info["cwd"] == str(tmp_path) and info["os"].startswith("Linux")


# ---- MCP -----------------------------------------------------------------------------------

def test_mcp_calls(srv):
    assert ok(srv, "echo_echo", {"text": "hi"}) == {"plain_text_response": "echo: hi"}
    assert ok(srv, "echo_add", {"a": 2, "b": 40}) == {"plain_text_response": "42"}
    assert err(srv, "echo_fail") == "it failed"
    assert ok(srv, "echo_notify") == {"plain_text_response": "notified"}
    assert ok(srv, "echo_ping_first") == {"plain_text_response": "pong seen"}
    pid, cwd, env = ok(srv, "echo_whoami")["plain_text_response"].split()[:3]
    assert cwd == srv.mcp_wd and env == "from-config"
    # one process serves the calls
    assert ok(srv, "echo_whoami")["plain_text_response"].split()[0] == pid
    # concurrent calls to one server take turns, each gets its own answer
    out = {}
    ths = [threading.Thread(target=lambda i=i: out.__setitem__(i, tool(srv, "echo_echo", {"text": str(i)}).json()))
           for i in range(8)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert out == {i: {"plain_text_response": f"echo: {i}"} for i in range(8)}


def test_mcp_crash_and_timeout_restart(srv):
    pid = ok(srv, "echo_whoami")["plain_text_response"].split()[0]
    assert "error" in tool(srv, "echo_crash").json()
    # the next call starts the server again
    assert ok(srv, "echo_echo", {"text": "back"}) == {"plain_text_response": "echo: back"}
    assert ok(srv, "echo_whoami")["plain_text_response"].split()[0] != pid
    # quick has timeout_ms 700: the call fails in time, the process is replaced
    t0 = time.time()
    assert "timed out" in err(srv, "quick_sleep", {"seconds": 30})
    assert time.time() - t0 < 5
    assert ok(srv, "quick_echo", {"text": "x"}) == {"plain_text_response": "echo: x"}


def test_mcp_config_file_and_errors(tmp_path):
    cfg = tmp_path / "mcp.json"
    cfg.write_text(mcp_json({"files": echo_server()}))
    s = Server(["--mcp-servers-config", str(cfg)])
    try:
        names = [t["tool"] for t in requests.get(s.url + "/tools", timeout=30).json()]
        assert "files_echo" in names and "read_file" not in names  # MCP only: no built-in tools
        assert tool(s, "read_file", {"path": "/etc/hostname"}).status_code == 404
    finally:
        assert s.stop()[0] == 0
    for args, needle in [(["--mcp-servers-json", "{not json"], "invalid JSON"),
                         (["--mcp-servers-config", str(tmp_path / "missing.json")], "cannot read"),
                         (["--mcp-servers-json", mcp_json({"x": {"command": "a", "args": "notalist"}})], "args"),
                         (["--tools", "read_file,bogus"], "bogus")]:
        r = subprocess.run([BIN, "serve", "-m", default_model(), "--port", "1"] + args, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode != 0 and needle in r.stderr, r.stderr


def test_mcp_children_reaped_and_prompt_stop(tmp_path):
    """Stopping the server while a slow MCP call runs takes well under 3 s, and no MCP
    process (nor what it started) is left behind."""
    s = Server(["--mcp-servers-json", mcp_json({"a": echo_server(), "b": echo_server()})])
    pids = [int(ok(s, n + "_whoami")["plain_text_response"].split()[0]) for n in ("a", "b")]
    def slow():
        try:
            tool(s, "a_sleep", {"seconds": 20})
        except requests.RequestException:
            pass  # the server went away under it: expected

    th = threading.Thread(target=slow)
    th.start()
    time.sleep(1)
    t0 = time.time()
    rc, out = s.stop()
    assert time.time() - t0 < 3 and rc == 0, out
    th.join(30)
    for pid in pids:
        assert gone(pid)


def test_mcp_grandchild_holding_the_pipes():
    """A server whose child keeps its stdout open: its crash is noticed at once (no EOF
    comes), and stopping kills the child too."""
    s = Server(["--mcp-servers-json", mcp_json({"gc": echo_server("--grandchild")})])
    gpid = int(ok(s, "gc_whoami")["plain_text_response"].split()[3])
    t0 = time.time()
    assert "error" in tool(s, "gc_crash").json()
    assert time.time() - t0 < 3
    gpid2 = int(ok(s, "gc_whoami")["plain_text_response"].split()[3])  # started again
    t0 = time.time()
    rc, out = s.stop()
    assert time.time() - t0 < 3 and rc == 0, out
    time.sleep(0.5)
    assert gone(gpid2)
    assert gone(gpid)  # killed with its group when the server crashed and was replaced


# ---- the CORS proxy --------------------------------------------------------------------------

class Target(BaseHTTPRequestHandler):
    def _answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        self.server.seen = {"method": self.command, "path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                            "body": body}
        if self.path.startswith("/empty"):
            self.send_response(204)
            self.end_headers()
            return
        if self.path.startswith("/moved"):
            self.send_response(302)
            self.send_header("Location", "/final")
            self.end_headers()
            return
        if self.path.startswith("/stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(3):
                self.wfile.write(f"data: {i}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.3)
            return
        out = json.dumps({"path": self.path, "body": body.decode()}).encode()
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Target", "yes")
        self.send_header("Set-Cookie", "t=1")
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *a):
        pass


@pytest.fixture(scope="module")
def target():
    t = ThreadingHTTPServer(("127.0.0.1", 0), Target)
    th = threading.Thread(target=t.serve_forever, daemon=True)
    th.start()
    yield t
    t.shutdown()
    t.server_close()


def test_proxy(target):
    s = Server(["--ui-mcp-proxy", "--api-key", "k1"])
    base = f"http://127.0.0.1:{target.server_port}"
    key = {"Authorization": "Bearer k1"}
    try:
        u = s.url + "/cors-proxy"
        assert requests.get(u, params={"url": base + "/x"}, timeout=30).status_code == 401  # our key first
        r = requests.get(u, params={"url": base + "/x?q=1"}, timeout=30, headers=dict(key, **{
            "Cookie": "ours=1", "X-Api-Key": "k1", "x-llama-server-proxy-header-x-mcp": "m",
            "x-llama-server-proxy-header-authorization": "Bearer theirs"}))
        assert r.status_code == 200 and r.json() == {"path": "/x?q=1", "body": ""}
        h = target.seen["headers"]
        assert h["authorization"] == "Bearer theirs" and h["x-mcp"] == "m"
        assert "cookie" not in h and "x-api-key" not in h
        assert r.headers["X-Target"] == "yes" and "Set-Cookie" not in r.headers
        assert r.headers.get("Access-Control-Allow-Origin") != "*"  # ours apply, not the target's
        r = requests.post(u, params={"url": base + "/p"}, data=b'{"a": 1}', timeout=30,
                          headers=dict(key, **{"x-llama-server-proxy-header-content-type": "application/json"}))
        assert r.status_code == 201 and r.json()["body"] == '{"a": 1}'
        assert target.seen["headers"]["content-type"] == "application/json"
        r = requests.delete(u, params={"url": base + "/d"}, timeout=30, headers=key)
        assert r.status_code == 200 and target.seen["method"] == "DELETE"
        r = requests.post(u, params={"url": base + "/empty"}, timeout=30, headers=key)
        assert r.status_code == 204 and r.content == b""
        r = requests.get(u, params={"url": base + "/moved"}, timeout=30, headers=key)
        assert r.status_code == 200 and r.json()["path"] == "/final"
        # a stream is passed on as it comes
        t0 = time.time()
        r = requests.get(u, params={"url": base + "/stream"}, timeout=30, headers=key, stream=True)
        lines = r.iter_lines()
        assert next(lines) == b"data: 0" and time.time() - t0 < 0.6
        assert r.headers["Content-Type"] == "text/event-stream"
        assert [ln for ln in lines if ln] == [b"data: 1", b"data: 2"]
        for url, code in [(None, 400), ("file:///etc/passwd", 400), ("ftp://x/", 400), ("http://u:p@127.0.0.1/", 400),
                          ("http://127.0.0.1:1/", 502)]:
            r = requests.get(u, params={"url": url} if url else None, timeout=60, headers=key)
            assert r.status_code == code, (url, r.text)
    finally:
        assert s.stop()[0] == 0


def test_api_key_and_cors_with_tools():
    s = Server(["--tools", "get_datetime", "--api-key", "k2"])
    try:
        assert tool(s, "get_datetime").status_code == 401
        r = tool(s, "get_datetime", headers={"Authorization": "Bearer k2"})
        assert r.status_code == 200 and r.json()["result"]
        assert tool(s, "read_file", {"path": "/etc/hostname"}, headers={"Authorization": "Bearer k2"}).status_code == 404
        # with tools the default CORS is this machine's pages only, API key or not
        h = {"Authorization": "Bearer k2"}
        r = requests.get(s.url + "/tools", headers=dict(h, Origin="http://evil.example"), timeout=30)
        assert "Access-Control-Allow-Origin" not in r.headers
        r = requests.get(s.url + "/tools", headers=dict(h, Origin="http://localhost:5173"), timeout=30)
        assert r.headers["Access-Control-Allow-Origin"] == "http://localhost:5173"
    finally:
        assert s.stop()[0] == 0
