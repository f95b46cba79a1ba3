"""Cross-checks our GGUF reader and writer (libonebit.so through ctypes) against the
reference `gguf` PyPI package, both ways:
  (a) gguf.GGUFWriter writes -> ob_gguf_open reads: same keys, types, values, tensors;
  (b) ob_gguf_writer writes  -> gguf.GGUFReader reads: the same.
Values are random (seeded); strings include non-ASCII and embedded NUL bytes."""
import ctypes as C
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
VT = gguf.GGUFValueType

# ---- ctypes view of src/format/gguf.h ----


class Str(C.Structure):
    _fields_ = [("p", C.c_void_p), ("len", C.c_uint64)]

    def bytes(self):
        return C.string_at(self.p, self.len) if self.len else b""


class Val(C.Union):
    _fields_ = [("u64", C.c_uint64), ("i64", C.c_int64), ("f64", C.c_double), ("b", C.c_bool), ("str", Str)]


class KV(C.Structure):
    _fields_ = [("key", Str), ("type", C.c_int), ("arr_type", C.c_int), ("n", C.c_uint64), ("v", Val),
                ("arr", C.c_void_p), ("arr_str", C.POINTER(Str))]


class Tensor(C.Structure):
    _fields_ = [("name", Str), ("type", C.c_int), ("n_dims", C.c_int), ("ne", C.c_int64 * 4),
                ("offset", C.c_uint64), ("size", C.c_size_t), ("data", C.c_void_p)]


NP = {VT.UINT8: np.uint8, VT.INT8: np.int8, VT.UINT16: np.uint16, VT.INT16: np.int16, VT.UINT32: np.uint32,
      VT.INT32: np.int32, VT.FLOAT32: np.float32, VT.BOOL: np.bool_, VT.UINT64: np.uint64, VT.INT64: np.int64,
      VT.FLOAT64: np.float64}


@pytest.fixture(scope="module")
def lib():
    build = os.environ.get("ONEBIT_BUILD", "")
    path = os.path.join(build, "libonebit.so")
    if not build or not os.path.exists(path):
        pytest.skip(f"libonebit.so not found (ONEBIT_BUILD={build!r})")
    L = C.CDLL(path)
    P, I64, U64 = C.c_void_p, C.c_int64, C.c_uint64
    L.ob_gguf_open.argtypes = [C.c_char_p, C.POINTER(P), C.c_char_p, C.c_size_t]
    L.ob_gguf_open.restype = C.c_int
    L.ob_gguf_close.argtypes = [P]
    L.ob_gguf_version.argtypes = [P]
    L.ob_gguf_version.restype = C.c_uint32
    L.ob_gguf_alignment.argtypes = [P]
    L.ob_gguf_alignment.restype = C.c_size_t
    for f in ("ob_gguf_n_kv", "ob_gguf_n_tensors"):
        getattr(L, f).argtypes = [P]
        getattr(L, f).restype = I64
    L.ob_gguf_kv_at.argtypes = [P, I64]
    L.ob_gguf_kv_at.restype = C.POINTER(KV)
    L.ob_gguf_tensor_at.argtypes = [P, I64]
    L.ob_gguf_tensor_at.restype = C.POINTER(Tensor)
    L.ob_gguf_writer_new.argtypes = [C.c_uint32, C.c_size_t]
    L.ob_gguf_writer_new.restype = P
    L.ob_gguf_writer_free.argtypes = [P]
    scalar_args = {"u8": C.c_uint8, "i8": C.c_int8, "u16": C.c_uint16, "i16": C.c_int16, "u32": C.c_uint32,
                   "i32": C.c_int32, "u64": C.c_uint64, "i64": C.c_int64, "f32": C.c_float, "f64": C.c_double,
                   "bool": C.c_bool}
    for name, t in scalar_args.items():
        getattr(L, "ob_gguf_set_" + name).argtypes = [P, C.c_char_p, t]
    L.ob_gguf_set_strn.argtypes = [P, C.c_char_p, C.c_char_p, U64]
    L.ob_gguf_set_arr.argtypes = [P, C.c_char_p, C.c_int, C.c_void_p, U64]
    L.ob_gguf_set_arr_str.argtypes = [P, C.c_char_p, C.POINTER(C.c_char_p), C.POINTER(U64), U64]
    L.ob_gguf_add_tensor.argtypes = [P, C.c_char_p, C.c_int, C.c_int, C.POINTER(I64), C.c_void_p, C.c_char_p,
                                     C.c_size_t]
    L.ob_gguf_add_tensor.restype = C.c_int
    L.ob_gguf_writer_write.argtypes = [P, C.c_char_p, C.c_char_p, C.c_size_t]
    L.ob_gguf_writer_write.restype = C.c_int
    return L


def random_metadata(seed):
    """(key, vtype, sub_type, value) for every scalar type, arrays of every type, strings."""
    rng = np.random.default_rng(seed)
    md = []
    info = {VT.UINT8: np.iinfo(np.uint8), VT.INT8: np.iinfo(np.int8), VT.UINT16: np.iinfo(np.uint16),
            VT.INT16: np.iinfo(np.int16), VT.UINT32: np.iinfo(np.uint32), VT.INT32: np.iinfo(np.int32),
            VT.UINT64: np.iinfo(np.uint64), VT.INT64: np.iinfo(np.int64)}
    for vt, ii in info.items():
        md.append((f"s.{vt.name.lower()}", vt, None, int(rng.integers(ii.min, ii.max, dtype=NP[vt], endpoint=True))))
        n = int(rng.integers(1, 50))
        md.append((f"a.{vt.name.lower()}", VT.ARRAY, vt,
                   [int(x) for x in rng.integers(ii.min, ii.max, size=n, dtype=NP[vt], endpoint=True)]))
    md.append(("s.float32", VT.FLOAT32, None, float(np.float32(rng.standard_normal()))))
    md.append(("s.float64", VT.FLOAT64, None, float(rng.standard_normal() * 1e200)))
    md.append(("s.bool_t", VT.BOOL, None, True))
    md.append(("s.bool_f", VT.BOOL, None, False))
    md.append(("s.string", VT.STRING, None, "h\u00e9llo \u2581w\u00f6rld \U0001F600"))
    md.append(("s.nul", VT.STRING, None, b"a\x00b"))
    md.append(("a.float32", VT.ARRAY, VT.FLOAT32, [float(np.float32(x)) for x in rng.standard_normal(33)]))
    md.append(("a.float64", VT.ARRAY, VT.FLOAT64, [float(x) for x in rng.standard_normal(9)]))
    md.append(("a.bool", VT.ARRAY, VT.BOOL, [bool(x) for x in rng.integers(0, 2, size=17)]))
    md.append(("a.string", VT.ARRAY, VT.STRING, ["<s>", "", "\u2581tok", "x\x00y", "last"]))
    return md


def random_tensors(seed):
    """(name, ggml type, ne (innermost first, in elements), raw array)."""
    rng = np.random.default_rng(seed + 100)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    f16 = rng.standard_normal(7).astype(np.float16)
    q8 = rng.integers(0, 256, size=(2, 3 * 34), dtype=np.uint8)  # 2 rows of 3 Q8_0 blocks (96 values)
    i32 = rng.integers(-1000, 1000, size=(2, 2, 3), dtype=np.int32)
    T = gguf.GGMLQuantizationType
    return [("tok_embd.weight", T.F32, [5, 3], f32), ("norm.weight", T.F16, [7], f16),
            ("blk.0.attn_q.weight", T.Q8_0, [96, 2], q8), ("ids", T.I32, [3, 2, 2], i32)]


def ours_open(lib, path):
    g = C.c_void_p()
    err = C.create_string_buffer(512)
    st = lib.ob_gguf_open(path.encode(), C.byref(g), err, len(err))
    assert st == 0, err.value.decode()
    return g


def ours_kvs(lib, g):
    out = {}
    for i in range(lib.ob_gguf_n_kv(g)):
        kv = lib.ob_gguf_kv_at(g, i).contents
        t = VT(kv.type)
        if t == VT.ARRAY:
            at = VT(kv.arr_type)
            if at == VT.STRING:
                val = [kv.arr_str[j].bytes() for j in range(kv.n)]
            else:
                raw = C.string_at(kv.arr, kv.n * np.dtype(NP[at]).itemsize) if kv.n else b""
                val = np.frombuffer(raw, dtype=NP[at]).tolist()
            out[kv.key.bytes().decode()] = (t, at, val)
        else:
            if t == VT.STRING:
                val = kv.v.str.bytes()
            elif t in (VT.FLOAT32, VT.FLOAT64):
                val = kv.v.f64
            elif t == VT.BOOL:
                val = kv.v.b
            elif t in (VT.INT8, VT.INT16, VT.INT32, VT.INT64):
                val = kv.v.i64
            else:
                val = kv.v.u64
            out[kv.key.bytes().decode()] = (t, None, val)
    return out


def ours_tensors(lib, g):
    out = []
    for i in range(lib.ob_gguf_n_tensors(g)):
        t = lib.ob_gguf_tensor_at(g, i).contents
        out.append((t.name.bytes().decode(), t.type, list(t.ne[:t.n_dims]), t.offset, C.string_at(t.data, t.size)))
    return out


def ref_kvs(r):
    out = {}
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue
        t = VT(f.types[0])
        if t == VT.ARRAY:
            at = VT(f.types[-1])
            if at == VT.STRING:
                val = [bytes(f.parts[i]) for i in f.data]
            else:
                val = [x for i in f.data for x in f.parts[i].tolist()]
            out[name] = (t, at, val)
        elif t == VT.STRING:
            out[name] = (t, None, bytes(f.parts[-1]))
        else:
            v = f.parts[-1].tolist()[0]
            out[name] = (t, None, bool(v) if t == VT.BOOL else v)
    return out


def expected_kvs(md):
    out = {}
    for key, vt, st, val in md:
        if vt == VT.STRING:
            val = val if isinstance(val, bytes) else val.encode()
        if vt == VT.ARRAY and st == VT.STRING:
            val = [s.encode() for s in val]
        out[key] = (vt, st, val)
    return out


@pytest.mark.parametrize("alignment", [32, 64])
def test_reference_writer_our_reader(lib, tmp_path, alignment):
    path = str(tmp_path / "ref.gguf")
    md = random_metadata(alignment)
    w = gguf.GGUFWriter(path, "testarch")
    if alignment != 32:
        w.add_custom_alignment(alignment)
    for key, vt, st, val in md:
        w.add_key_value(key, val, vt, sub_type=st)
    for name, ty, ne, data in random_tensors(alignment):
        w.add_tensor(name, data, raw_dtype=ty)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    r = gguf.GGUFReader(path)
    g = ours_open(lib, path)
    try:
        assert lib.ob_gguf_version(g) == 3
        assert lib.ob_gguf_alignment(g) == alignment
        ours = ours_kvs(lib, g)
        ref = ref_kvs(r)
        assert list(ours) == list(ref)  # same keys in the same order
        assert ours == ref
        exp = expected_kvs(md)
        for k, v in exp.items():
            assert ours[k] == v, k
        tens = ours_tensors(lib, g)
        assert [t[0] for t in tens] == [t.name for t in r.tensors]
        for (name, ty, ne, off, data), rt, (_, ety, ene, arr) in zip(tens, r.tensors, random_tensors(alignment)):
            assert ty == int(rt.tensor_type) == int(ety)
            assert ne == [int(x) for x in rt.shape] == ene
            assert off == rt.data_offset - r.data_offset
            assert off % alignment == 0
            assert data == rt.data.tobytes() == arr.tobytes()
    finally:
        lib.ob_gguf_close(g)


@pytest.mark.parametrize("version,alignment", [(3, 64), (2, 32)])
def test_our_writer_reference_reader(lib, tmp_path, version, alignment):
    path = str(tmp_path / "ours.gguf")
    md = random_metadata(7 + alignment)
    w = lib.ob_gguf_writer_new(version, alignment)
    assert w
    keep = []
    setter = {VT.UINT8: "u8", VT.INT8: "i8", VT.UINT16: "u16", VT.INT16: "i16", VT.UINT32: "u32",
              VT.INT32: "i32", VT.UINT64: "u64", VT.INT64: "i64", VT.FLOAT32: "f32", VT.FLOAT64: "f64",
              VT.BOOL: "bool"}
    try:
        for key, vt, st, val in md:
            k = key.encode()
            if vt == VT.STRING:
                b = val if isinstance(val, bytes) else val.encode()
                lib.ob_gguf_set_strn(w, k, b, len(b))
            elif vt == VT.ARRAY and st == VT.STRING:
                bs = [s.encode() for s in val]
                arr = (C.c_char_p * len(bs))(*bs)
                lens = (C.c_uint64 * len(bs))(*[len(s) for s in bs])
                keep += [arr, lens]
                lib.ob_gguf_set_arr_str(w, k, arr, lens, len(bs))
            elif vt == VT.ARRAY:
                a = np.array(val, dtype=NP[st])
                keep.append(a)
                lib.ob_gguf_set_arr(w, k, int(st), a.ctypes.data, len(val))
            else:
                getattr(lib, "ob_gguf_set_" + setter[vt])(w, k, val)
        err = C.create_string_buffer(512)
        for name, ty, ne, data in random_tensors(alignment):
            ne_c = (C.c_int64 * len(ne))(*ne)
            buf = np.ascontiguousarray(data)
            keep.append(buf)
            st = lib.ob_gguf_add_tensor(w, name.encode(), int(ty), len(ne), ne_c, buf.ctypes.data, err, len(err))
            assert st == 0, err.value.decode()
        st = lib.ob_gguf_writer_write(w, path.encode(), err, len(err))
        assert st == 0, err.value.decode()
    finally:
        lib.ob_gguf_writer_free(w)

    r = gguf.GGUFReader(path)
    assert int(r.fields["GGUF.version"].parts[-1][0]) == version
    assert r.alignment == alignment
    ref = ref_kvs(r)
    exp = expected_kvs(md)
    if alignment != 32:
        exp["general.alignment"] = (VT.UINT32, None, alignment)
    assert ref == exp
    assert list(ref) == list(exp)
    for rt, (name, ty, ne, arr) in zip(r.tensors, random_tensors(alignment)):
        assert rt.name == name and int(rt.tensor_type) == int(ty)
        assert [int(x) for x in rt.shape] == ne
        assert (rt.data_offset - r.data_offset) % alignment == 0
        assert rt.data.tobytes() == arr.tobytes()
    assert len(r.tensors) == 4
    # Our reader agrees with itself on the same file.
    g = ours_open(lib, path)
    try:
        assert ours_kvs(lib, g) == ref
        assert [t[4] for t in ours_tensors(lib, g)] == [rt.data.tobytes() for rt in r.tensors]
    finally:
        lib.ob_gguf_close(g)
