"""`1bit serve` against the real Gemma 3 270M: OpenAI (official client), Anthropic,
llama-server and Lemonade routes, error shapes, auth, CORS and flag handling.
Each server is started and stopped by the tests themselves."""
import json
import os
import subprocess
import sys
import time

import requests
import pytest

from serverutil import BIN, ROOT, Server


@pytest.fixture(scope="module")
def srv():
    s = Server(["-np", "2", "-c", "2048", "--metrics"])
    yield s
    assert s.stop()[0] == 0


def oai(srv):
    import openai
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def check_error(r, status, etype=None):
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert e["code"] == status and isinstance(e["message"], str) and e["message"]
    if etype:
        assert e["type"] == etype


MSGS = [{"role": "user", "content": "Write one sentence about the sea."}]


def test_health_models(srv):
    assert requests.get(srv.url + "/health").json() == {"status": "ok"}
    models = oai(srv).models.list().data
    assert len(models) == 1 and models[0].id == "gemma-3-270m-q4_k_m.gguf"


def test_chat_logprobs_and_stream_agree(srv):
    c = oai(srv)
    r = c.chat.completions.create(model="m", messages=MSGS, max_tokens=12, temperature=0, logprobs=True,
                                  top_logprobs=3)
    ch = r.choices[0]
    assert r.object == "chat.completion" and ch.message.role == "assistant"
    assert ch.finish_reason in ("stop", "length") and ch.message.content
    lp = ch.logprobs.content
    assert len(lp) == r.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    for t in lp:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        # greedy: the chosen token is the most likely one
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob, abs=1e-4)
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token or t.token.endswith("\ufffd")
    assert "".join(t.token for t in lp).strip() == ch.message.content.strip()

    chunks = list(c.chat.completions.create(model="m", messages=MSGS, max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True}, logprobs=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    fin = [k for k in chunks if k.choices and k.choices[0].finish_reason]
    assert len(fin) == 1 and fin[0].choices[0].finish_reason == ch.finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    text = "".join(k.choices[0].delta.content or "" for k in chunks if k.choices)
    assert text == ch.message.content
    n_lp = sum(len(k.choices[0].logprobs.content) for k in chunks if k.choices and k.choices[0].logprobs)
    assert n_lp == r.usage.completion_tokens


def test_raw_sse_framing(srv):
    body = {"messages": MSGS, "max_tokens": 4, "temperature": 0, "stream": True}
    r = requests.post(srv.url + "/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    raw = r.content.decode()
    events = [e for e in raw.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    last = json.loads(events[-2][6:])
    assert last["choices"][0]["finish_reason"] == "length" and "timings" in last


def test_completions_logprobs_stream(srv):
    c = oai(srv)
    r = c.completions.create(model="m", prompt="The capital of France is", max_tokens=10, temperature=0, logprobs=2)
    ch = r.choices[0]
    assert r.object == "text_completion" and ch.text
    assert len(ch.logprobs.tokens) == len(ch.logprobs.token_logprobs) == r.usage.completion_tokens
    assert all(len(t) <= 2 for t in ch.logprobs.top_logprobs)
    s = list(c.completions.create(model="m", prompt="The capital of France is", max_tokens=10, temperature=0,
                                  stream=True))
    assert "".join(k.choices[0].text for k in s if k.choices) == ch.text
    assert s[-1].choices[0].finish_reason == ch.finish_reason


def test_stop_string_and_n(srv):
    c = oai(srv)
    base = c.completions.create(model="m", prompt="Count: one, two, three,", max_tokens=16, temperature=0,
                                extra_body={"ignore_eos": True}).choices[0].text
    assert len(base) > 6
    stop = base[3:6]
    cut = base[:base.index(stop)]
    for stream in (False, True):
        r = c.completions.create(model="m", prompt="Count: one, two, three,", max_tokens=16, temperature=0,
                                 stop=[stop], stream=stream, extra_body={"ignore_eos": True})
        if stream:
            r = list(r)
            assert "".join(k.choices[0].text for k in r if k.choices) == cut
            assert r[-1].choices[0].finish_reason == "stop"
        else:
            assert r.choices[0].text == cut and r.choices[0].finish_reason == "stop"
    r = c.completions.create(model="m", prompt="Hello", max_tokens=4, temperature=0, n=2)
    assert [x.index for x in r.choices] == [0, 1] and r.choices[0].text == r.choices[1].text


def test_stop_word_outlives_its_task(srv):
    """The matched stop string is reported after the task that owned it is gone (it was
    read from freed memory: issue #31): /completion's stopping_word, Anthropic's
    stop_sequence, for a long stop list whose match is not the first entry. Under
    AddressSanitizer (CI) a use after free ends the server."""
    stops = ["never-" + "x" * 200, ","]
    for _ in range(3):  # freed memory is reused between requests
        r = requests.post(srv.url + "/completion", json={"prompt": "1, 2, 3, 4,", "n_predict": 16, "temperature": 0,
                                                       "stop": stops}).json()
        assert r["stop_type"] == "word" and r["stopping_word"] == ",", r
        m = requests.post(srv.url + "/v1/messages", json={"model": "m", "max_tokens": 16, "temperature": 0,
                                                        "messages": [{"role": "user", "content": "1, 2, 3, 4,"}],
                                                        "stop_sequences": stops}).json()
        assert m["stop_reason"] == "stop_sequence" and m["stop_sequence"] == ",", m


def test_zero_tokens_roles_and_methods(srv):
    """n_predict / max_tokens 0 evaluate the prompt and generate nothing (llama-server);
    a chat role other than system, developer, user, assistant or tool is a 400; a method
    a route does not take is a 405 (PUT /health)."""
    r = requests.post(srv.url + "/completion", json={"prompt": "Hello there", "n_predict": 0}).json()
    assert r["content"] == "" and r["tokens_predicted"] == 0 and r["tokens_evaluated"] > 0, r
    for key in ("max_tokens", "max_completion_tokens"):
        c = requests.post(srv.url + "/v1/chat/completions", json={"messages": MSGS, key: 0}).json()
        assert c["choices"][0]["message"]["content"] == "" and c["usage"]["completion_tokens"] == 0, c
        assert c["choices"][0]["finish_reason"] == "length"
    for role in ("wizard", "function", "", "USER"):
        check_error(requests.post(srv.url + "/v1/chat/completions",
                                  json={"messages": [{"role": role, "content": "hi"}], "max_tokens": 1}), 400)
    ok = requests.post(srv.url + "/v1/chat/completions", json={"max_tokens": 1, "messages": [
        {"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}]})
    assert ok.status_code == 200, ok.text
    for method in ("PUT", "DELETE", "POST"):
        check_error(requests.request(method, srv.url + "/health"), 405)
    assert requests.head(srv.url + "/health").status_code == 200


def test_header_deadline_and_connection_cap():
    """Headers that never finish are cut at --header-timeout (an idle timeout alone lets a
    client trickle one byte at a time for ever); one address holds at most
    --max-conns-per-ip connections; a request with two Content-Length headers is a 400;
    keep-alive reuse still works."""
    import socket
    s = Server(["--header-timeout", "2", "--max-conns-per-ip", "8"])
    host, port = "127.0.0.1", int(s.url.rsplit(":", 1)[1])
    try:
        c = socket.create_connection((host, port))
        c.settimeout(5)
        c.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 9\r\n\r\n{}")
        assert c.recv(4096).startswith(b"HTTP/1.1 400"), "duplicate Content-Length"
        c.close()
        slow = socket.create_connection((host, port))
        t0 = time.time()
        cut = None
        try:
            for ch in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 40:
                slow.sendall(bytes([ch]))
                time.sleep(0.25)
        except OSError:
            cut = time.time() - t0
        assert cut is not None and cut < 6, cut
        idle = [socket.create_connection((host, port)) for _ in range(12)]
        time.sleep(0.5)
        gone = 0
        for so in idle:
            so.settimeout(0.3)
            try:
                gone += so.recv(1) == b""
            except socket.timeout:
                pass
            except OSError:
                gone += 1
        assert 4 <= gone <= 6, gone  # 12 asked, at most 8 kept (the cut one may not be reaped yet)
        time.sleep(2.5)  # the 8 pass their deadline and are cut: the server is free again
        with requests.Session() as sess:
            assert [sess.get(s.url + "/health").status_code for _ in range(3)] == [200] * 3
        for so in idle:
            so.close()
    finally:
        assert s.stop()[0] == 0


def test_sampling_params_accepted(srv):
    c = oai(srv)
    args = dict(model="m", messages=MSGS, max_completion_tokens=6, temperature=0.9, top_p=0.9, seed=42,
                presence_penalty=0.5, frequency_penalty=0.5, extra_body={"top_k": 20, "min_p": 0.05})
    a = c.chat.completions.create(**args).choices[0].message.content
    b = c.chat.completions.create(**args).choices[0].message.content
    assert a == b  # same seed, same text
    # a huge bias forces a token
    tok = requests.post(srv.url + "/tokenize", json={"content": " banana"}).json()["tokens"]
    r = c.completions.create(model="m", prompt="I like", max_tokens=3, temperature=0,
                             logit_bias={str(tok[0]): 100})
    assert r.choices[0].text.startswith(" banana")


def test_anthropic_messages(srv):
    import anthropic
    a = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
    m = a.messages.create(model="m", max_tokens=8, system="Be brief.", extra_body={"temperature": 0},
                          messages=[{"role": "user", "content": [{"type": "text", "text": "Hi there"}]}])
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert len(m.content) == 1 and m.content[0].type == "text" and m.content[0].text
    assert m.usage.input_tokens > 5 and 0 < m.usage.output_tokens <= 8
    with a.messages.stream(model="m", max_tokens=8, system="Be brief.", extra_body={"temperature": 0},
                           messages=[{"role": "user", "content": "Hi there"}]) as st:
        text = "".join(st.text_stream)
        final = st.get_final_message()
    assert text == m.content[0].text and final.stop_reason == m.stop_reason
    body = {"model": "m", "max_tokens": 3, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    raw = requests.post(srv.url + "/v1/messages", json=body, timeout=300).text
    names = [l[7:] for l in raw.splitlines() if l.startswith("event: ")]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    check_error(requests.post(srv.url + "/v1/messages", json={"messages": [{"role": "user", "content": "x"}]}), 400)


def test_llama_routes(srv):
    u = srv.url
    toks = requests.post(u + "/tokenize", json={"content": "Hello world", "with_pieces": True}).json()["tokens"]
    assert "".join(t["piece"] for t in toks) == "Hello world"
    ids = [t["id"] for t in toks]
    assert requests.post(u + "/detokenize", json={"tokens": ids}).json()["content"] == "Hello world"
    r = requests.post(u + "/completion", json={"prompt": "The sky is", "n_predict": 5, "temperature": 0, "n_probs": 2},
                   timeout=300).json()
    assert r["stop"] is True and r["tokens_predicted"] == 5 and r["stop_type"] == "limit"
    assert len(r["completion_probabilities"]) == 5 and "timings" in r
    p = requests.post(u + "/apply-template", json={"messages": MSGS}).json()["prompt"]
    assert MSGS[0]["content"] in p
    props = requests.get(u + "/props").json()
    assert props["total_slots"] == 2 and props["default_generation_settings"]["n_ctx"] == 1024
    slots = requests.get(u + "/slots").json()
    assert [s["id"] for s in slots] == [0, 1]
    m = requests.get(u + "/metrics").text
    for name in ("prompt_tokens_total", "tokens_predicted_total", "requests_processing", "requests_deferred",
                 "kv_cache_usage_ratio"):
        assert "llamacpp:" + name in m


def test_lemonade_routes(srv):
    u = srv.url + "/api/v1"
    h = requests.get(u + "/health").json()
    assert h["status"] == "ok" and h["model_loaded"] == "gemma-3-270m-q4_k_m.gguf"
    assert requests.get(u + "/models").json()["data"][0]["id"] == h["model_loaded"]
    r = requests.post(u + "/chat/completions", json={"messages": MSGS, "max_tokens": 5, "temperature": 0}, timeout=300)
    assert r.status_code == 200
    st = requests.get(u + "/stats").json()
    assert st["output_tokens"] == r.json()["usage"]["completion_tokens"] and st["tokens_per_second"] > 0
    assert "Processor" in requests.get(u + "/system-info").json()
    check_error(requests.post(u + "/load", json={"model_name": "other"}), 404)
    assert requests.post(u + "/unload").status_code == 200
    check_error(requests.post(u + "/chat/completions", json={"messages": MSGS, "max_tokens": 2}), 503)
    assert requests.post(u + "/load", json={"model_name": h["model_loaded"]}).status_code == 200
    assert requests.post(u + "/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=300).status_code == 200


def test_error_shapes(srv):
    u = srv.url
    check_error(requests.post(u + "/v1/chat/completions", data=b"{not json"), 400, "invalid_request_error")
    check_error(requests.post(u + "/v1/chat/completions", json=[1, 2]), 400)
    check_error(requests.post(u + "/v1/chat/completions", json={"messages": "hi"}), 400)
    check_error(requests.post(u + "/v1/chat/completions", json={"messages": MSGS, "max_tokens": "many"}), 400)
    check_error(requests.post(u + "/v1/chat/completions", json={"messages": MSGS, "temperature": -1}), 400)
    check_error(requests.post(u + "/v1/chat/completions", json={"messages": [{"content": "x"}]}), 400)
    check_error(requests.post(u + "/v1/completions", json={"prompt": [1, -5]}), 400)
    # a text key is llama-server's form (its tokens get the bias); a value must be a number or false
    check_error(requests.post(u + "/v1/completions", json={"prompt": "x", "logit_bias": {"abc": "high"}}), 400)
    check_error(requests.get(u + "/nope"), 404, "not_found_error")
    check_error(requests.get(u + "/v1/chat/completions"), 405)
    long = "hello " * 1100  # > 1024 tokens per slot
    check_error(requests.post(u + "/v1/completions", json={"prompt": long, "max_tokens": 1}), 400,
                "exceed_context_size_error")
    r = requests.post(u + "/detokenize", json={"tokens": [10**9]})
    check_error(r, 400)


def test_disconnect_frees_slot(srv):
    body = {"prompt": "Tell me a long story.", "max_tokens": 400, "temperature": 0, "stream": True,
            "ignore_eos": True}
    with requests.post(srv.url + "/v1/completions", json=body, timeout=300, stream=True) as r:
        it = r.iter_lines()
        for _ in range(3):
            next(it)
        assert any(s["is_processing"] for s in requests.get(srv.url + "/slots").json())
    deadline = time.time() + 5
    while any(s["is_processing"] for s in requests.get(srv.url + "/slots").json()):
        assert time.time() < deadline, "slot still busy after the client left"
        time.sleep(0.05)


def test_auth_and_cors():
    s = Server(["--api-key", "sekrit", "--cors-origins", "http://good.example"])
    try:
        u = s.url
        assert requests.get(u + "/health").status_code == 200
        assert requests.get(u + "/v1/models").status_code == 200
        body = {"prompt": "Hi", "max_tokens": 1}
        check_error(requests.post(u + "/v1/completions", json=body), 401, "authentication_error")
        check_error(requests.post(u + "/v1/completions", json=body, headers={"Authorization": "Bearer nope"}), 401)
        assert requests.post(u + "/v1/completions", json=body, headers={"Authorization": "Bearer sekrit"},
                          timeout=300).status_code == 200
        assert requests.post(u + "/v1/completions", json=body, headers={"X-Api-Key": "sekrit"},
                          timeout=300).status_code == 200
        pre = {"Origin": "http://good.example", "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization, content-type"}
        r = requests.options(u + "/v1/chat/completions", headers=pre)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://good.example"
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        # a refused origin: the preflight is answered (as llama-server does) without the
        # allow-origin header, so the browser refuses the request
        r = requests.options(u + "/v1/chat/completions", headers=dict(pre, Origin="http://evil.example"))
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
        r = requests.get(u + "/health", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in r.headers
        r = requests.get(u + "/health", headers={"Origin": u})  # same origin
        assert r.headers.get("access-control-allow-origin") == u
    finally:
        assert s.stop()[0] == 0


def test_flags():
    r = subprocess.run([BIN, "serve", "--bogus-flag"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "unknown flag '--bogus-flag'" in r.stderr
    r = subprocess.run([BIN, "serve", "-ctk", "q3_z"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "cache type" in r.stderr
    r = subprocess.run([BIN, "serve", "--device", "tpu9"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "unknown device" in r.stderr
    r = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "--ctx-size" in r.stdout


# ---- Lemonade's launch lines -------------------------------------------------------------
# The command lines Lemonade builds for llama-server, written out as it builds them:
# lemonade-sdk/lemonade at e385039ed33551de7f54cb73194cd08088772c08,
# src/cpp/server/backends/llamacpp/llamacpp_server.cpp (LlamaCppServer::load: -m, --ctx-size,
# --port, --jinja, --metrics, then --model-draft, --embeddings or --reranking, then the
# recipe's llamacpp_args) with the per-architecture llamacpp_args of
# src/cpp/resources/architecture_defaults.json ("qwen3", "qwen35"). --ctx-size is what its
# auto-tuning falls back to (AUTO_CTX_FALLBACK, 4096), raised to EMBEDDING_CTX_SIZE (8192)
# for an embedding model (src/cpp/include/lemon/auto_tune.h); no --device unless the user
# sets one. The "user" line adds a device and flags people put in llamacpp_args.
LLAMA_SERVER = os.path.join(ROOT, "build", "llama-server")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
QWEN3_ARGS = ["--temp", "0.6", "--top-p", "0.85", "--top-k", "20", "--min-p", "0.0", "--repeat-penalty", "1.0"]
QWEN35_ARGS = ["--temp", "1.0", "--top-p", "0.95", "--top-k", "20", "--min-p", "0.00", "--repeat-penalty", "1.0",
               "--chat-template-kwargs", '{"preserve_thinking":true}']
HEAD = ["--jinja", "--metrics"]


# Qwen3's own chat template where ../shared/data has it, else ChatML (Qwen's format): the
# fixtures carry none, a real model does, and Lemonade's line passes no template flag.
QWEN3_CONFIG = os.path.join(ROOT, "..", "shared", "data", "tokenizers", "qwen3", "tokenizer_config.json")
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def lemonade_models(tmp_path_factory):
    """The fixtures as Lemonade would find them: Qwen3 and Qwen3.5 with a chat template (a
    copy through gguf-py's gguf_new_metadata), the tiny BERT embedder and cross-encoder as
    GGUF (1bit convert)."""
    d = tmp_path_factory.mktemp("lemonade")
    tmpl = json.load(open(QWEN3_CONFIG))["chat_template"] if os.path.exists(QWEN3_CONFIG) else CHATML
    out = {}
    for name in ("qwen3", "qwen35"):
        out[name] = str(d / (name + ".gguf"))
        r = subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", "--chat-template", tmpl,
                            os.path.join(FIXTURES, "models", name + ".gguf"), out[name]],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    for name in ("bert", "bert-rerank"):
        out[name] = str(d / (name + ".gguf"))
        r = subprocess.run([BIN, "convert", os.path.join(FIXTURES, "embed", name), "-o", out[name], "--type", "F32"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    return out


def lemonade_line(kind, models):
    """The launch line of a kind of model, as a function of the port."""
    if kind == "chat":
        return lambda port: [LLAMA_SERVER, "-m", models["qwen3"], "--ctx-size", "4096", "--port", port, *HEAD, *QWEN3_ARGS]
    if kind == "chat-qwen35":
        return lambda port: [LLAMA_SERVER, "-m", models["qwen35"], "--ctx-size", "4096", "--port", port, *HEAD, *QWEN35_ARGS]
    if kind == "embedding":
        return lambda port: [LLAMA_SERVER, "-m", models["bert"], "--ctx-size", "8192", "--port", port, *HEAD,
                             "--embeddings"]
    if kind == "reranking":
        return lambda port: [LLAMA_SERVER, "-m", models["bert-rerank"], "--ctx-size", "4096", "--port", port, *HEAD,
                             "--reranking"]
    if kind == "draft":
        # --draft-p-min 0 as a user's llamacpp_args: a model this small is never 75% sure
        return lambda port: [LLAMA_SERVER, "-m", models["qwen3"], "--ctx-size", "4096", "--port", port, *HEAD,
                             "--model-draft", models["qwen3"], *QWEN3_ARGS, "--draft-p-min", "0"]
    if kind == "mtp":
        # a model labelled "mtp": resolve_llamacpp_runtime_args adds --spec-type draft-mtp
        return lambda port: [LLAMA_SERVER, "-m", models["qwen3"], "--ctx-size", "4096", "--port", port, *HEAD,
                             *QWEN3_ARGS, "--spec-type", "draft-mtp"]
    # a user's llamacpp_args on the chat line
    # with the user's llamacpp_device (where Lemonade puts --device) and their llamacpp_args
    return lambda port: [LLAMA_SERVER, "-m", models["qwen3"], "--ctx-size", "4096", "--device", "CPU0", "--port", port, *HEAD,
                         *QWEN3_ARGS, "-ngl", "99", "-fa", "on", "--alias", "lemon", "-np", "1", "--no-webui"]


def lemonade_request(kind, s):
    """One request of the kind Lemonade forwards to such a server, checked."""
    post = lambda path, body: requests.post(s.url + path, json=body, timeout=300)  # noqa: E731
    if kind.startswith("chat") or kind == "user":
        r = post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 4})
        assert r.status_code == 200, r.text
        c = r.json()
        assert c["object"] == "chat.completion" and c["usage"]["completion_tokens"] >= 1
        assert c["model"] == ("lemon" if kind == "user" else c["model"])
    elif kind == "embedding":
        r = post("/v1/embeddings", {"input": ["the sea", "a cat"]})
        assert r.status_code == 200, r.text
        d = r.json()["data"]
        assert [e["index"] for e in d] == [0, 1] and len(d[0]["embedding"]) == len(d[1]["embedding"]) > 0
    elif kind == "reranking":
        r = post("/v1/rerank", {"query": "the sea", "documents": ["waves on a beach", "a tax form", "salt water"]})
        assert r.status_code == 200, r.text
        res = r.json()["results"]
        assert sorted(x["index"] for x in res) == [0, 1, 2]
        scores = [x["relevance_score"] for x in res]
        assert scores == sorted(scores, reverse=True)
    elif kind == "mtp":
        r = post("/v1/completions", {"prompt": "The sea is", "max_tokens": 8})
        assert r.status_code == 200, r.text
    else:
        r = post("/v1/completions", {"prompt": "The sea is", "max_tokens": 24, "temperature": 0})
        assert r.status_code == 200, r.text
        t = r.json()["timings"]
        # the draft is loaded and used: the model drafting for itself greedily is always right
        assert t["draft_n"] > 0 and t["draft_n_accepted"] == t["draft_n"], t


@pytest.mark.parametrize("kind", [
    "chat",
    "chat-qwen35", "embedding", "reranking", "draft", "mtp", "user"])
def test_lemonade_launch_line(kind, lemonade_models):
    s = Server([], line=lemonade_line(kind, lemonade_models))
    try:
        assert requests.get(s.url + "/health").json() == {"status": "ok"}
        lemonade_request(kind, s)
        assert "llamacpp:" in requests.get(s.url + "/metrics").text
        if kind == "user":
            assert requests.get(s.url + "/props").json()["default_generation_settings"]["n_ctx"] == 4096
    finally:
        code, out = s.stop()
        assert code == 0, out
    # --spec-type draft-mtp is accepted as llama-server's flags without meaning here are:
    # one warning line saying speculative decoding is off, and why
    warn = [ln for ln in out.splitlines() if "--spec-type" in ln]
    assert (kind == "mtp") == bool(warn), out
    if warn:
        assert len(warn) == 1 and "speculative decoding is off" in warn[0] and "MTP" in warn[0], warn


def test_lemonade_launch_line_without_subcommand():
    # the same program answers as `1bit` with llama-server's flags and no subcommand
    s = Server(["--ctx-size", "4096", "--jinja", "--metrics", "--alias", "lemon"], subcommand=False)
    try:
        r = requests.post(s.url + "/v1/chat/completions", json={"messages": MSGS, "max_tokens": 3}, timeout=300)
        assert r.status_code == 200 and r.json()["model"] == "lemon"
    finally:
        assert s.stop()[0] == 0
