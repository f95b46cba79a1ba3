"""llama-server's RoPE flags on `1bit run` and `1bit serve`: each is taken, changes what the
model computes where it should, and a bad value is refused with one line. A context past
the trained one warns once."""
import os
import re
import subprocess

BIN = os.environ.get("ONEBIT_BIN", "build/1bit")
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
QWEN3 = os.path.join(ROOT, "tests", "fixtures", "models", "qwen3.gguf")  # trained context 256


def run(*args, timeout=120):
    r = subprocess.run([BIN, "run", "-m", QWEN3, "--device", "cpu", "-t", "2", "--temp", "0", *args],
                       capture_output=True, timeout=timeout)
    r.stderr = r.stderr.decode("utf-8", "replace")
    return r


def ppl(tmp_path, *args):
    """Perplexity of a 512-token window: a number that moves with any change of the angles."""
    f = tmp_path / "t.txt"
    f.write_text("the quick brown fox jumps over the lazy dog " * 30)
    r = subprocess.run([BIN, "perplexity", "-m", QWEN3, "--device", "cpu", "-t", "2", "-f", str(f), "-c", "512",
                        "--chunks", "1", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    m = re.search(r"PPL = ([0-9.]+)", r.stdout + r.stderr)
    assert m, r.stdout
    return float(m.group(1))


def test_flags_change_the_answer_where_they_should(tmp_path):
    base = ppl(tmp_path)
    # a base or a scale change moves every angle; so does YaRN
    assert ppl(tmp_path, "--rope-freq-base", "10000") != base
    scaled = ppl(tmp_path, "--rope-scale", "4")
    assert scaled != base and ppl(tmp_path, "--rope-freq-scale", "0.25") == scaled
    y = ["--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "128"]
    yarn = ppl(tmp_path, *y)
    assert yarn not in (base, scaled)
    # YaRN's knobs are read: another attention factor, beta or original context changes it
    assert ppl(tmp_path, *y, "--yarn-attn-factor", "1.0") != yarn
    assert ppl(tmp_path, *y, "--yarn-beta-fast", "4", "--yarn-beta-slow", "0.5") != yarn
    assert ppl(tmp_path, *y[:-1], "64") != yarn
    # none ignores the scale; YaRN without extrapolation and with attention factor 1 is
    # linear interpolation
    assert ppl(tmp_path, "--rope-scaling", "none", "--rope-scale", "4") == base
    assert ppl(tmp_path, *y, "--yarn-ext-factor", "0", "--yarn-attn-factor", "1") == scaled


def test_bad_values_are_refused_in_one_line():
    for args in (["--rope-scaling", "dynamic"], ["--rope-scale", "0"], ["--rope-freq-base", "-1"],
                 ["--yarn-ext-factor", "nan"], ["--yarn-orig-ctx", "x"], ["--yarn-beta-fast"]):
        r = run("-p", "hi", "-n", "1", *args)
        assert r.returncode != 0, args
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and args[0] in lines[0], (args, r.stderr)


def test_context_past_training_warns_once():
    r = run("-p", "hi", "-n", "1", "-c", "1024")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("past the 256") == 1, r.stderr
    r = run("-p", "hi", "-n", "1", "-c", "256")
    assert "past the" not in r.stderr
    # a run-time scaling stretches the limit: 4 x 256
    r = run("-p", "hi", "-n", "1", "-c", "1024", "--rope-scaling", "yarn", "--rope-scale", "4")
    assert r.returncode == 0 and "past the" not in r.stderr, r.stderr


def test_serve_takes_the_flags():
    r = subprocess.run([BIN, "serve", "-m", QWEN3, "--rope-scaling", "bogus"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "--rope-scaling" in r.stderr
    r = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert "--yarn-orig-ctx" in r.stdout and "--rope-freq-base" in r.stdout
