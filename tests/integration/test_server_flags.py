"""llama-server's sampling and slot flags on `1bit serve`, the way llama.cpp's own server
tests start it (`--temp`, `--seed`, `-n`, `--no-slots`): they set the defaults of requests
that do not carry their own, and a request's own values still win."""
import os
import subprocess

import pytest
import requests

from serverutil import BIN, Server

PROMPT = "The capital of France is"


def completion(srv, **body):
    r = requests.post(srv.url + "/completion", json={"prompt": PROMPT, **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_server_defaults_apply_and_requests_override():
    srv = Server(["--temp", "0", "-n", "6", "--no-slots"])
    try:
        a, b = completion(srv), completion(srv)
        # -n 6 bounds a request without n_predict; --temp 0 makes it greedy (same text twice)
        assert a["tokens_predicted"] == 6 and a["content"] == b["content"]
        assert completion(srv, n_predict=3)["tokens_predicted"] == 3
        # a request's own temperature wins: with a seed, a hot sample differs from greedy
        hot = {completion(srv, temperature=5.0, seed=s, n_predict=6)["content"] for s in range(4)}
        assert hot != {a["content"]}
        r = requests.get(srv.url + "/slots", timeout=10)
        assert r.status_code == 501 and "slots" in r.json()["error"]["message"]
        # Anthropic's API still requires max_tokens although the server has -n
        r = requests.post(srv.url + "/v1/messages", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                          timeout=60)
        assert r.status_code == 400 and "max_tokens" in r.text
    finally:
        srv.stop()


def test_server_seed_makes_sampling_repeatable():
    srv = Server(["--temp", "1.5", "--seed", "42", "-n", "8", "--slots"])
    try:
        first = completion(srv)["content"]
        assert all(completion(srv)["content"] == first for _ in range(2))
        assert requests.get(srv.url + "/slots", timeout=10).status_code == 200
    finally:
        srv.stop()
    srv = Server(["--temp", "1.5", "--seed", "-1", "-n", "8"])  # -1: a new seed per request
    try:
        assert len({completion(srv)["content"] for _ in range(5)}) > 1
    finally:
        srv.stop()


def test_bad_sampling_flag_is_one_line():
    import subprocess
    from serverutil import BIN, default_model
    r = subprocess.run([BIN, "serve", "-m", default_model(), "--temp", "warm"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--temp" in lines[0], r.stderr


def test_chat_template_file(tmp_path):
    t = tmp_path / "t.jinja"
    t.write_text("{% for m in messages %}<<{{ m.role }}|{{ m.content }}>>{% endfor %}"
                 "{% if add_generation_prompt %}<<assistant|{% endif %}")
    srv = Server(["--chat-template-file", str(t)])
    try:
        r = requests.post(srv.url + "/apply-template", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=30)
        assert r.status_code == 200 and r.json()["prompt"] == "<<user|hi>><<assistant|", r.text
        assert "<<assistant|" in requests.get(srv.url + "/props", timeout=10).json()["chat_template"]
    finally:
        srv.stop()
    import subprocess
    from serverutil import BIN, default_model
    r = subprocess.run([BIN, "serve", "-m", default_model(), "--chat-template-file", str(tmp_path / "missing.jinja")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--chat-template-file" in r.stderr


FIXTURE_MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "models",
                             "gemma3.gguf")


def test_chat_template_kwargs(tmp_path):
    """--chat-template-kwargs: variables every request's template sees; a request's own
    chat_template_kwargs win key by key (llama-server's merge)."""
    t = tmp_path / "kw.jinja"
    t.write_text("[{{ preserve_thinking }}|{{ mood | default('none') }}|{{ enable_thinking }}]"
                 "{% for m in messages %}{{ m.content }}{% endfor %}")
    srv = Server(["--chat-template-file", str(t), "--chat-template-kwargs",
                  '{"preserve_thinking": true, "mood": "calm", "enable_thinking": false}'], model=FIXTURE_MODEL)
    try:
        def prompt(**extra):
            r = requests.post(srv.url + "/apply-template", json={"messages": [{"role": "user", "content": "hi"}],
                                                                 **extra}, timeout=30)
            assert r.status_code == 200, r.text
            return r.json()["prompt"]
        assert prompt().startswith("[True|calm|False]hi")
        assert prompt(chat_template_kwargs={"mood": "odd", "enable_thinking": True}).startswith("[True|odd|True]hi")
        # the next request sees the server's values again (the merge copies them)
        assert prompt().startswith("[True|calm|False]hi")
    finally:
        srv.stop()


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]", '"text"', '{"enable_thinking": "no"}'])
def test_chat_template_kwargs_refused_at_start(bad):
    r = subprocess.run([BIN, "serve", "-m", FIXTURE_MODEL, "--chat-template-kwargs", bad], capture_output=True,
                       text=True, timeout=60)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "--chat-template-kwargs" in lines[0], r.stderr


def test_deterministic_batched_equals_solo():
    """--deterministic (batch-invariant kernels): the same greedy request gives the same text
    alone and among others decoded at once (scripts/concurrency.py does this at 64 requests
    on the GPU backends)."""
    from concurrent.futures import ThreadPoolExecutor
    prompts = [f"Item {i}: the {w} of the" for i, w in enumerate(["river", "city", "song", "law", "sky", "road"])]
    srv = Server(["--deterministic", "-np", "4", "--temp", "0", "-n", "8"])
    try:
        def one(p):
            r = requests.post(srv.url + "/completion", json={"prompt": p, "cache_prompt": False}, timeout=120)
            assert r.status_code == 200, r.text
            return r.json()["content"]
        solo = [one(p) for p in prompts]
        with ThreadPoolExecutor(len(prompts)) as ex:
            together = list(ex.map(one, prompts))
        assert together == solo
        assert len(set(solo)) > 1  # the prompts lead to different texts
    finally:
        srv.stop()


def test_llama_server_switches_accepted():
    """llama-server switches that change nothing here (no web UI, no downloads, no host
    cache of idle slots) and the newer names of the draft limits start the server."""
    srv = Server(["--offline", "--no-ui", "--no-cache-idle-slots", "--spec-draft-n-max", "4", "--spec-draft-n-min", "1",
                  "-n", "2"])
    try:
        assert requests.get(srv.url + "/health", timeout=10).status_code == 200
    finally:
        srv.stop()


def test_cache_types():
    """-ctk / -ctv take llama-server's cache types, each its own; /props names them, and an
    unknown one stops the start with one line naming it."""
    srv = Server(["-ctk", "q4_0", "-ctv", "IQ4_NL", "--temp", "0", "-n", "4"])
    try:
        p = requests.get(srv.url + "/props", timeout=10).json()
        assert p["cache_type_k"] == "q4_0" and p["cache_type_v"] == "iq4_nl"
        assert completion(srv)["tokens_predicted"] == 4
    finally:
        srv.stop()
    import subprocess
    from serverutil import BIN, default_model
    for flag in ("-ctk", "--cache-type-v", "-ctkd"):
        r = subprocess.run([BIN, "serve", "-m", default_model(), flag, "q3_0"], capture_output=True, text=True, timeout=60)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode != 0 and len(lines) == 1 and "q3_0" in lines[0] and flag in lines[0], r.stderr
