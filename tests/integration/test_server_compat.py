"""llama-server compatibility of `1bit serve` (issue 44, docs/compat.md): its flags, CORS
policy, response fields, routes and request forms, each checked against what
llama-server's README says, on the default model (Gemma 3 270M)."""
import json
import os
import subprocess

import pytest
import requests

from serverutil import BIN, Server, default_model


def post(srv, path, body, **kw):
    return requests.post(srv.url + path, json=body, timeout=300, **kw)


@pytest.fixture(scope="module")
def srv():
    s = Server(["--temp", "0.8", "--seed", "42", "-c", "1024", "-np", "2", "-n", "16", "--no-slots", "--no-jinja",
                "--alias", "tiny,code,fim", "--tags", "chat,small", "--cache-ram", "0", "--no-context-shift",
                "--backend_sampling", "--reasoning-format", "deepseek"])
    yield s
    rc, out = s.stop()
    assert rc == 0, out


# ---- flags -------------------------------------------------------------------------------

def test_flags_llama_server_meanings(srv):
    """--alias takes a list (the id is the first alias in byte order), --tags shows in
    /v1/models, --seed is /props' default seed, '_' in a long flag reads as '-'."""
    m = requests.get(srv.url + "/v1/models", timeout=30).json()["data"][0]
    assert m["id"] == "code" and set(m["aliases"]) == {"tiny", "code", "fim"} and set(m["tags"]) == {"chat", "small"}
    p = requests.get(srv.url + "/props", timeout=30).json()
    params = p["default_generation_settings"]["params"]
    assert params["seed"] == 42 and params["n_predict"] == 16 and abs(params["temperature"] - 0.8) < 1e-6
    assert p["default_generation_settings"]["n_ctx"] == 512


@pytest.mark.parametrize("flag,needle", [
    (["--tools", "bogus"], "bogus"), (["--mcp-servers-json", "{"], "--mcp-servers-json"),
    (["--context-shift"], "--context-shift"),
    (["--models-max", "2"], "--models-max"),
    (["--reasoning", "maybe"], "--reasoning"), (["--reasoning-budget", "10"], "--reasoning-budget"),
    (["--chat-template", "chatglm4"], "chatglm4"),
])
def test_flags_not_supported_are_one_line(flag, needle):
    """A llama-server feature this server does not have is refused at start-up, in one
    line that names the flag, never ignored."""
    r = subprocess.run([BIN, "serve", "-m", default_model()] + flag, capture_output=True, text=True, timeout=60)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], r.stderr


def test_cors_proxy_is_disabled(srv):
    """Off unless --ui-mcp-proxy: llama-server's 403 (test_server_tools.py has it on)."""
    for m in (requests.get, requests.post):
        r = m(srv.url + "/cors-proxy?url=http://example.com", timeout=30)
        assert r.status_code == 403 and r.json()["error"]["type"] == "feature_disabled"


def test_kv_unified_gives_each_slot_the_whole_context():
    s = Server(["-c", "256", "-np", "4", "-kvu", "--temp", "0", "-n", "200"])
    try:
        assert requests.get(s.url + "/props", timeout=30).json()["default_generation_settings"]["n_ctx"] == 256
        # 200 tokens in one slot: more than a quarter of -c
        r = post(s, "/completion", {"prompt": "Count: one, two, three,", "n_predict": 150, "ignore_eos": True})
        assert r.status_code == 200 and r.json()["tokens_predicted"] == 150, r.text
    finally:
        s.stop()


# ---- CORS --------------------------------------------------------------------------------

def preflight(srv, origin):
    return requests.options(srv.url + "/v1/chat/completions", timeout=30, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Authorization"})


def test_cors_default_is_localhost_without_key(srv):
    """No --api-key: only pages of this machine may read replies; a preflight is 200
    either way (the browser enforces the missing header)."""
    for origin in ("http://localhost", "http://localhost:3000", "http://127.0.0.1:8080", "http://[::1]:5173"):
        r = preflight(srv, origin)
        assert r.status_code == 200 and r.headers.get("access-control-allow-origin") == origin, origin
        assert r.headers["access-control-allow-credentials"] == "true"
        assert r.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
    for origin in ("http://evil.com", "http://localhost.evil.com", "http://notlocalhost", "localhost"):
        r = preflight(srv, origin)
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers, origin
        g = requests.get(srv.url + "/health", headers={"Origin": origin}, timeout=30)
        assert "access-control-allow-origin" not in g.headers


def test_cors_with_key_and_flag():
    s = Server(["--api-key", "k"])
    try:  # with a key, any origin: the key is what guards the server
        r = preflight(s, "http://web.example.fr")
        assert r.headers.get("access-control-allow-origin") == "http://web.example.fr"
    finally:
        s.stop()
    s = Server(["--cors-origins", "localhost,http://good.example"])
    try:
        assert preflight(s, "http://good.example").headers.get("access-control-allow-origin") == "http://good.example"
        assert preflight(s, "http://127.0.0.1:1").headers.get("access-control-allow-origin") == "http://127.0.0.1:1"
        assert "access-control-allow-origin" not in preflight(s, "http://bad.example").headers
    finally:
        s.stop()
    s = Server(["--cors-origins", "*"])
    try:
        assert preflight(s, "http://any.example").headers.get("access-control-allow-origin") == "http://any.example"
    finally:
        s.stop()


def test_api_keys_from_list_and_file(tmp_path):
    """llama-server's --api-key K1,K2 and --api-key-file (a key a line, blank lines skipped):
    any listed key opens the server; a wrong one is 401; /health stays open; no key is
    ever printed or shown by /props."""
    kf = tmp_path / "keys.txt"
    kf.write_text("\n  \nsk-file-one\r\n\nsk-file-two\n")
    s = Server(["--api-key", "sk-a,sk-b", "--api-key-file", str(kf)])
    try:
        def status(key, header="Authorization"):
            h = {header: ("Bearer " + key) if header == "Authorization" else key} if key is not None else {}
            return requests.post(s.url + "/tokenize", json={"content": "hi"}, headers=h, timeout=30).status_code
        for key in ("sk-a", "sk-b", "sk-file-one", "sk-file-two"):
            assert status(key) == 200, key
        assert status("sk-file-two", "X-Api-Key") == 200
        for key in ("sk-c", "sk-a,sk-b", "sk-", "sk-file", "sk-file-one-more", None):
            assert status(key) == 401, key
        assert requests.get(s.url + "/health", timeout=10).status_code == 200
        props = requests.get(s.url + "/props", headers={"Authorization": "Bearer sk-b"}, timeout=10).text
        assert "sk-" not in props
    finally:
        code, out = s.stop()
    assert "sk-a" not in out and "sk-file" not in out


@pytest.mark.parametrize("content", [None, "", "\n  \n\n"])
def test_api_key_file_unreadable_or_empty(tmp_path, content):
    kf = tmp_path / "keys.txt"
    if content is not None:
        kf.write_text(content)
    r = subprocess.run([BIN, "serve", "-m", default_model(), "--api-key-file", str(kf)], capture_output=True,
                       text=True, timeout=60)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "--api-key-file" in lines[0], r.stderr


# ---- /completion -------------------------------------------------------------------------

def test_completion_fields(srv):
    r = post(srv, "/completion", {"prompt": "I believe the meaning of life is", "n_predict": 6})
    assert r.status_code == 200, r.text
    j = r.json()
    assert j["tokens"] == [] and isinstance(j["has_new_line"], bool) and j["truncated"] is False
    gs = j["generation_settings"]
    assert gs["n_predict"] == 6 and gs["seed"] == 42 and gs["logit_bias"] == [] and "adaptive_target" in gs
    assert j["prompt"].endswith("I believe the meaning of life is")
    j = post(srv, "/completion", {"prompt": "Hello", "n_predict": 3, "return_tokens": True}).json()
    assert len(j["tokens"]) == 3 and all(isinstance(t, int) for t in j["tokens"])
    j = post(srv, "/completion", {"prompt": "Hello", "n_predict": 3,
                                  "response_fields": ["content", "generation_settings/n_predict", "nope"]}).json()
    assert set(j) == {"content", "generation_settings/n_predict"} and j["generation_settings/n_predict"] == 3
    # ignore_eos: the end tokens appear in logit_bias with bias null (-inf), as llama-server shows them
    gs = post(srv, "/completion", {"prompt": "Hi", "n_predict": 2, "ignore_eos": True}).json()["generation_settings"]
    assert gs["logit_bias"] and all(b["bias"] is None for b in gs["logit_bias"])


def test_completion_stream_events_carry_tokens(srv):
    with requests.post(srv.url + "/completion", json={"prompt": "Once upon a time", "n_predict": 5, "stream": True},
                       stream=True, timeout=300) as r:
        ev = [json.loads(ln[6:]) for ln in r.iter_lines(decode_unicode=True) if ln.startswith("data: ")]
    assert all(len(e["tokens"]) > 0 for e in ev if not e["stop"])
    last = ev[-1]
    assert last["stop"] and last["generation_settings"]["n_predict"] == 5 and last["stop_type"] == "limit"
    whole = post(srv, "/completion", {"prompt": "Once upon a time", "n_predict": 5, "temperature": 0}).json()
    with requests.post(srv.url + "/completion", json={"prompt": "Once upon a time", "n_predict": 5, "stream": True,
                                                      "temperature": 0}, stream=True, timeout=300) as r:
        text = "".join(json.loads(ln[6:])["content"] for ln in r.iter_lines(decode_unicode=True) if ln.startswith("data: "))
    assert text == whole["content"]


def test_prompt_forms(srv):
    """A sequence of ids, ids mixed with text, a {"prompt_string"} object and several
    prompts (an array of results) are llama-server's prompt forms; greedy, they agree."""
    text = "I believe the meaning of life is"
    ids = post(srv, "/tokenize", {"content": text, "add_special": True}).json()["tokens"]
    base = {"n_predict": 4, "temperature": 0}
    ref = post(srv, "/completion", dict(base, prompt=text)).json()["content"]
    assert post(srv, "/completion", dict(base, prompt=ids)).json()["content"] == ref
    assert post(srv, "/completion", dict(base, prompt=ids[:3] + [post(srv, "/detokenize", {"tokens": ids[3:]}).json()["content"]])).status_code == 200
    assert post(srv, "/completion", dict(base, prompt={"prompt_string": text})).json()["content"] == ref
    many = post(srv, "/completion", dict(base, prompt=[ids, text, {"prompt_string": text}])).json()
    assert isinstance(many, list) and [m["content"] for m in many] == [ref] * 3 and [m["index"] for m in many] == [0, 1, 2]
    r = post(srv, "/completion", dict(base, prompt={"prompt_string": text, "multimodal_data": ["AAAA"]}))
    assert r.status_code == 400
    # /completions (no /v1) is the native route; /v1/completions stays OpenAI's
    assert "content" in post(srv, "/completions", dict(base, prompt=text)).json()
    oai = post(srv, "/v1/completions", {"prompt": [text, text], "max_tokens": 4, "temperature": 0}).json()
    assert [c["index"] for c in oai["choices"]] == [0, 1] and oai["choices"][0]["text"] == ref


def test_logit_bias_forms(srv):
    """[[id, b]], [["text", b]], {"id": b}, {"text": b} and false (never) all exclude."""
    words = ["the", "a", "of", "is", "to", "and", "I", "it"]
    ids = post(srv, "/tokenize", {"content": " " + " ".join(words)}).json()["tokens"]
    forms = [[[t, -100] for t in ids], [[" " + w, -100] for w in words], {str(t): -100 for t in ids},
             {" " + w: -100 for w in words}, [[t, False] for t in ids]]
    for lb in forms:
        r = post(srv, "/completion", {"prompt": "Tell me a story about the sea", "n_predict": 24, "temperature": 0,
                                      "logit_bias": lb, "return_tokens": True})
        assert r.status_code == 200, (lb, r.text)
        assert not set(r.json()["tokens"]) & set(ids), lb
    assert post(srv, "/completion", {"prompt": "x", "logit_bias": [[1, "a"]]}).status_code == 400
    assert post(srv, "/completion", {"prompt": "x", "logit_bias": 3}).status_code == 400


def test_post_sampling_probs(srv):
    j = post(srv, "/completion", {"prompt": "Today was the day. Today I would finally become a", "n_probs": 10,
                                  "temperature": 1.0, "n_predict": 4, "post_sampling_probs": True}).json()
    for tok in j["completion_probabilities"]:
        assert 0 < tok["prob"] <= 1 and "logprob" not in tok
        ps = [p["prob"] for p in tok["top_probs"]]
        assert ps and all(0 < p <= 1 for p in ps) and ps == sorted(ps, reverse=True)
        assert len(ps) == 10 or abs(sum(ps) - 1) < 1e-3
        assert tok["prob"] in ps or tok["prob"] < ps[-1] + 1e-6
    g = post(srv, "/completion", {"prompt": "Hi", "n_probs": 3, "temperature": 0, "n_predict": 2,
                                  "post_sampling_probs": True}).json()
    assert all(t["prob"] == 1.0 and [p["id"] for p in t["top_probs"]] == [t["id"]] for t in g["completion_probabilities"])


def test_context_overflow_error_and_truncation(srv):
    long = "word " * 700
    for stream in (False, True):
        r = post(srv, "/chat/completions", {"messages": [{"role": "user", "content": long}], "stream": stream})
        e = r.json()["error"]
        assert r.status_code == 400 and e["type"] == "exceed_context_size_error"
        assert e["n_ctx"] == 512 and e["n_prompt_tokens"] > 512 and "exceeds the available context size" in e["message"]
    # generation that fills the slot stops there, truncated
    j = post(srv, "/completion", {"prompt": "word " * 480, "n_predict": 100, "ignore_eos": True}).json()
    assert j["truncated"] is True and j["stop_type"] == "limit" and j["tokens_evaluated"] + j["tokens_predicted"] <= 513


# ---- chat --------------------------------------------------------------------------------

MSGS = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]


def test_chat_stream_shape(srv):
    with requests.post(srv.url + "/v1/chat/completions", stream=True, timeout=300, json={
            "messages": MSGS, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}}) as r:
        ev = [json.loads(ln[6:]) for ln in r.iter_lines(decode_unicode=True)
              if ln.startswith("data: ") and "[DONE]" not in ln]
    first = ev[0]["choices"][0]["delta"]
    assert first == {"role": "assistant", "content": None}
    assert all(e["choices"][0]["delta"].get("content") for e in ev[1:] if e["choices"] and not e["choices"][0]["finish_reason"])
    usage = ev[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 4 and "predicted_per_second" in usage["timings"]
    assert all("timings" not in e for e in ev[:-2])
    # timings_per_token: every content event carries the timings so far
    with requests.post(srv.url + "/v1/chat/completions", stream=True, timeout=300, json={
            "messages": MSGS, "max_tokens": 4, "stream": True, "timings_per_token": True}) as r:
        ev = [json.loads(ln[6:]) for ln in r.iter_lines(decode_unicode=True)
              if ln.startswith("data: ") and "[DONE]" not in ln]
    assert "timings" not in ev[0] and all(e["timings"]["predicted_n"] >= 1 for e in ev[1:])


def test_chat_request_forms(srv):
    base = {"max_tokens": 2}
    # an assistant message last is a prefill; two are an error; both switches true too
    r = post(srv, "/chat/completions", dict(base, messages=MSGS + [{"role": "assistant", "content": "Whill"}], verbose=True))
    assert r.status_code == 200 and r.json()["__verbose"]["prompt"].endswith("<start_of_turn>model\nWhill"), r.text
    two = MSGS + [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert post(srv, "/chat/completions", dict(base, messages=two)).status_code == 400
    both = dict(base, messages=MSGS, add_generation_prompt=True, continue_final_message=True)
    assert post(srv, "/chat/completions", both).status_code == 400
    # text parts join with a blank line
    parts = [{"role": "user", "content": [{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}]}]
    p = post(srv, "/apply-template", {"messages": parts}).json()["prompt"]
    assert "Wh\n\nill" in p
    assert not post(srv, "/apply-template", {"messages": parts, "add_generation_prompt": False}).json()["prompt"].endswith("model\n")
    # an image needs a multimodal model: llama-server's 500 and words
    img = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    r = post(srv, "/chat/completions", dict(base, messages=img))
    assert r.status_code == 500 and "image input is not supported" in r.json()["error"]["message"]
    for bad in (None, "string", [123], [{}], [{"role": 123}], [{"role": "system", "content": 123}]):
        assert post(srv, "/chat/completions", dict(base, messages=bad)).status_code == 400, bad
    n = post(srv, "/chat/completions/input_tokens", {"messages": MSGS}).json()
    assert n["object"] == "response.input_tokens" and n["input_tokens"] > 5


def test_structured_output_fields(srv):
    """llama-server's structured-output fields: a response_format type other than text,
    json_object or json_schema, a malformed one, a bad schema or grammar is a 400; the
    constraints themselves are tested in test_server_grammar.py."""
    for extra in ({"response_format": {"type": "sound"}}, {"response_format": 3},
                  {"response_format": {"type": "json_object", "schema": 123}},
                  {"response_format": {"type": "json_object", "schema": {"type": "hiccup"}}},
                  {"json_schema": {"type": 123}}, {"grammar": "root ::= this is (not valid GBNF"},
                  {"grammar": "root ::= \"a\"", "json_schema": {"const": "42"}}):
        r = post(srv, "/chat/completions", dict(extra, messages=MSGS, max_tokens=2))
        assert r.status_code == 400 and "error" in r.json(), extra
    assert post(srv, "/chat/completions", {"messages": MSGS, "max_tokens": 2, "response_format": {"type": "text"}}).status_code == 200
    r = post(srv, "/chat/completions", {"messages": MSGS, "max_tokens": 6, "json_schema": {"const": "42"}})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"].strip() == '"42"'


def test_builtin_template_names_and_reasoning(tmp_path):
    """--chat-template takes llama-server's built-in names; --reasoning off closes the
    thought a template opens; date_string is today's date."""
    s = Server(["--chat-template", "chatml"])
    try:
        p = post(s, "/apply-template", {"messages": MSGS}).json()["prompt"]
        assert p == "<|im_start|>system\nBook<|im_end|>\n<|im_start|>user\nWhat is the best book<|im_end|>\n<|im_start|>assistant\n"
    finally:
        s.stop()
    t = tmp_path / "think.jinja"
    t.write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{{ date_string }}"
                 "{% if add_generation_prompt %}<bot><think>\n{% if not enable_thinking %}</think>{% endif %}{% endif %}")
    for mode, end in (("auto", "<bot><think>\n"), ("on", "<bot><think>\n"), ("off", "<bot><think>\n</think>")):
        s = Server(["--chat-template-file", str(t), "--reasoning", mode])
        try:
            p = post(s, "/apply-template", {"messages": [{"role": "user", "content": "hi"}]}).json()["prompt"]
            assert p.endswith(end), (mode, p)
            import datetime
            assert datetime.date.today().strftime("%d %b %Y") in p
        finally:
            s.stop()
    t2 = tmp_path / "open.jinja"  # a template that lets the model open its own thought
    t2.write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                  "{% if add_generation_prompt %}<bot>{% endif %}{# <think></think> #}")
    s = Server(["--chat-template-file", str(t2), "--reasoning", "off"])
    try:
        p = post(s, "/apply-template", {"messages": [{"role": "user", "content": "hi"}]}).json()["prompt"]
        assert p.endswith("<bot><think></think>")
    finally:
        s.stop()


def test_template_functions_variable(tmp_path):
    """A template reading `functions` (FireFunction's) gets the tools as indented JSON
    text, and "" without tools, as llama-server gives it."""
    t = tmp_path / "fn.jinja"
    t.write_text("[{{ functions }}]{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    tools = [{"type": "function", "function": {"name": "get_time", "description": "now",
                                               "parameters": {"type": "object", "properties": {}}}}]
    s = Server(["--chat-template-file", str(t)])
    try:
        msgs = [{"role": "user", "content": "hi"}]
        assert post(s, "/apply-template", {"messages": msgs}).json()["prompt"] == "[]<user>hi"
        p = post(s, "/apply-template", {"messages": msgs, "tools": tools}).json()["prompt"]
        assert json.loads(p[1:p.rindex("]")]) == tools and '\n  {' in p, p
    finally:
        s.stop()


def test_reply_starting_inside_a_thought(tmp_path):
    """When the prompt ends inside <think>, the reply's text up to </think> is
    reasoning_content (llama-server's deepseek format), or content with --reasoning-format none."""
    t = tmp_path / "r1.jinja"
    t.write_text("{% for m in messages %}{{ m.content }}{% endfor %}<think>\n")
    for fmt in ("deepseek", "none"):
        s = Server(["--chat-template-file", str(t), "--reasoning-format", fmt, "--temp", "0"])
        try:
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}
            m = post(s, "/v1/chat/completions", body).json()["choices"][0]["message"]
            if fmt == "none":
                assert "reasoning_content" not in m and m["content"]
            else:
                assert m.get("reasoning_content") and m["content"] == ""
        finally:
            s.stop()


# ---- Anthropic ---------------------------------------------------------------------------

def test_anthropic_blocks_and_count_tokens(srv):
    conv = [{"role": "user", "content": "What's the weather?"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "use the tool"},
                                              {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"q": "Paris"}}]},
            {"role": "user", "content": [{"type": "text", "text": "Here:"},
                                         {"type": "tool_result", "tool_use_id": "t1", "content": "Sunny", "is_error": False}]}]
    tools = [{"name": "get_weather", "description": "weather", "input_schema": {"type": "object", "properties": {}}}]
    r = post(srv, "/v1/messages", {"model": "m", "max_tokens": 3, "messages": conv, "tools": tools})
    assert r.status_code == 200 and r.json()["type"] == "message", r.text
    assert post(srv, "/v1/messages", {"model": "m", "max_tokens": 3, "messages": []}).status_code == 200
    img = [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]
    r = post(srv, "/v1/messages", {"model": "m", "max_tokens": 3, "messages": img})
    assert r.status_code == 500 and "image input is not supported" in r.json()["error"]["message"]
    c = post(srv, "/v1/messages/count_tokens", {"model": "m", "messages": [{"role": "user", "content": "Hello world"}]}).json()
    assert set(c) == {"input_tokens"} and c["input_tokens"] > 0
    c2 = post(srv, "/v1/messages/count_tokens", {"model": "m", "system": "Be brief.",
                                                 "messages": [{"role": "user", "content": "Hello world"}]}).json()
    assert c2["input_tokens"] > c["input_tokens"]


# ---- Vertex AI ---------------------------------------------------------------------------

def test_vertex_prediction_route():
    env = dict(os.environ, AIP_MODE="PREDICTION")
    old = os.environ.copy()
    os.environ.update(env)
    try:
        s = Server(["-np", "2"])
    finally:
        os.environ.clear()
        os.environ.update(old)
    try:
        inst = {"@requestFormat": "chatCompletions", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}
        r = post(s, "/predict", {"instances": [inst, dict(inst, stream=True), {"@requestFormat": "tokenize", "content": "a b"},
                                               {"@requestFormat": "nope"}, 3]})
        assert r.status_code == 200, r.text
        p = r.json()["predictions"]
        assert p[0]["choices"][0]["message"]["role"] == "assistant" and p[1]["object"] == "chat.completion"
        assert p[2]["tokens"] and "error" in p[3] and "error" in p[4]
        assert post(s, "/predict", {"instances": 3}).status_code == 400
    finally:
        s.stop()


def test_sleep_idle_frees_and_wakes():
    """--sleep-idle-seconds: idle that long, the server frees its KV cache; /health,
    /props and /v1/models answer without waking it, a generation request wakes it."""
    s = Server(["--sleep-idle-seconds", "1", "--temp", "0", "-n", "4"])
    try:
        first = post(s, "/completion", {"prompt": "Hello there"}).json()["content"]
        import time
        deadline = time.time() + 30
        while not requests.get(s.url + "/props", timeout=30).json()["is_sleeping"]:
            assert time.time() < deadline, "never fell asleep"
            time.sleep(0.3)
        assert requests.get(s.url + "/health", timeout=30).status_code == 200
        assert requests.get(s.url + "/v1/models", timeout=30).status_code == 200
        assert requests.get(s.url + "/props", timeout=30).json()["is_sleeping"] is True
        again = post(s, "/completion", {"prompt": "Hello there"}).json()
        assert again["content"] == first and again["timings"]["cache_n"] == 0  # a fresh KV
        assert requests.get(s.url + "/props", timeout=30).json()["is_sleeping"] is False
    finally:
        assert s.stop()[0] == 0


def fim_model(path):
    """The qwen2 fixture with three of its tokens renamed into fill-in-the-middle controls."""
    import gguf
    import numpy as np
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = gguf.GGUFReader(os.path.join(root, "tests", "fixtures", "models", "qwen2.gguf"))
    w = gguf.GGUFWriter(str(path), r.fields["general.architecture"].contents())
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        v = f.contents()
        if k == "tokenizer.ggml.tokens":
            v = list(v)
            v[505:508] = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]
        if k == "tokenizer.ggml.token_type":
            v = list(v)
            v[505:508] = [3, 3, 3]
        w.add_key_value(k, v, f.types[0], sub_type=f.types[1] if len(f.types) > 1 else None)
    for t in r.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def test_infill(srv, tmp_path):
    """/infill: <PRE> prefix <SUF> suffix <MID> prompt with the model's FIM tokens, extra
    context before it; a model without them is llama-server's 501."""
    r = post(srv, "/infill", {"input_prefix": "a", "input_suffix": "b"})
    assert r.status_code == 501 and "Infill is not supported" in r.json()["error"]["message"]
    s = Server(["--temp", "0"], model=fim_model(tmp_path / "fim.gguf"))
    try:
        body = {"input_prefix": "ab", "input_suffix": "cd", "prompt": "e", "n_predict": 2,
                "response_fields": ["prompt", "tokens_predicted"]}
        j = post(s, "/infill", body).json()
        assert j["prompt"].endswith("<|fim_prefix|>ab<|fim_suffix|>cd<|fim_middle|>e") and j["tokens_predicted"] == 2, j
        j = post(s, "/infill", dict(body, input_extra=[{"filename": "x.h", "text": "xy"}])).json()
        assert j["prompt"].endswith("xy<|fim_prefix|>ab<|fim_suffix|>cd<|fim_middle|>e"), j
        for bad in ({}, {"filename": "ok"}, {"filename": 123, "text": "abc"}, {"text": 5}):
            assert post(s, "/infill", dict(body, input_extra=[bad])).status_code == 400, bad
        assert post(s, "/infill", {"input_suffix": "x"}).status_code == 400
        assert post(s, "/infill", dict(body, input_extra="x")).status_code == 400
    finally:
        s.stop()


def test_responses_api(srv):
    """/v1/responses through the official client: one message output item, whole or as the
    API's stream events (a reply cut by max_output_tokens is "incomplete", as OpenAI's is)."""
    from openai import OpenAI
    c = OpenAI(api_key="x", base_url=srv.url + "/v1", max_retries=0)
    r = c.responses.create(model="m", instructions="Be brief.", max_output_tokens=4, temperature=0,
                           input=[{"role": "user", "content": "What is the best book"}])
    assert r.id.startswith("resp_") and r.output[0].id.startswith("msg_") and r.output_text
    assert r.status == "incomplete" and r.usage.output_tokens == 4
    types, text, final = [], "", None
    for e in c.responses.create(model="m", input="Say hi", max_output_tokens=4, temperature=0, stream=True):
        types.append(e.type)
        if e.type == "response.output_text.delta":
            text += e.delta
        if e.type in ("response.completed", "response.incomplete"):
            final = e.response
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert final is not None and final.output_text == text and final.output[0].id.startswith("msg_")
    n = post(srv, "/v1/responses/input_tokens", {"input": "hello", "instructions": "x"}).json()
    assert n["object"] == "response.input_tokens" and n["input_tokens"] > 1
    conv = [{"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]
    assert post(srv, "/v1/responses", {"input": conv, "max_output_tokens": 2}).status_code == 200
    assert post(srv, "/v1/responses", {"input": [{"type": "computer_call"}]}).status_code == 400
