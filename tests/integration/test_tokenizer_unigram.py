"""SentencePiece Unigram tokenizers (XLM-RoBERTa / bge-reranker style) against HF tokenizers.

No XLM-R tokenizer.json is available offline, so the test trains one: a `tokenizers` Unigram
model on a seeded multilingual corpus, with an NFKC normalizer, the Metaspace pre-tokenizer
(prepend "always") and XLM-R's "<s> $A </s>" post-processor, then compares token ids from
libonebit (ctypes) with HF's on >= 500 seeded strings that hold characters the vocabulary
lacks (unknown runs), odd whitespace and special-token strings. Variants: a byte-fallback
Unigram (the trained pieces plus <0x00>..<0xFF>), an XLM-R-style normalizer Sequence
(NFKC as the stand-in for Precompiled, Strip right, " {2,}" -> "▁"), and the GGUF round
trip: `1bit convert` of a tiny XLMRobertaForSequenceClassification folder carrying the trained
tokenizer.json writes tokenizer.ggml.model "t5", whose tokenizer must encode identically.

Allowance, checked rather than assumed (as in test_tokenizer_conformance.py): HF's Unicode
tables may be newer or older than utf8proc's; a mismatching string passes only if it holds code
points assigned after Unicode 3.2 and the mismatch disappears when exactly those become "x".
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import unicodedata

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_corpus as tc  # noqa: E402

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures", "embed")
BIN = os.environ.get("ONEBIT_BIN", os.path.join(ROOT, "build", "1bit"))
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]

LATIN = ("the of and to in is was for on that with as by at from it an be this are or have not but cat dog "
         "house river model vector token search answer question capital city reranker passage query").split()
ACCENT = "café naïve résumé façade jalapeño Zürich São Ångström straße coöperate élève über déjà".split()
CJK_TRAIN = list("我们今天去公园散步東京は日本の首都ですひらがなとカタカナ한국어문장")
OTHER_TRAIN = ["Привет мир", "Γειά σου", "مرحبا", "नमस्ते"]
EMOJI_TRAIN = ["😀", "👍", "🔥", "✨"]
# Only in test strings: characters the trained vocabulary has never seen.
UNSEEN = ["𠀀", "𪚥", "ꙮ", "☃", "♞", "∮", "ᚠᛇᚻ", "ꦲ", "🦩", "🧬", "⍼", "Ꭷ", "ܐ", "ጀ"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\u00a0", "\u3000", "\u2009", "\r\n"]
NFKC_PROBES = ["ｆｕｌｌ", "ＡＢＣ１２３", "①②", "ﬁ", "½", "x²", "㍻", "ｶﾀｶﾅ", "Ⅻ", "e\u0301", "Å"]


def _word(r, train):
    k = r.random()
    if k < 0.55:
        w = r.choice(LATIN)
        return w.capitalize() if r.random() < 0.15 else w
    if k < 0.7:
        return r.choice(ACCENT)
    if k < 0.8:
        return "".join(r.choice(CJK_TRAIN) for _ in range(r.randint(1, 5)))
    if k < 0.87:
        return r.choice(OTHER_TRAIN)
    if k < 0.93:
        return str(r.randint(0, 10 ** r.randint(1, 6)))
    if k < 0.96:
        return r.choice(EMOJI_TRAIN)
    if train:
        return r.choice(LATIN)
    return r.choice(UNSEEN + NFKC_PROBES)


def train_corpus(seed=7, n=3000):
    r = random.Random(seed)
    return [" ".join(_word(r, True) for _ in range(r.randint(3, 25))) for _ in range(n)]


def make_texts(seed=11, n=700):
    """Seeded strings: words with odd whitespace between, unseen characters, NFKC probes and
    special-token strings, plus a block of edge cases."""
    r = random.Random(seed)
    out = ["", " ", "  ", "a", " a", "a ", "  hello  world  ", "\n", "\t\tx", "<s>", "</s>", "<unk>", "<pad>",
           "<s>hello</s>", "x<unk>y", "hello <s> world", "𠀀𪚥", "ꙮꙮ ꙮ", "ＡＢＣ１２３ ｆｕｌｌ", "x" * 500,
           " ".join(UNSEEN), "".join(NFKC_PROBES), "café\u00a0naïve", "e\u0301te\u0301"]
    while len(out) < n:
        parts = []
        for _ in range(r.randint(1, 20)):
            parts.append(_word(r, False))
            parts.append(" " if r.random() < 0.8 else r.choice(SPACES))
        if r.random() < 0.1:
            parts.insert(r.randrange(len(parts) + 1), r.choice(SPECIALS))
        s = "".join(parts)
        if r.random() < 0.3:
            s = s.strip()
        out.append(s)
    return out


TEXTS = make_texts()


pytestmark = pytest.mark.skipif(not tc.lib_available(), reason="libonebit.so not built (ONEBIT_BUILD)")


def _post(tok):
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The trained Unigram tokenizer.json (NFKC + Metaspace + XLM-R template)."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tr = trainers.UnigramTrainer(vocab_size=3000, special_tokens=SPECIALS, unk_token="<unk>", shrinking_factor=0.75,
                                 max_piece_length=12, n_sub_iterations=2)
    tok.train_from_iterator(train_corpus(), tr)
    tok.add_special_tokens(["<mask>"])
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    _post(tok)
    d = tmp_path_factory.mktemp("unigram")
    path = str(d / "tokenizer.json")
    tok.save(path)
    return path


def _variant(trained, tmp_path, byte_fallback=False, xlmr_norm=False, pruned=False):
    j = json.load(open(trained, encoding="utf-8"))
    if pruned:
        # Single-character pieces that also occur inside longer pieces lose their own piece
        # (renamed, so ids stay), so the unknown edge competes with multi-character pieces.
        pieces = [p for p, _ in j["model"]["vocab"]]
        multi = "".join(p for p in pieces if len(p) > 1)
        gone = [i for i, p in enumerate(pieces) if len(p) == 1 and p != "\u2581" and p in multi][::3]
        assert len(gone) >= 20
        for i in gone:
            j["model"]["vocab"][i][0] = f"<gone{i}>"
        # Scores of the pieces holding them spread around the unknown edge's (min - 10).
        lost = {pieces[i] for i in gone}
        lo, r = min(sc for _, sc in j["model"]["vocab"]), random.Random(3)
        for e in j["model"]["vocab"]:
            if len(e[0]) > 1 and not e[0].startswith("<gone") and lost & set(e[0]):
                e[1] = lo - r.uniform(0.0, 14.0)
    if byte_fallback:
        have = {p for p, _ in j["model"]["vocab"]}
        lo = min(s for _, s in j["model"]["vocab"])
        # Byte pieces go before <mask> (an added token that sits past model.vocab).
        j["model"]["vocab"] += [[f"<0x{b:02X}>", lo - 1.0] for b in range(256) if f"<0x{b:02X}>" not in have]
        n = len(j["model"]["vocab"])
        for a in j["added_tokens"]:
            if a["content"] == "<mask>":
                a["id"] = n
        j["model"]["byte_fallback"] = True
        j["decoder"] = None
    if xlmr_norm:
        j["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Strip", "strip_left": False, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]}
    path = str(tmp_path / "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    h = Tokenizer.from_file(path)
    _post(h)
    h.save(path)
    return path


def _ref(path):
    h = Tokenizer.from_file(path)
    h.no_padding()
    h.no_truncation()
    return h


def compare(ours, ref, texts=TEXTS):
    T, H = tc.Tok(ours), _ref(ref)
    hard, drift, n_unk = [], 0, 0
    unk = H.token_to_id("<unk>")
    for add_special in (True, False):
        ids, offs = T.encode_batch(texts, add_special=add_special)
        refs = H.encode_batch(texts, add_special_tokens=add_special)
        for i, s in enumerate(texts):
            a, b = list(ids[offs[i]:offs[i + 1]]), refs[i].ids
            n_unk += unk in b
            if a == b:
                continue
            d = tc.drift_free(s)
            if d != s and T.encode(d, add_special) == H.encode(d, add_special_tokens=add_special).ids:
                drift += 1
                continue
            hard.append((s, a, b, refs[i].tokens))
    assert not hard, f"{len(hard)} mismatches, first: {hard[0]!r}"
    assert drift <= len(texts) // 100, f"{drift} Unicode-version mismatches"
    return n_unk


def test_corpus_variety():
    assert len(TEXTS) >= 500
    joined = "".join(TEXTS)
    for probe in ("𠀀", "ＡＢＣ", "\u3000", "\t", "<s>", "😀", "é", "我"):
        assert probe in joined, probe
    assert make_texts() == TEXTS


def test_unigram_json(trained):
    j = json.load(open(trained, encoding="utf-8"))
    assert j["model"]["type"] == "Unigram" and 2000 <= len(j["model"]["vocab"]) <= 8000
    n_unk = compare(trained, trained)
    assert n_unk >= 50  # the corpus really exercises unknown characters


def test_unigram_extra_corpus(trained):
    """The shared conformance corpus: code, scripts, emoji, combining marks, specials."""
    compare(trained, trained, tc.corpus(n=1200))


def test_unigram_byte_fallback(trained, tmp_path):
    path = _variant(trained, tmp_path, byte_fallback=True)
    H = _ref(path)
    assert any(t.startswith("<0x") for t in H.encode("🦩 ꙮ").tokens)
    compare(path, path)


def test_unigram_unknown_vs_pieces(trained, tmp_path):
    """Characters with no piece of their own but inside longer pieces: the unknown score
    (min - 10) decides against the pieces, and fused unknown runs become one <unk>."""
    path = _variant(trained, tmp_path, pruned=True)
    assert compare(path, path) >= 200
    out, _ = _convert(path, tmp_path)
    compare(out, path)


def test_unigram_xlmr_normalizer(trained, tmp_path):
    path = _variant(trained, tmp_path, xlmr_norm=True)
    compare(path, path)


def test_unigram_decode(trained):
    """Pieces decode as SentencePiece does: "▁" is a space."""
    T, H = tc.Tok(trained), _ref(trained)
    for s in ("hello world", "café naïve 東京", "the  cat"):
        ids = H.encode(s, add_special_tokens=False).ids
        assert T.decode(ids).lstrip(" ") == H.decode(ids)


def _xlmr_folder(tok_json, d):
    """The tiny XLM-R cross-encoder of tests/fixtures/embed/xlmr-rerank with its embedding
    table regrown (seeded random rows) to the trained vocabulary, plus tokenizer.json."""
    np = pytest.importorskip("numpy")
    src = os.path.join(FIX, "xlmr-rerank")
    n_vocab = Tokenizer.from_file(tok_json).get_vocab_size(with_added_tokens=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["vocab_size"] = n_vocab
    raw = open(os.path.join(src, "model.safetensors"), "rb").read()
    hl = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + hl])
    body = raw[8 + hl:]
    rng = np.random.default_rng(5)
    out_hdr, blobs, off = {"__metadata__": hdr.get("__metadata__", {})}, [], 0
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        data, shape = body[a:b], t["shape"]
        if name.endswith("word_embeddings.weight"):
            shape = [n_vocab, shape[1]]
            data = (rng.standard_normal(shape) * 0.08).astype("<f4").tobytes()
        out_hdr[name] = {"dtype": t["dtype"], "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(out_hdr).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    shutil.copy(tok_json, os.path.join(d, "tokenizer.json"))
    return n_vocab


def _convert(trained_json, tmp_path):
    if not os.path.exists(BIN):
        pytest.skip("1bit binary not built")
    d = str(tmp_path / "xlmr")
    n_vocab = _xlmr_folder(trained_json, d)
    out = str(tmp_path / "xlmr.gguf")
    r = subprocess.run([BIN, "convert", d, "-o", out, "--type", "F32"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out, n_vocab


@pytest.mark.parametrize("variant", ["plain", "byte_fallback"])
def test_unigram_gguf_roundtrip(trained, tmp_path, variant):
    """`1bit convert` writes tokenizer.ggml.model "t5" as llama.cpp does for XLM-R; the GGUF's
    tokenizer encodes every test string like HF does from tokenizer.json."""
    gguf = pytest.importorskip("gguf")
    ref = trained if variant == "plain" else _variant(trained, tmp_path, byte_fallback=True)
    out, n_vocab = _convert(ref, tmp_path)
    rd = gguf.GGUFReader(out)
    f = rd.fields

    def val(k):
        return f[k].contents()
    H = _ref(ref)
    assert val("tokenizer.ggml.model") == "t5"
    toks, scores, types = val("tokenizer.ggml.tokens"), val("tokenizer.ggml.scores"), val("tokenizer.ggml.token_type")
    assert len(toks) == len(scores) == len(types) == n_vocab
    j = json.load(open(ref, encoding="utf-8"))
    for i in (4, 100, len(j["model"]["vocab"]) - 1):
        assert toks[i] == j["model"]["vocab"][i][0] and abs(scores[i] - j["model"]["vocab"][i][1]) < 1e-5
    assert types[H.token_to_id("<unk>")] == 2 and types[H.token_to_id("<s>")] == 3 and types[H.token_to_id("<mask>")] == 3
    assert (6 in types) == (variant == "byte_fallback")
    assert val("tokenizer.ggml.bos_token_id") == H.token_to_id("<s>")
    assert val("tokenizer.ggml.eos_token_id") == H.token_to_id("</s>")
    assert val("tokenizer.ggml.add_bos_token") and val("tokenizer.ggml.add_eos_token")
    assert val("tokenizer.ggml.add_space_prefix") and not val("tokenizer.ggml.remove_extra_whitespaces")
    compare(out, ref)


def test_unigram_gguf_cli(trained, tmp_path):
    """`1bit tokenize` on the converted model."""
    out, _ = _convert(trained, tmp_path)
    text = "Zürich 東京 🦩 <mask> the  cat"
    r = subprocess.run([BIN, "tokenize", "-m", out, "--ids", text], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == _ref(trained).encode(text).ids


# ---- a real precompiled charsmap (SentencePiece nmt_nfkc), XLM-R's tokenizer.json layout ----

def _pb_fields(buf):
    """(field, value) pairs of one protobuf message (wire types 0, 1, 2, 5)."""
    i = 0

    def varint():
        nonlocal i
        v = sh = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << sh
            sh += 7
            if b < 0x80:
                return v
    while i < len(buf):
        key = varint()
        f, wt = key >> 3, key & 7
        if wt == 0:
            yield f, varint()
        elif wt == 2:
            n = varint()
            yield f, buf[i:i + n]
            i += n
        elif wt in (1, 5):
            n = 8 if wt == 1 else 4
            yield f, buf[i:i + n]
            i += n
        else:
            raise ValueError(f"wire type {wt}")


@pytest.fixture(scope="module")
def spm_xlmr(tmp_path_factory):
    """A SentencePiece Unigram model (nmt_nfkc, so it carries a precompiled charsmap)
    rebuilt as XLMRobertaConverter lays it out: <s> <pad> </s> <unk>, the pieces, <mask>;
    Precompiled + Strip(right) + Replace(" {2,}" -> "▁"); Metaspace; "<s> $A </s>"."""
    spm = pytest.importorskip("sentencepiece")
    from tokenizers import AddedToken
    d = tmp_path_factory.mktemp("spm")
    with open(d / "train.txt", "w", encoding="utf-8") as f:
        f.write("\n".join(train_corpus()) + "\n")
    spm.SentencePieceTrainer.train(input=str(d / "train.txt"), model_prefix=str(d / "m"), vocab_size=2500,
                                   model_type="unigram", normalization_rule_name="nmt_nfkc",
                                   character_coverage=0.9995, num_threads=1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(d / "m.model"))
    norm_spec = [v for f, v in _pb_fields(open(d / "m.model", "rb").read()) if f == 3][0]
    charsmap = [v for f, v in _pb_fields(norm_spec) if f == 2][0]
    assert sp.id_to_piece(0) == "<unk>" and sp.id_to_piece(1) == "<s>" and sp.id_to_piece(2) == "</s>"
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab += [(sp.id_to_piece(i), sp.get_score(i)) for i in range(3, sp.get_piece_size())] + [("<mask>", 0.0)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(charsmap),
                                           normalizers.Strip(left=False, right=True),
                                           normalizers.Replace(tokenizers.Regex(" {2,}"), "\u2581")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", AddedToken("<mask>", lstrip=True, special=True)])
    _post(tok)
    path = str(d / "tokenizer.json")
    tok.save(path)
    return path, charsmap


def test_precompiled_stand_in(spm_xlmr):
    """Where the stand-in for the charsmap (nmt_nfkc rules + NFKC) and the real charsmap
    agree, ids are identical: on the whole test corpus, whitespace and control characters
    included (the nmt rules map them as the charsmap does)."""
    path, charsmap = spm_xlmr
    P = normalizers.Precompiled(charsmap)
    texts = TEXTS + tc.corpus(n=1200)
    differs = [s for s in texts if P.normalize_str(s) != unicodedata.normalize("NFKC", s)]
    assert len(differs) >= 100  # plain NFKC alone would not do: "\n", "\t", U+200B, U+2581 ...
    compare(path, path, texts)


def test_precompiled_gguf_roundtrip(spm_xlmr, tmp_path):
    """The XLM-R layout through `1bit convert`: the charsmap bytes and the whitespace flag
    land in the GGUF as llama.cpp writes them, and the GGUF tokenizes like HF."""
    gguf = pytest.importorskip("gguf")
    path, charsmap = spm_xlmr
    out, n_vocab = _convert(path, tmp_path)
    f = gguf.GGUFReader(out).fields
    assert f["tokenizer.ggml.model"].contents() == "t5"
    assert bytes(f["tokenizer.ggml.precompiled_charsmap"].contents()) == charsmap
    assert f["tokenizer.ggml.remove_extra_whitespaces"].contents() is True
    assert f["tokenizer.ggml.token_type"].contents()[3] == 2  # <unk>
    compare(out, path, TEXTS + tc.corpus(n=1200))
