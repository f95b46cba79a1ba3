"""llama-server's other samplers over HTTP (issue #31): mirostat, typical_p, DRY and XTC are
read on /completion, /v1/completions and /v1/chat/completions, a bad value is a 400 naming
the field, generation_settings and /props show them, a seeded request repeats itself, DRY
turns greedy decoding off a repetition (and not across its breakers), and the same samplers
as `serve` and `run` flags."""
import subprocess

import pytest
import requests

from serverutil import BIN, Server, default_model

REPEAT = "1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3,"
CHAT = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def srv():
    s = Server(["-np", "1", "-c", "1024"])
    yield s
    assert s.stop()[0] == 0


def completion(srv, **body):
    r = requests.post(srv.url + "/completion", json={"prompt": "The sea is", "n_predict": 6, **body}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


CONFIGS = {
    "typical": {"typical_p": 0.5, "top_k": 0},
    "xtc": {"xtc_probability": 0.6, "xtc_threshold": 0.05},
    "dry": {"dry_multiplier": 1.5, "dry_allowed_length": 1, "dry_sequence_breakers": ["\n"]},
    "mirostat1": {"mirostat": 1, "mirostat_tau": 3.0, "mirostat_eta": 0.2},
    "mirostat2": {"mirostat": 2},
    "all": {"typical_p": 0.9, "xtc_probability": 0.5, "xtc_threshold": 0.1, "dry_multiplier": 0.8,
            "dry_base": 2.0, "dry_allowed_length": 3, "dry_penalty_last_n": 64},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_seeded_requests_repeat(srv, name):
    body = dict(CONFIGS[name], temperature=1.0, seed=1234)
    a, b = completion(srv, **body), completion(srv, **body)
    assert a["content"] == b["content"] and a["tokens_predicted"] == 6
    gs = a["generation_settings"]
    for k, v in CONFIGS[name].items():
        if k != "top_k":
            assert gs[k] == pytest.approx(v), k


def test_fields_on_the_openai_routes(srv):
    extra = {"mirostat": 2, "mirostat_tau": 4.0, "dry_multiplier": 0.5, "typical_p": 0.95, "xtc_probability": 0.3}
    body = {"model": "m", "messages": CHAT, "max_tokens": 5, "temperature": 0.9, "seed": 7, **extra}
    a = requests.post(srv.url + "/v1/chat/completions", json=body, timeout=300).json()
    b = requests.post(srv.url + "/v1/chat/completions", json=body, timeout=300).json()
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    body = {"model": "m", "prompt": "Once upon a time", "max_tokens": 5, "temperature": 0.9, "seed": 7, **extra}
    a = requests.post(srv.url + "/v1/completions", json=body, timeout=300).json()
    b = requests.post(srv.url + "/v1/completions", json=body, timeout=300).json()
    assert a["choices"][0]["text"] == b["choices"][0]["text"]


def test_generation_settings(srv):
    gs = completion(srv, n_predict=1)["generation_settings"]
    # llama-server's defaults; a -1 window reads as the slot's context
    assert gs["mirostat"] == 0 and gs["mirostat_tau"] == 5.0 and gs["mirostat_eta"] == pytest.approx(0.1)
    assert gs["typical_p"] == 1.0 and gs["xtc_probability"] == 0.0 and gs["xtc_threshold"] == pytest.approx(0.1)
    assert gs["dry_multiplier"] == 0.0 and gs["dry_base"] == 1.75 and gs["dry_allowed_length"] == 2
    assert gs["dry_penalty_last_n"] == 1024
    assert gs["dry_sequence_breakers"] == ["\n", ":", "\"", "*"]
    assert gs["samplers"] == ["penalties", "dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"]
    gs = completion(srv, n_predict=1, dry_base=0.5, dry_sequence_breakers=["ab", ""], repeat_last_n=-1)[
        "generation_settings"]
    assert gs["dry_base"] == 1.75  # below 1: llama-server's default instead
    assert gs["dry_sequence_breakers"] == ["ab"] and gs["repeat_last_n"] == 1024
    params = requests.get(srv.url + "/props", timeout=30).json()["default_generation_settings"]["params"]
    assert params["mirostat"] == 0 and params["dry_sequence_breakers"] == ["\n", ":", "\"", "*"]


BAD = [("mirostat", 3), ("mirostat", -1), ("mirostat", 1.5), ("mirostat_tau", -1), ("mirostat_eta", "fast"),
       ("typical_p", 1.5), ("typical_p", -0.1), ("dry_multiplier", -1), ("dry_base", "x"),
       ("dry_allowed_length", -2), ("dry_penalty_last_n", -2), ("dry_sequence_breakers", []),
       ("dry_sequence_breakers", "\n"), ("dry_sequence_breakers", [1]), ("dry_sequence_breakers", ["a"] * 33),
       ("xtc_probability", 1.5), ("xtc_threshold", -0.5), ("repeat_last_n", -3)]


@pytest.mark.parametrize("route", ["/completion", "/v1/completions", "/v1/chat/completions"])
def test_bad_values_are_400(srv, route):
    for key, val in BAD:
        body = {"model": "m", "max_tokens": 2, "n_predict": 2, key: val}
        body.update({"messages": CHAT} if "chat" in route else {"prompt": "hi"})
        r = requests.post(srv.url + route, json=body, timeout=60)
        assert r.status_code == 400, (key, val, r.text)
        assert key in r.json()["error"]["message"], (key, r.text)


def test_dry_breaks_a_repetition(srv):
    greedy = completion(srv, prompt=REPEAT, n_predict=8, temperature=0)["content"]
    assert greedy.startswith(" 1, 2, 3")  # the model goes on repeating
    dry = completion(srv, prompt=REPEAT, n_predict=8, temperature=0, dry_multiplier=2)["content"]
    assert not dry.startswith(" 1, 2, 3"), dry  # the repeat (prompt included) is penalised
    # a breaker the repeat would cross: "," and " " leave no repeat longer than a token
    kept = completion(srv, prompt=REPEAT, n_predict=8, temperature=0, dry_multiplier=2,
                      dry_sequence_breakers=[",", " "])["content"]
    assert kept == greedy
    # mirostat ignores DRY, as llama-server's chain does
    m = completion(srv, prompt=REPEAT, n_predict=8, temperature=0, mirostat=2, dry_multiplier=2)["content"]
    assert m == greedy


def test_serve_flags():
    s = Server(["-np", "1", "-c", "512", "--mirostat", "2", "--mirostat-ent", "4", "--mirostat-lr", "0.2",
                "--typical", "0.8", "--dry_multiplier", "0.5", "--dry-base", "2", "--dry-allowed-length", "3",
                "--dry-penalty-last-n", "64", "--dry-sequence-breaker", "x", "--dry-sequence-breaker", "yz",
                "--xtc-probability", "0.25", "--xtc-threshold", "0.2"])
    try:
        p = requests.get(s.url + "/props", timeout=30).json()["default_generation_settings"]["params"]
        want = {"mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2, "typical_p": 0.8, "dry_multiplier": 0.5,
                "dry_base": 2.0, "dry_allowed_length": 3, "dry_penalty_last_n": 64, "xtc_probability": 0.25,
                "xtc_threshold": 0.2}
        for k, v in want.items():
            assert p[k] == pytest.approx(v), k
        assert p["dry_sequence_breakers"] == ["x", "yz"]
        gs = completion(s, n_predict=2, seed=3)["generation_settings"]  # a request's defaults
        assert gs["mirostat"] == 2 and gs["dry_sequence_breakers"] == ["x", "yz"]
        assert completion(s, n_predict=2, mirostat=0)["generation_settings"]["mirostat"] == 0  # the request wins
    finally:
        assert s.stop()[0] == 0
    s = Server(["-np", "1", "-c", "512", "--dry-sequence-breaker", "none"])
    try:
        p = requests.get(s.url + "/props", timeout=30).json()["default_generation_settings"]["params"]
        assert p["dry_sequence_breakers"] == []
    finally:
        assert s.stop()[0] == 0
    for bad in (["--mirostat", "3"], ["--typical", "x"], ["--dry-penalty-last-n", "-2"]):
        r = subprocess.run([BIN, "serve", "-m", default_model(), *bad], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and bad[0] in r.stderr, (bad, r.stderr)


def test_run_flags():
    def run(*flags):
        r = subprocess.run([BIN, "run", "-m", default_model(), "-p", REPEAT, "-n", "6", *flags], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout
    greedy = run("--temp", "0")
    assert run("--temp", "0", "--dry-multiplier", "2") != greedy
    assert run("--temp", "0", "--dry-multiplier", "2", "--dry-sequence-breaker", ",",
               "--dry-sequence-breaker", " ") == greedy
    seeded = ("--temp", "1", "--seed", "5", "--mirostat", "1", "--typical", "0.9", "--xtc-probability", "0.5")
    assert run(*seeded) == run(*seeded)
