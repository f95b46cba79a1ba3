"""`1bit convert` and the RoPE scaling forms of Hugging Face configs (`rope_scaling` of
transformers < 5, `rope_parameters` of transformers 5; the kind as `type` or `rope_type`),
written as llama.cpp's converter writes them:
  none / default  -> no rope.scaling.* key, no rope_freqs tensor;
  linear          -> <arch>.rope.scaling.type "linear" + factor;
  yarn            -> type "yarn", factor, original_context_length, and yarn_ext_factor /
                     yarn_attn_factor / yarn_beta_fast / yarn_beta_slow when the config has them;
  llama3 (Llama)  -> no scaling key, a rope_freqs.weight F32 [head_dim/2] tensor of per-pair
                     frequency divisors, checked here against numpy following the published
                     Llama 3.1 formula (apply_scaling of meta-llama's reference code);
  anything else   -> refused with one line naming the type, no file written.
Fixtures: the tiny LlamaForCausalLM / Qwen3ForCausalLM folders of tests/fixtures/embed."""
import json
import math
import os
import shutil
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures", "embed")
BIN = os.environ.get("ONEBIT_BIN", os.path.join(ROOT, "build", "1bit"))

gguf = pytest.importorskip("gguf")

if not os.path.exists(BIN):
    pytest.skip("1bit not built", allow_module_level=True)

HEAD_DIM = 32  # both fixtures


def folder(tmp_path, fixture, edit):
    """A copy of a fixture folder whose config.json went through edit(cfg)."""
    d = tmp_path / fixture
    shutil.copytree(os.path.join(FIX, fixture), d)
    cfg = json.loads((d / "config.json").read_text())
    edit(cfg)
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    return d


def convert(d, out):
    return subprocess.run([BIN, "convert", str(d), "-o", str(out), "--type", "F32"],
                          capture_output=True, text=True, timeout=300)


def converted(tmp_path, fixture, edit):
    out = tmp_path / "out.gguf"
    r = convert(folder(tmp_path, fixture, edit), out)
    assert r.returncode == 0, r.stderr
    return gguf.GGUFReader(str(out))


def kv(rd, key):
    """A scalar or string field's value, None when absent."""
    f = rd.get_field(key)
    if f is None:
        return None
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode()
    return f.parts[f.data[0]][0]


def ktype(rd, key):
    return rd.get_field(key).types[0]


def scaling_keys(rd, arch):
    return sorted(k for k in rd.fields if k.startswith(f"{arch}.rope.scaling."))


def tensor(rd, name):
    return next((t for t in rd.tensors if t.name == name), None)


def set_rope(spelling, params, theta=None, keep_theta=True):
    """An edit putting params under `spelling`, the other spelling removed. With
    `rope_parameters` (transformers 5) rope_theta lives inside the dict."""
    def edit(cfg):
        old = cfg.pop("rope_parameters", None) or {}
        cfg.pop("rope_scaling", None)
        th = theta if theta is not None else old.get("rope_theta", cfg.get("rope_theta"))
        p = dict(params) if params is not None else None
        if spelling == "rope_parameters" and p is not None and keep_theta:
            p.setdefault("rope_theta", th)
            cfg.pop("rope_theta", None)
        else:
            cfg["rope_theta"] = th
        cfg[spelling] = p
    return edit


SPELLINGS = [("rope_scaling", "type"), ("rope_scaling", "rope_type"), ("rope_parameters", "rope_type"),
             ("rope_parameters", "type")]


# ---- none / default -----------------------------------------------------------------------

@pytest.mark.parametrize("spelling,params", [
    ("rope_scaling", None), ("rope_parameters", {"rope_type": "default"}), ("rope_scaling", {"type": "default"}),
    ("rope_scaling", {"rope_type": "default", "factor": 4.0}), ("rope_parameters", None)])
def test_no_scaling(tmp_path, spelling, params):
    rd = converted(tmp_path, "llama-hf", set_rope(spelling, params, theta=500000.0))
    assert scaling_keys(rd, "llama") == []
    assert tensor(rd, "rope_freqs.weight") is None
    assert kv(rd, "llama.rope.freq_base") == np.float32(500000.0)


def test_rope_theta_from_rope_parameters(tmp_path):
    """transformers 5 keeps rope_theta inside rope_parameters; it wins over a top-level one."""
    def edit(cfg):
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 123456.0}
        cfg["rope_theta"] = 10000.0
    rd = converted(tmp_path, "llama-hf", edit)
    assert kv(rd, "llama.rope.freq_base") == np.float32(123456.0)


# ---- linear ---------------------------------------------------------------------------------

@pytest.mark.parametrize("spelling,tkey", SPELLINGS)
def test_linear(tmp_path, spelling, tkey):
    rd = converted(tmp_path, "llama-hf", set_rope(spelling, {tkey: "linear", "factor": 2.5}))
    assert scaling_keys(rd, "llama") == ["llama.rope.scaling.factor", "llama.rope.scaling.type"]
    assert kv(rd, "llama.rope.scaling.type") == "linear"
    assert ktype(rd, "llama.rope.scaling.factor") == gguf.GGUFValueType.FLOAT32
    assert kv(rd, "llama.rope.scaling.factor") == np.float32(2.5)
    assert tensor(rd, "rope_freqs.weight") is None


def test_rope_type_wins_over_type(tmp_path):
    rd = converted(tmp_path, "llama-hf", set_rope("rope_scaling", {"type": "dynamic", "rope_type": "linear", "factor": 4}))
    assert kv(rd, "llama.rope.scaling.type") == "linear"
    assert kv(rd, "llama.rope.scaling.factor") == np.float32(4.0)


def test_rope_parameters_win_over_rope_scaling(tmp_path):
    def edit(cfg):
        cfg["rope_parameters"] = {"rope_type": "linear", "factor": 3.0, "rope_theta": 500000.0}
        cfg["rope_scaling"] = {"rope_type": "dynamic", "factor": 7.0}
    rd = converted(tmp_path, "llama-hf", edit)
    assert kv(rd, "llama.rope.scaling.type") == "linear"
    assert kv(rd, "llama.rope.scaling.factor") == np.float32(3.0)


def test_full_attention_sub_dict(tmp_path):
    """Per-layer-type configs (transformers 5) keep the full-attention layers' parameters
    under `full_attention`; llama.cpp's converter reads that one."""
    def edit(cfg):
        cfg.pop("rope_theta", None)
        cfg["rope_parameters"] = {"full_attention": {"rope_type": "linear", "factor": 6.0, "rope_theta": 200000.0},
                                  "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    rd = converted(tmp_path, "llama-hf", edit)
    assert kv(rd, "llama.rope.scaling.type") == "linear"
    assert kv(rd, "llama.rope.scaling.factor") == np.float32(6.0)
    assert kv(rd, "llama.rope.freq_base") == np.float32(200000.0)


# ---- yarn -----------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture,arch", [("qwen3-hf", "qwen3"), ("llama-hf", "llama")])
@pytest.mark.parametrize("spelling,tkey", SPELLINGS)
def test_yarn(tmp_path, fixture, arch, spelling, tkey):
    """The form Qwen documents for long context: factor + original_max_position_embeddings."""
    rd = converted(tmp_path, fixture, set_rope(spelling, {tkey: "yarn", "factor": 4.0,
                                                          "original_max_position_embeddings": 32768}))
    assert scaling_keys(rd, arch) == [f"{arch}.rope.scaling.{k}" for k in ("factor", "original_context_length", "type")]
    assert kv(rd, f"{arch}.rope.scaling.type") == "yarn"
    assert kv(rd, f"{arch}.rope.scaling.factor") == np.float32(4.0)
    assert ktype(rd, f"{arch}.rope.scaling.original_context_length") == gguf.GGUFValueType.UINT32
    assert kv(rd, f"{arch}.rope.scaling.original_context_length") == 32768
    assert tensor(rd, "rope_freqs.weight") is None


@pytest.mark.parametrize("attn_key", ["attention_factor", "attn_factor"])
def test_yarn_optional_keys(tmp_path, attn_key):
    rd = converted(tmp_path, "qwen3-hf", set_rope("rope_parameters", {
        "rope_type": "yarn", "factor": 8, "original_max_position_embeddings": 4096, "extrapolation_factor": 0.5,
        attn_key: 1.25, "beta_fast": 16.0, "beta_slow": 2.0}))
    want = {"type": "yarn", "factor": 8.0, "original_context_length": 4096, "yarn_ext_factor": 0.5,
            "yarn_attn_factor": 1.25, "yarn_beta_fast": 16.0, "yarn_beta_slow": 2.0}
    assert scaling_keys(rd, "qwen3") == sorted(f"qwen3.rope.scaling.{k}" for k in want)
    for k, v in want.items():
        got = kv(rd, f"qwen3.rope.scaling.{k}")
        assert got == (v if isinstance(v, str) else np.float32(v) if k != "original_context_length" else v), k
        if k.startswith("yarn_") or k == "factor":
            assert ktype(rd, f"qwen3.rope.scaling.{k}") == gguf.GGUFValueType.FLOAT32


def test_yarn_original_context_from_top_level(tmp_path):
    """llama.cpp's converter takes a top-level original_max_position_embeddings when the
    rope dict has none."""
    def edit(cfg):
        set_rope("rope_scaling", {"rope_type": "yarn", "factor": 2.0})(cfg)
        cfg["original_max_position_embeddings"] = 8192
    rd = converted(tmp_path, "qwen3-hf", edit)
    assert kv(rd, "qwen3.rope.scaling.original_context_length") == 8192


# ---- llama3 ---------------------------------------------------------------------------------

def llama31_factors(base, dim, factor, low_freq_factor, high_freq_factor, old_context_len):
    """The published Llama 3.1 frequency scaling (meta-llama apply_scaling), in float32 with
    numpy: new_freq per pair; the GGUF tensor holds freq / new_freq. The base frequencies are
    rounded to float32 from float64 (numpy's own float32 power is not correctly rounded on
    every CPU)."""
    f32 = np.float32
    expo = np.arange(0, dim, 2, dtype=f32) / f32(dim)
    freqs = (f32(1.0) / (np.float64(base) ** expo.astype(np.float64)).astype(f32)).astype(f32)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    out = []
    for freq in freqs:
        wavelen = f32(2 * math.pi) / freq
        if wavelen < high_freq_wavelen:
            new = freq
        elif wavelen > low_freq_wavelen:
            new = freq / f32(factor)
        else:
            smooth = (f32(old_context_len) / wavelen - f32(low_freq_factor)) / f32(high_freq_factor - low_freq_factor)
            new = (f32(1) - smooth) * freq / f32(factor) + smooth * freq
        out.append(freq / f32(new))
    return np.array(out, dtype=f32)


LLAMA31 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
LLAMA32 = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
# many pairs in the smooth band (wavelength between 512 and 8192) with head_dim 32
WIDE = {"factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 16.0, "original_max_position_embeddings": 8192}


@pytest.mark.parametrize("spelling,tkey", SPELLINGS)
@pytest.mark.parametrize("params,theta", [(LLAMA31, 500000.0), (LLAMA32, 500000.0), (WIDE, 10000.0)],
                         ids=["llama3.1-factor8", "llama3.2-factor32", "wide-band"])
def test_llama3(tmp_path, spelling, tkey, params, theta):
    rd = converted(tmp_path, "llama-hf", set_rope(spelling, {tkey: "llama3", **params}, theta=theta))
    assert scaling_keys(rd, "llama") == []  # llama.cpp writes no scaling key for llama3
    assert kv(rd, "llama.rope.freq_base") == np.float32(theta)
    t = tensor(rd, "rope_freqs.weight")
    assert t is not None
    assert t.tensor_type == gguf.GGMLQuantizationType.F32
    assert list(t.shape) == [HEAD_DIM // 2]
    got = np.asarray(t.data, dtype=np.float32).reshape(-1)
    want = llama31_factors(theta, HEAD_DIM, params["factor"], params["low_freq_factor"], params["high_freq_factor"],
                           params["original_max_position_embeddings"])
    # short wavelengths untouched, long ones divided by the factor: exactly
    for g, w in zip(got, want):
        if w == 1.0 or w == np.float32(params["factor"]):
            assert g == w, (got, want)
    smooth = (want != 1.0) & (want != np.float32(params["factor"]))
    assert smooth.any()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)
    assert got[0] == 1.0 and got[-1] == np.float32(params["factor"])


def test_llama3_defaults(tmp_path):
    """Without the optional keys llama.cpp's converter uses factor 8, low 1, high 4, 8192."""
    rd = converted(tmp_path, "llama-hf", set_rope("rope_parameters", {"rope_type": "llama3"}, theta=500000.0))
    got = np.asarray(tensor(rd, "rope_freqs.weight").data, dtype=np.float32).reshape(-1)
    np.testing.assert_allclose(got, llama31_factors(500000.0, HEAD_DIM, 8.0, 1.0, 4.0, 8192), rtol=2e-6, atol=0)


def test_llama3_quantized_keeps_rope_freqs_f32(tmp_path):
    out = tmp_path / "o.gguf"
    d = folder(tmp_path, "llama-hf", set_rope("rope_scaling", {"rope_type": "llama3", **LLAMA31}, theta=500000.0))
    r = subprocess.run([BIN, "convert", str(d), "-o", str(out), "--type", "Q8_0"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert tensor(gguf.GGUFReader(str(out)), "rope_freqs.weight").tensor_type == gguf.GGMLQuantizationType.F32


# ---- refusals -------------------------------------------------------------------------------

def refuse(tmp_path, fixture, edit, needle):
    out = tmp_path / "out.gguf"
    r = convert(folder(tmp_path, fixture, edit), out)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert needle in lines[0], r.stderr
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith("out.gguf")]


@pytest.mark.parametrize("spelling,tkey", SPELLINGS)
@pytest.mark.parametrize("rtype", ["dynamic", "longrope", "su", "ntk-by-parts"])
def test_refused_types(tmp_path, spelling, tkey, rtype):
    params = {tkey: rtype, "factor": 4.0, "original_max_position_embeddings": 4096}
    if rtype in ("longrope", "su"):
        params.update(short_factor=[1.0] * (HEAD_DIM // 2), long_factor=[2.0] * (HEAD_DIM // 2))
    refuse(tmp_path, "llama-hf", set_rope(spelling, params), f"'{rtype}'")


def test_refused_on_qwen(tmp_path):
    refuse(tmp_path, "qwen3-hf", set_rope("rope_scaling", {"type": "dynamic", "factor": 2.0}), "'dynamic'")


def test_llama3_refused_on_qwen(tmp_path):
    """llama.cpp writes rope_freqs only for the llama family; Qwen has nowhere to put it."""
    refuse(tmp_path, "qwen3-hf", set_rope("rope_parameters", {"rope_type": "llama3", **LLAMA31}), "'llama3'")


@pytest.mark.parametrize("params,needle", [
    ({"rope_type": "linear"}, "'linear'"),
    ({"rope_type": "yarn", "factor": 4.0}, "original_max_position_embeddings"),
    ({"rope_type": "yarn", "factor": 0, "original_max_position_embeddings": 4096}, "'yarn'"),
    ({"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 4096, "beta_fast": "x"}, "beta_fast"),
])
def test_refused_malformed(tmp_path, params, needle):
    refuse(tmp_path, "llama-hf", set_rope("rope_scaling", params), needle)
