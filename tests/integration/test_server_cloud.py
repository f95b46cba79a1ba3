"""Cloud passthrough (issue 36 item 5): `--models-config FILE` names models of remote
OpenAI- and Anthropic-compatible APIs. Two fake upstreams (http.server in a thread, one
per format) check the key each request carries and answer whole and streamed replies,
with a tool call when tools are offered. The server lists the remote models beside the
local one, relays a request of the upstream's own format unchanged, translates the other
format both ways (streams, tool calls, usage), keeps the key out of its log and its
errors, answers 502 for a dead upstream, and refuses a bad config file at start."""
import json
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from serverutil import BIN, ROOT, Server, free_port

TINY = os.path.join(ROOT, "tests", "fixtures", "models", "llama.gguf")
OPENAI_KEY = "sk-test-openai-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-fedcba9876543210"
WRONG_KEY = "sk-wrong-key-55555555"
TEXT = "Hello from the upstream, in four pieces."
FINAL = "It is sunny in Paris."
TOOLS_OAI = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
TOOLS_ANTH = [{"name": "get_weather", "description": "Weather of a city",
               "input_schema": TOOLS_OAI[0]["function"]["parameters"]}]


def pieces(s, n=4):
    k = (len(s) + n - 1) // n
    return [s[i:i + k] for i in range(0, len(s), k)]


class Upstream:
    """A fake API of one wire format on a free port; .requests keeps (headers, raw body)."""

    def __init__(self, fmt, key):
        self.fmt, self.key, self.requests = fmt, key, []
        up = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                up.requests.append((dict(self.headers), raw))
                up.handle(self, json.loads(raw))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def last(self):
        return json.loads(self.requests[-1][1])

    def send_json(self, h, status, obj):
        b = json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(b)))
        h.end_headers()
        h.wfile.write(b)

    def send_events(self, h, events, cut=False):
        """Each event in two writes split mid-line, so that the server sees events cut
        anywhere; cut: the connection drops after the third event."""
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()
        for i, e in enumerate(events[:3] if cut else events):
            b = e.encode()
            for part in (b[:len(b) // 2], b[len(b) // 2:]):
                h.wfile.write(part)
                h.wfile.flush()
                time.sleep(0.005)
        h.close_connection = True

    def authorized(self, h):
        if self.fmt == "openai":
            return h.headers.get("Authorization") == "Bearer " + self.key
        return h.headers.get("x-api-key") == self.key and h.headers.get("anthropic-version")

    def handle(self, h, body):
        if not self.authorized(h):
            sent = h.headers.get("Authorization") or h.headers.get("x-api-key") or ""
            return self.send_json(h, 401, {"error": {"message": f"Incorrect API key provided: {sent}",
                                                     "type": "invalid_request_error"}})
        if h.path.endswith("/count_tokens"):
            return self.send_json(h, 200, {"input_tokens": 42})
        if self.fmt == "openai" and h.path.endswith("/completions") and not h.path.endswith("/chat/completions"):
            return self.send_json(h, 200, {"id": "cmpl-1", "object": "text_completion", "model": body["model"],
                                           "choices": [{"text": TEXT, "index": 0, "finish_reason": "stop"}]})
        msgs = body["messages"]
        answered = any(m.get("role") == "tool" for m in msgs) or any(
            isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"])
            for m in msgs)
        call = bool(body.get("tools")) and not answered
        text = FINAL if answered else TEXT
        (self.openai if self.fmt == "openai" else self.anthropic)(h, body, call, text)

    def openai(self, h, body, call, text):
        tc = {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        finish = "tool_calls" if call else "stop"
        if not body.get("stream"):
            msg = {"role": "assistant", "content": None if call else text}
            if call:
                msg["tool_calls"] = [tc]
            return self.send_json(h, 200, {"id": "chatcmpl-up", "object": "chat.completion", "created": 1,
                                           "model": body["model"], "usage": usage,
                                           "choices": [{"index": 0, "message": msg, "finish_reason": finish}]})

        def chunk(delta, fin=None, **kw):
            c = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": body["model"],
                 "choices": [{"index": 0, "delta": delta, "finish_reason": fin}], **kw}
            return "data: " + json.dumps(c) + "\n\n"

        ev = [chunk({"role": "assistant", "content": ""})]
        if call:
            ev.append(chunk({"tool_calls": [{"index": 0, "id": "call_abc", "type": "function",
                                             "function": {"name": "get_weather", "arguments": ""}}]}))
            for p in pieces('{"city": "Paris"}'):
                ev.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}))
        else:
            ev += [chunk({"content": p}) for p in pieces(text)]
        ev.append(chunk({}, finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            c = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": body["model"],
                 "choices": [], "usage": usage}
            ev.append("data: " + json.dumps(c) + "\n\n")
        ev.append("data: [DONE]\n\n")
        self.send_events(h, ev)

    def anthropic(self, h, body, call, text):
        usage = {"input_tokens": 11, "output_tokens": 7}
        stop = "tool_use" if call else "end_turn"
        if not body.get("stream"):
            content = ([{"type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {"city": "Paris"}}]
                       if call else [{"type": "text", "text": text}])
            return self.send_json(h, 200, {"id": "msg_up", "type": "message", "role": "assistant",
                                           "model": body["model"], "content": content, "stop_reason": stop,
                                           "stop_sequence": None, "usage": usage})

        def ev(name, obj):
            return f"event: {name}\r\ndata: {json.dumps(obj)}\r\n\r\n"  # CRLF, as some servers send

        out = [ev("message_start", {"type": "message_start", "message": {
            "id": "msg_up", "type": "message", "role": "assistant", "model": body["model"], "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 11, "output_tokens": 1}}}),
            ev("ping", {"type": "ping"})]
        if call:
            out.append(ev("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
                "type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {}}}))
            for p in pieces('{"city": "Paris"}'):
                out.append(ev("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                    "type": "input_json_delta", "partial_json": p}}))
        else:
            out.append(ev("content_block_start", {"type": "content_block_start", "index": 0,
                                                  "content_block": {"type": "text", "text": ""}}))
            for p in pieces(text):
                out.append(ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                      "delta": {"type": "text_delta", "text": p}}))
        out.append(ev("content_block_stop", {"type": "content_block_stop", "index": 0}))
        out.append(ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                        "usage": {"output_tokens": 7}}))
        out.append(ev("message_stop", {"type": "message_stop"}))
        self.send_events(h, out, cut=body["model"] == "cut-me")

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    oa, an = Upstream("openai", OPENAI_KEY), Upstream("anthropic", ANTHROPIC_KEY)
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = tmp_path_factory.mktemp("cloud") / "models.json"
    cfg.write_text(json.dumps({"models": [
        {"id": "gpt-x", "base_url": oa.url + "/v1", "wire_format": "openai", "api_key_env": "OB_TEST_OPENAI_KEY"},
        {"id": "claude-x", "base_url": an.url + "/", "wire_format": "anthropic", "api_key_env": "OB_TEST_ANTH_KEY",
         "model": "claude-upstream-name"},
        {"id": "gpt-wrongkey", "base_url": oa.url + "/v1", "wire_format": "openai", "api_key_env": "OB_TEST_WRONG_KEY"},
        {"id": "gpt-dead", "base_url": dead + "/v1", "wire_format": "openai"},
        {"id": "claude-dead", "base_url": dead, "wire_format": "anthropic"},
        {"id": "claude-cut", "base_url": an.url, "wire_format": "anthropic", "api_key_env": "OB_TEST_ANTH_KEY",
         "model": "cut-me"},
    ]}))
    os.environ.update(OB_TEST_OPENAI_KEY=OPENAI_KEY, OB_TEST_ANTH_KEY=ANTHROPIC_KEY, OB_TEST_WRONG_KEY=WRONG_KEY)
    try:
        srv = Server(["-c", "256", "--models-config", str(cfg)], model=TINY)
    finally:
        for k in ("OB_TEST_OPENAI_KEY", "OB_TEST_ANTH_KEY", "OB_TEST_WRONG_KEY"):
            os.environ.pop(k)
    yield srv, oa, an
    rc, out = srv.stop()
    oa.close()
    an.close()
    assert rc == 0, out
    for key in (OPENAI_KEY, ANTHROPIC_KEY, WRONG_KEY):
        assert key not in out, "an API key is in the server's log"


def oai(srv):
    import openai
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def anth(srv):
    import anthropic
    return anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0, timeout=60)


MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]


def test_models_listed_beside_local(env):
    srv, _, _ = env
    ids = [m["id"] for m in requests.get(srv.url + "/v1/models").json()["data"]]
    assert ids[0] == "llama.gguf"
    assert {"gpt-x", "claude-x", "gpt-dead", "claude-dead"} <= set(ids)
    assert OPENAI_KEY not in requests.get(srv.url + "/props").text


def test_openai_to_openai_relayed_unchanged(env):
    srv, oa, _ = env
    raw = json.dumps({"model": "gpt-x", "messages": MSGS, "temperature": 0.5, "seed": 7}).encode()
    r = requests.post(srv.url + "/v1/chat/completions", data=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == TEXT
    headers, got = oa.requests[-1]
    assert got == raw
    assert headers["Authorization"] == "Bearer " + OPENAI_KEY
    c = oai(srv).completions.create(model="gpt-x", prompt="Once", max_tokens=5)
    assert c.choices[0].text == TEXT and oa.last()["prompt"] == "Once"


def test_openai_client_to_anthropic_upstream(env):
    srv, _, an = env
    r = oai(srv).chat.completions.create(model="claude-x", messages=MSGS, max_tokens=50, stop=["END"])
    assert r.choices[0].message.content == TEXT
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens == 11 and r.usage.completion_tokens == 7 and r.model == "claude-x"
    sent = an.last()
    assert sent["model"] == "claude-upstream-name" and sent["system"] == "Be brief."
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}]
    assert sent["max_tokens"] == 50 and sent["stop_sequences"] == ["END"]
    assert an.requests[-1][0]["x-api-key"] == ANTHROPIC_KEY


def test_anthropic_client_to_openai_upstream(env):
    srv, oa, _ = env
    m = anth(srv).messages.create(model="gpt-x", system="Be brief.", max_tokens=40,
                                  messages=[{"role": "user", "content": "Say hello."}])
    assert m.content[0].type == "text" and m.content[0].text == TEXT
    assert m.stop_reason == "end_turn" and m.usage.input_tokens == 11 and m.usage.output_tokens == 7
    sent = oa.last()
    assert sent["model"] == "gpt-x" and sent["max_tokens"] == 40
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["messages"][1]["role"] == "user"


def test_anthropic_to_anthropic_relayed(env):
    srv, _, an = env
    m = anth(srv).messages.create(model="claude-x", max_tokens=40, messages=[{"role": "user", "content": "Hi"}])
    assert m.content[0].text == TEXT
    assert an.last()["model"] == "claude-upstream-name"
    n = anth(srv).messages.count_tokens(model="claude-x", messages=[{"role": "user", "content": "Hi"}])
    assert n.input_tokens == 42 and an.requests[-1][0]["x-api-key"] == ANTHROPIC_KEY
    r = requests.post(srv.url + "/v1/messages/count_tokens",
                      json={"model": "gpt-x", "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 400 and r.json()["type"] == "error"
    r = requests.post(srv.url + "/v1/completions", json={"model": "claude-x", "prompt": "Hi"})
    assert r.status_code == 400 and "Anthropic upstream" in r.json()["error"]["message"]


def test_streams_assemble_the_same_text(env):
    srv, _, _ = env
    # OpenAI client, Anthropic upstream
    chunks = list(oai(srv).chat.completions.create(model="claude-x", messages=MSGS, stream=True,
                                                   stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == TEXT
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.prompt_tokens == 11 and chunks[-1].usage.completion_tokens == 7
    # Anthropic client, OpenAI upstream
    with anth(srv).messages.stream(model="gpt-x", max_tokens=40, messages=[{"role": "user", "content": "Hi"}]) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    assert streamed == TEXT and final.stop_reason == "end_turn" and final.usage.output_tokens == 7
    # both relayed streams too
    with anth(srv).messages.stream(model="claude-x", max_tokens=40, messages=[{"role": "user", "content": "Hi"}]) as s:
        assert "".join(s.text_stream) == TEXT
    chunks = oai(srv).chat.completions.create(model="gpt-x", messages=MSGS, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT


def assemble_oai_calls(chunks):
    calls = {}
    for c in chunks:
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            e = calls.setdefault(tc.index, {"id": None, "name": None, "args": ""})
            e["id"] = tc.id or e["id"]
            if tc.function and tc.function.name:
                e["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                e["args"] += tc.function.arguments
    return calls


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_openai_client_anthropic_upstream(env, stream):
    srv, _, an = env
    client = oai(srv)
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    if stream:
        calls = assemble_oai_calls(client.chat.completions.create(model="claude-x", messages=msgs, tools=TOOLS_OAI,
                                                                  tool_choice="auto", stream=True))
        call = calls[0]
    else:
        r = client.chat.completions.create(model="claude-x", messages=msgs, tools=TOOLS_OAI, tool_choice="auto")
        assert r.choices[0].finish_reason == "tool_calls"
        tc = r.choices[0].message.tool_calls[0]
        call = {"id": tc.id, "name": tc.function.name, "args": tc.function.arguments}
    assert call["id"] == "toolu_abc" and call["name"] == "get_weather"
    assert json.loads(call["args"]) == {"city": "Paris"}
    sent = an.last()
    assert sent["tools"][0]["name"] == "get_weather" and sent["tools"][0]["input_schema"]["required"] == ["city"]
    assert sent["tool_choice"] == {"type": "auto"}
    msgs += [{"role": "assistant", "content": None, "tool_calls": [
        {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["args"]}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]
    r = client.chat.completions.create(model="claude-x", messages=msgs, tools=TOOLS_OAI)
    assert r.choices[0].message.content == FINAL
    sent = an.last()["messages"]
    assert sent[1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {"city": "Paris"}}]}
    assert sent[2] == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_abc",
                                                    "content": "sunny"}]}


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_anthropic_client_openai_upstream(env, stream):
    srv, oa, _ = env
    client = anth(srv)
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    kw = dict(model="gpt-x", max_tokens=100, tools=TOOLS_ANTH, tool_choice={"type": "any"})
    if stream:
        with client.messages.stream(messages=msgs, **kw) as s:
            m = s.get_final_message()
    else:
        m = client.messages.create(messages=msgs, **kw)
    assert m.stop_reason == "tool_use"
    tu = [b for b in m.content if b.type == "tool_use"][0]
    assert tu.id == "call_abc" and tu.name == "get_weather" and tu.input == {"city": "Paris"}
    sent = oa.last()
    assert sent["tools"][0]["function"]["name"] == "get_weather" and sent["tool_choice"] == "required"
    msgs += [{"role": "assistant", "content": [{"type": "tool_use", "id": tu.id, "name": tu.name, "input": tu.input}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu.id, "content": "sunny"}]}]
    m = client.messages.create(messages=msgs, model="gpt-x", max_tokens=100, tools=TOOLS_ANTH)
    assert m.content[0].text == FINAL and m.stop_reason == "end_turn"
    sent = oa.last()["messages"]
    assert sent[1]["role"] == "assistant" and sent[1]["content"] is None
    assert sent[1]["tool_calls"][0]["id"] == "call_abc"
    assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert sent[2]["role"] == "tool" and sent[2]["tool_call_id"] == "call_abc"


def test_dead_upstream_is_502_in_the_clients_format(env):
    srv, _, _ = env
    r = requests.post(srv.url + "/v1/chat/completions", json={"model": "gpt-dead", "messages": MSGS})
    assert r.status_code == 502
    e = r.json()["error"]
    assert e["code"] == 502 and "gpt-dead" in e["message"] and "cannot reach" in e["message"]
    r = requests.post(srv.url + "/v1/messages", json={"model": "claude-dead", "max_tokens": 5,
                                                      "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 502
    assert r.json()["type"] == "error" and "claude-dead" in r.json()["error"]["message"]
    r = requests.post(srv.url + "/v1/chat/completions", json={"model": "claude-dead", "messages": MSGS, "stream": True})
    assert r.status_code == 502 and r.json()["error"]["code"] == 502


def test_cut_stream_ends_with_an_error_event(env):
    srv, _, _ = env
    r = requests.post(srv.url + "/v1/chat/completions", json={"model": "claude-cut", "messages": MSGS, "stream": True},
                      stream=True)
    assert r.status_code == 200
    data = [l[6:] for l in r.iter_lines(decode_unicode=True) if l.startswith("data: ")]
    assert "[DONE]" not in data and "error" in json.loads(data[-1])


def test_upstream_error_is_502_without_the_key(env):
    srv, _, _ = env
    r = requests.post(srv.url + "/v1/chat/completions", json={"model": "gpt-wrongkey", "messages": MSGS})
    assert r.status_code == 502
    msg = r.json()["error"]["message"]
    assert "401" in msg and "Incorrect API key" in msg and WRONG_KEY not in r.text
    r = requests.post(srv.url + "/v1/messages", json={"model": "gpt-wrongkey", "max_tokens": 5,
                                                      "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 502 and r.json()["type"] == "error" and WRONG_KEY not in r.text


def test_local_model_still_served(env):
    srv, _, _ = env
    r = requests.post(srv.url + "/v1/completions", json={"model": "llama.gguf", "prompt": "Hi", "max_tokens": 3})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "llama.gguf"  # the fixture model has no chat template: plain completions


def test_router_mode_lists_and_forwards(env, tmp_path):
    _, oa, _ = env
    cfg = tmp_path / "models.json"
    cfg.write_text(json.dumps({"models": [{"id": "gpt-r", "base_url": oa.url + "/v1", "wire_format": "openai",
                                           "api_key_env": "OB_TEST_OPENAI_KEY", "model": "gpt-x"}]}))
    empty = tmp_path / "models"
    empty.mkdir()
    os.environ["OB_TEST_OPENAI_KEY"] = OPENAI_KEY
    try:
        router = Server([], line=lambda port: [BIN, "serve", "--port", port, "--models-dir", str(empty),
                                               "--models-config", str(cfg)])
    finally:
        os.environ.pop("OB_TEST_OPENAI_KEY")
    try:
        ids = [m["id"] for m in requests.get(router.url + "/v1/models").json()["data"]]
        assert ids == ["gpt-r"]
        m = anth(router).messages.create(model="gpt-r", max_tokens=20, messages=[{"role": "user", "content": "Hi"}])
        assert m.content[0].text == TEXT and oa.last()["model"] == "gpt-x"
    finally:
        rc, out = router.stop()
    assert rc == 0 and OPENAI_KEY not in out


@pytest.mark.parametrize("text,why", [
    ("{not json", "line 1"),
    ('{"models": [{"id": "a", "base_url": "http://x", "wire_format": "grpc"}]}', "wire_format"),
    ('{"models": [{"id": "a", "base_url": "ftp://x", "wire_format": "openai"}]}', "base_url"),
    ('{"models": [{"id": "a", "wire_format": "openai"}]}', "needs id, base_url"),
    ('{"models": [{"id": "a", "base_url": "http://x", "wire_format": "openai", "api_key": "sk-1"}]}', "unknown key"),
    ('{"modles": []}', "models"),
])
def test_bad_config_refused_with_one_line(tmp_path, text, why):
    cfg = tmp_path / "bad.json"
    cfg.write_text(text)
    p = subprocess.run([BIN, "serve", "-m", TINY, "--port", str(free_port()), "--models-config", str(cfg)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--models-config" in lines[0] and why in lines[0], p.stderr


def test_missing_config_file_refused():
    p = subprocess.run([BIN, "serve", "-m", TINY, "--models-config", "/nonexistent/models.json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1
