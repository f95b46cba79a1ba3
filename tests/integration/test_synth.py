"""`1bit synth` writes the ANCHORS.md shapes at the table's file sizes (within 1%), the
files load through our GGUF path, and `1bit bench` measures them."""
import os
import re
import subprocess

import gguf
import pytest

BIN = os.environ.get("ONEBIT_BIN", "build/1bit")
SHARED = os.environ.get("ONEBIT_SHARED", os.path.join(os.path.dirname(__file__), "../../../shared"))
TOK = os.path.join(SHARED, "data/tokenizers/qwen3/tokenizer.json")

# (shape, type, file size in MB from ../shared/bench/ANCHORS.md)
ANCHORS = [
    ("qwen3-0.6b", "Q4_K_M", 397), ("qwen3-0.6b", "Q8_0", 639), ("qwen3-0.6b", "TQ2_0", 247),
    ("qwen3-8b", "Q4_K_M", 5030), ("qwen3-8b", "Q8_0", 8710), ("qwen3-8b", "Q1_0", 1580),
    ("qwen3-8b", "TQ2_0", 2660),
]

pytestmark = pytest.mark.skipif(not os.path.exists(TOK), reason="shared Qwen3 tokenizer not found")


def synth(*args):
    return subprocess.run([BIN, "synth", "--tokenizer", TOK, *args], capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def small_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("synth") / "q06-tq2.gguf")
    r = synth("--shape", "qwen3-0.6b", "--type", "TQ2_0", "-o", path)
    assert r.returncode == 0, r.stderr
    return path


def tensor_bytes(shape, typ):
    r = synth("--shape", shape, "--type", typ, "--dry-run")
    assert r.returncode == 0, r.stderr
    return int(re.search(r"tensor bytes (\d+)", r.stdout).group(1))


def test_written_file_is_valid_gguf(small_file):
    rd = gguf.GGUFReader(small_file)
    assert rd.fields["general.architecture"].contents() == "qwen3"
    names = {t.name for t in rd.tensors}
    assert "token_embd.weight" in names and "blk.27.ffn_down.weight" in names and "output.weight" not in names
    types = {t.name: t.tensor_type.name for t in rd.tensors}
    assert types["blk.0.attn_q.weight"] == "TQ2_0"
    assert types["token_embd.weight"] == "Q6_K"  # tied output keeps precision
    assert len(rd.fields["tokenizer.ggml.tokens"].data) == 151936


@pytest.mark.parametrize("shape,typ,mb", ANCHORS)
def test_sizes_match_anchor_table(small_file, shape, typ, mb):
    # header (metadata + vocabulary) is the same for every file: measure it once
    header = os.path.getsize(small_file) - tensor_bytes("qwen3-0.6b", "TQ2_0")
    assert 1e6 < header < 2e7
    size = tensor_bytes(shape, typ) + header
    assert abs(size / 1e6 - mb) / mb < 0.01, f"{shape} {typ}: {size / 1e6:.1f} MB vs {mb} MB"


def test_bench_and_run_on_synth(small_file):
    r = subprocess.run([BIN, "bench", "-m", small_file, "-p", "16", "-n", "4", "-r", "1", "-t", "2"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    rows = [l for l in r.stdout.splitlines() if l.startswith("| q06")]
    assert len(rows) == 2 and "pp16" in rows[0] and "tg4" in rows[1]
    tps = float(rows[1].split("|")[7].split("±")[0])
    assert tps > 0
