"""Reference (de)quantization of libonebit against the `gguf` Python package.

* dequantize: bit-exact against gguf.quants.dequantize for every type gguf covers, on
  random blocks (random bytes; f16 scale fields forced finite).
* quantize: byte-exact against gguf.quants.quantize where gguf has a quantizer.
* the rest (K-quants, IQ4_*, Q8_1, Q8_K, Q1_0, IQ types with a quantizer): round trip on
  Gaussian data with outliers, relative RMSE under a per-type bound, decoded with gguf
  wherever gguf can decode (so a packing bug that our own dequantizer mirrors still fails).
"""
import ctypes
import os
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T  # noqa: E402
import gguf.quants as gq  # noqa: E402

LIB_PATH = Path(os.environ.get("ONEBIT_BUILD", "build")) / "libonebit.so"


@pytest.fixture(scope="module")
def lib():
    if not LIB_PATH.exists():
        pytest.skip(f"{LIB_PATH} not built")
    L = ctypes.CDLL(str(LIB_PATH))
    L.ob_dequantize.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.ob_dequantize.restype = ctypes.c_int
    L.ob_quantize.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.ob_quantize.restype = ctypes.c_size_t
    L.ob_type_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    L.ob_type_row_size.restype = ctypes.c_size_t
    L.ob_type_block_size.argtypes = [ctypes.c_int]
    L.ob_type_block_size.restype = ctypes.c_int64
    L.ob_type_name.argtypes = [ctypes.c_int]
    L.ob_type_name.restype = ctypes.c_char_p
    L.ob_type_from_name.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
    L.ob_type_from_name.restype = ctypes.c_bool
    L.ob_status_str.argtypes = [ctypes.c_int]
    L.ob_status_str.restype = ctypes.c_char_p
    return L


def ob_dequant(L, t, data: np.ndarray, n: int) -> np.ndarray:
    data = np.ascontiguousarray(data, dtype=np.uint8)
    out = np.empty(n, dtype=np.float32)
    st = L.ob_dequantize(int(t), data.ctypes.data, out.ctypes.data, n)
    assert st == 0, f"ob_dequantize({t.name}) returned status {st}"
    return out


def ob_quant(L, t, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    bs = GGML_QUANT_SIZES[t][0]
    out = np.zeros(x.size // bs * type_size(t), dtype=np.uint8)
    wrote = L.ob_quantize(int(t), x.ctypes.data, out.ctypes.data, x.size)
    assert wrote == out.size, f"ob_quantize({t.name}) wrote {wrote}, expected {out.size}"
    return out


# The types of our enum (all ids below 42 that gguf knows, NVFP4 excepted: not ours).
OUR_TYPES = [t for t in T if t.value < 42 and t != getattr(T, "NVFP4", None)]

# Byte offsets of the f16 fields (scales, mins) inside one block.
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0],
    T.IQ1_S: [0], T.IQ4_NL: [0], T.IQ4_XS: [0], T.TQ1_0: [52], T.TQ2_0: [64],
}

# Types whose dequantize gguf implements (F32 / F16 by view, the rest by class).
GGUF_DEQUANT = [T.F32, T.F16] + [t for t in gq._type_traits if t in OUR_TYPES]
GGUF_QUANT = [T.F16] + [t for t, c in gq._type_traits.items()
                        if t in OUR_TYPES and "quantize_blocks" in c.__dict__]


def random_blocks(t, n_blocks: int, rng) -> np.ndarray:
    bs, ts = GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    if t == T.F16:
        h = raw.reshape(-1).view(np.uint16)
        h[(h & 0x7C00) == 0x7C00] &= np.uint16(0xBFFF)  # no inf/NaN: exponent 31 -> 15
    elif t == T.F32:
        f = raw.reshape(-1).view(np.uint32)
        f[(f & 0x7F800000) == 0x7F800000] &= np.uint32(0xBFFFFFFF)
    for off in F16_FIELDS.get(t, []):
        h = raw[:, off:off + 2].copy().view(np.uint16).reshape(-1)
        h[(h & 0x7C00) == 0x7C00] &= np.uint16(0xBFFF)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(n_blocks, 2)
    if t == T.IQ1_M:
        # the f16 super-scale is spread over the top nibbles of the 4 uint16 scales;
        # its exponent's top bit is bit 14 of the last one (byte 55, bit 6)
        raw[:, 55] &= np.uint8(0xBF)
    return raw


@pytest.mark.parametrize("t", GGUF_DEQUANT, ids=lambda t: t.name)
def test_dequantize_bit_exact(lib, t):
    rng = np.random.default_rng(1000 + t.value)
    bs, ts = GGML_QUANT_SIZES[t]
    n_blocks = 4096 // bs if bs == 1 else 48
    raw = random_blocks(t, n_blocks, rng)
    n = n_blocks * bs
    ref = np.asarray(gq.dequantize(raw.reshape(-1), t), dtype=np.float32).reshape(-1)
    ours = ob_dequant(lib, t, raw.reshape(-1), n)
    assert ref.shape == ours.shape
    bad = np.nonzero(ref.view(np.uint32) != ours.view(np.uint32))[0]
    assert bad.size == 0, (f"{t.name}: {bad.size} of {n} differ; first at {bad[0]} "
                           f"(block {bad[0] // bs}): ours {ours[bad[0]]!r} ref {ref[bad[0]]!r}")


def test_inputs(n: int, seed: int) -> np.ndarray:
    """Gaussian rows at several scales, with outliers, a constant-sign block and one zero block."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    x = x.reshape(8, -1)
    x *= np.array([1e-3, 0.02, 0.5, 1.0, 3.0, 40.0, 1e3, 1.0], dtype=np.float32)[:, None]
    x = x.reshape(-1)
    out_idx = rng.choice(n, size=n // 64, replace=False)
    x[out_idx] *= rng.uniform(5, 30, size=out_idx.size).astype(np.float32)
    x[:256] = np.abs(x[:256])          # all-positive region (affine types use min = 0 here)
    x[256:512] = -np.abs(x[256:512])   # all-negative region
    x[512:768] = 0.0                   # zero blocks: scale 0, codes must still be sane
    return x.astype(np.float32)


test_inputs.__test__ = False  # a helper, not a pytest case


@pytest.mark.parametrize("t", GGUF_QUANT, ids=lambda t: t.name)
def test_quantize_byte_exact(lib, t):
    x = test_inputs(256 * 64, 2000 + t.value)
    ref = np.asarray(gq.quantize(x, t)).reshape(-1).view(np.uint8)
    ours = ob_quant(lib, t, x)
    bs, ts = GGML_QUANT_SIZES[t]
    bad = np.nonzero(ref != ours)[0]
    assert bad.size == 0, (f"{t.name}: {bad.size} bytes differ; first at byte {bad[0]} "
                           f"(block {bad[0] // ts}, byte {bad[0] % ts}): ours {ours[bad[0]]} ref {ref[bad[0]]}")


def test_f16_bf16_quantize_edge_values(lib):
    # halfway cases, subnormals, overflow and signed zeros: rounding must be exact RNE
    vals = [0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e6, -1e6, 6.1e-5, 5.96e-8, 2.98e-8,
            2.99e-8, 1e-10, 1.0009765625, 1.00048828125, 1.000732421875, 3.0e38, -3.4e38,
            float(np.float32(1.00390625)), float(np.float32(1.005859375))]
    x = np.array(vals * 4, dtype=np.float32)
    x[len(vals):] *= np.float32(1.0 + 2.0**-12)
    for t, dt in ((T.F16, np.float16), (T.BF16, None)):
        ours = ob_quant(lib, t, x)
        with np.errstate(over="ignore"):
            ref = (x.astype(np.float16).view(np.uint8) if dt is not None
                   else np.asarray(gq.quantize(x, T.BF16)).view(np.uint8).reshape(-1))
        np.testing.assert_array_equal(ours, ref, err_msg=t.name)


def test_mxfp4_quantize_exponent_edges(lib):
    # the block exponent is floor(log2(amax)): amax at, just below and just above powers
    # of two over the whole float range is where a log2 that differs from numpy's shows
    rng = np.random.default_rng(39)
    amax = []
    for k in range(-120, 127):
        p = np.float32(2.0) ** np.float32(k)
        amax += [p, np.nextafter(p, np.float32(0)), np.nextafter(p, np.float32(np.inf)), p * np.float32(1.5)]
    amax = np.array(amax, dtype=np.float32)
    x = (rng.uniform(-1, 1, (amax.size, 32)).astype(np.float32) * amax[:, None]).astype(np.float32)
    x[:, 7] = amax
    x = x.reshape(-1)
    np.testing.assert_array_equal(ob_quant(lib, T.MXFP4, x), np.asarray(gq.quantize(x, T.MXFP4)).reshape(-1))


def rel_rmse(x, y):
    return float(np.sqrt(np.mean((x.astype(np.float64) - y) ** 2)) / np.sqrt(np.mean(x.astype(np.float64) ** 2)))


# Relative RMSE bounds (rms error / rms signal) on N(0,1) data, ~15-25% above what our
# quantizers measure (in comments). Sanity of the numbers: a uniform b-bit grid over a
# block's range R gives R / (2^b - 1) / sqrt(12); for 32 Gaussians R ~ 4.1 sigma, so 4 bits
# ~0.079, 5 bits ~0.038 (gguf's own Q4_1 / Q5_1 measure 0.079 / 0.038 here), and the
# least-squares scale searches do a little better. Q1_0 keeps only signs with the mean
# |x| as scale: sqrt(1 - 2/pi) = 0.603 exactly, for a Gaussian.
RT_BOUNDS = {
    T.Q8_1: 0.0070,    # 0.0054 (same codes as Q8_0)
    T.Q8_K: 0.0090,    # 0.0070 (float scale, but 256-wide range)
    T.Q6_K: 0.022,     # 0.0174
    T.Q5_K: 0.045,     # 0.0364
    T.Q4_K: 0.088,     # 0.0723
    T.Q3_K: 0.17,      # 0.144
    T.Q2_K: 0.32,      # 0.276
    T.IQ4_NL: 0.090,   # 0.0750
    T.IQ4_XS: 0.090,   # 0.0757
    T.Q1_0: 0.615,     # 0.6013 (theory 0.6028)
    # quantizers written in quant_iq.c; bounds from their measured values + ~20%
    T.IQ3_S: 0.16, T.IQ3_XXS: 0.22, T.IQ2_S: 0.29, T.IQ2_XS: 0.34, T.IQ2_XXS: 0.40,
    T.IQ1_M: 0.50, T.IQ1_S: 0.54,
}

# With 1.5% outliers (x5..x30) the block ranges stretch; our K / IQ4 quantizers must still
# beat the gguf-reference legacy quantizer of the same bit width on the same data.
BEATS_LEGACY = {T.Q4_K: T.Q4_1, T.Q5_K: T.Q5_1, T.Q6_K: T.Q5_1, T.IQ4_NL: T.Q4_0, T.IQ4_XS: T.Q4_0,
                T.Q8_K: T.Q5_1}


def type_size(t):
    # gguf-py still lists Q8_1 at 40 bytes (an old float d/s layout); ggml's block_q8_1
    # is {f16 d, f16 s, int8 qs[32]} = 36, as is ours. Q8_1 never appears in files.
    return 36 if t == T.Q8_1 else GGML_QUANT_SIZES[t][1]


def gaussian(n, seed, outliers=False):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    if outliers:
        idx = rng.choice(n, size=int(n * 0.015), replace=False)
        x[idx] *= rng.uniform(5, 30, size=idx.size).astype(np.float32)
    return x


def has_quantizer(lib, t, x):
    bs = GGML_QUANT_SIZES[t][0]
    one = np.zeros(type_size(t), dtype=np.uint8)
    return lib.ob_quantize(int(t), x.ctypes.data, one.ctypes.data, bs) != 0


def round_trip(lib, t, x):
    q = ob_quant(lib, t, x)
    ours = ob_dequant(lib, t, q, x.size)
    if t in gq._type_traits:
        # decode our bytes with gguf too: a packing bug mirrored in our dequantizer fails here
        ref = np.asarray(gq.dequantize(q, t), dtype=np.float32).reshape(-1)
        np.testing.assert_array_equal(ours.view(np.uint32), ref.view(np.uint32))
    return rel_rmse(x, ours)


@pytest.mark.parametrize("t", sorted(RT_BOUNDS, key=lambda t: t.value), ids=lambda t: t.name)
def test_round_trip_rmse(lib, t):
    x = gaussian(256 * 64, 3000 + t.value)
    if not has_quantizer(lib, t, x):
        pytest.skip(f"{t.name}: no quantizer")
    err = round_trip(lib, t, x)
    assert err < RT_BOUNDS[t], f"{t.name}: relative RMSE {err:.4f} >= {RT_BOUNDS[t]}"
    # the same data at typical weight scale (f16 super-scales are then subnormal for some
    # types) and at 1e3: no absolute epsilon may creep into the scale searches
    for scale in (0.02, 1e3):
        xs = (x * np.float32(scale)).astype(np.float32)
        err_s = round_trip(lib, t, xs)
        assert err_s < RT_BOUNDS[t], f"{t.name} at scale {scale}: relative RMSE {err_s:.4f}"
    # an all-zero block inside real data must decode to zeros, not NaN
    bs = GGML_QUANT_SIZES[t][0]
    xz = x[: 4 * max(bs, 256)].copy()
    xz[: max(bs, 256)] = 0.0
    yz = ob_dequant(lib, t, ob_quant(lib, t, xz), xz.size)
    assert np.all(yz[: max(bs, 256)] == 0.0), t.name
    assert np.all(np.isfinite(yz)), t.name


@pytest.mark.parametrize("t", sorted(BEATS_LEGACY, key=lambda t: t.value), ids=lambda t: t.name)
def test_round_trip_with_outliers_beats_legacy(lib, t):
    x = gaussian(256 * 64, 4000 + t.value, outliers=True)
    legacy = BEATS_LEGACY[t]
    y_leg = np.asarray(gq.dequantize(gq.quantize(x, legacy), legacy), dtype=np.float32).reshape(-1)
    err, err_leg = round_trip(lib, t, x), rel_rmse(x, y_leg)
    assert err < err_leg, f"{t.name} {err:.4f} vs gguf {legacy.name} {err_leg:.4f}"


def q1_0_reference(x: np.ndarray) -> np.ndarray:
    """ggml quantize_row_q1_0_ref: d = (in-order float32 sum of |x|) / 128, bit = x >= 0."""
    out = []
    for blk in x.reshape(-1, 128):
        s = np.float32(0)
        for v in np.abs(blk):
            s = np.float32(s + v)
        d = np.float32(s / np.float32(128)).astype(np.float16)
        bits = np.packbits(blk >= 0, bitorder="little")
        out.append(np.concatenate([np.frombuffer(d.tobytes(), dtype=np.uint8), bits]))
    return np.concatenate(out)


def test_q1_0_exact(lib):
    x = gaussian(128 * 16, 77, outliers=True)
    x[5] = 0.0
    x[6] = -0.0  # -0.0 >= 0 holds: both zeros take the + sign
    q = ob_quant(lib, T.Q1_0, x)
    np.testing.assert_array_equal(q, q1_0_reference(x))
    y = ob_dequant(lib, T.Q1_0, q, x.size)
    d = q.reshape(-1, 18)[:, :2].copy().view(np.float16).astype(np.float32).reshape(-1, 1)
    expect = np.where(x.reshape(-1, 128) >= 0, d, -d).reshape(-1)
    np.testing.assert_array_equal(y.view(np.uint32), expect.astype(np.float32).view(np.uint32))


def test_type_table(lib):
    for t in OUR_TYPES:
        bs, ts = GGML_QUANT_SIZES[t][0], type_size(t)
        name = lib.ob_type_name(int(t.value))
        assert name is not None and name.decode() == t.name, t.name
        assert lib.ob_type_block_size(int(t.value)) == bs, t.name
        assert lib.ob_type_row_size(int(t.value), bs * 7) == ts * 7, t.name
        if bs > 1:
            assert lib.ob_type_row_size(int(t.value), bs * 7 + 1) == 0, t.name
        out = ctypes.c_int(-1)
        for spelling in (t.name, t.name.lower(), t.name.capitalize()):
            assert lib.ob_type_from_name(spelling.encode(), ctypes.byref(out)), spelling
            assert out.value == t.value
    for unknown in (4, 5, 31, 40, 42, 1000, -1):
        assert lib.ob_type_name(unknown) is None
        assert lib.ob_type_block_size(unknown) == 0
    out = ctypes.c_int(-1)
    for bad in (b"", b"q4", b"q4_k_m", b"Q4_KX", b"f3"):
        assert not lib.ob_type_from_name(bad, ctypes.byref(out)), bad
    assert lib.ob_status_str(0) == b"ok"
    # bad counts are refused, not read past
    buf = np.zeros(64, dtype=np.uint8)
    dst = np.zeros(64, dtype=np.float32)
    assert lib.ob_dequantize(int(T.Q4_0), buf.ctypes.data, dst.ctypes.data, 33) != 0
    assert lib.ob_dequantize(1000, buf.ctypes.data, dst.ctypes.data, 32) != 0
    assert lib.ob_quantize(int(T.Q4_K), dst.ctypes.data, buf.ctypes.data, 32) == 0
