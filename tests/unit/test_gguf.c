/* GGUF reader/writer: round trips through our writer (v2/v3, alignments 32/64, every
 * metadata type, tensors of several types) and hostile files built byte by byte with an
 * independent encoder below (truncations, bad magic/version, huge counts, overflowing
 * shapes, misaligned or out-of-file offsets, duplicates). */
#include "testutil.h"
#include "format/gguf.h"
#include "format/quant.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[] = "/tmp/ob_test_gguf_XXXXXX";

/* ---- an independent little encoder for hand-made files ---- */

typedef struct buf { uint8_t *p; size_t len, cap; } buf;

static void b_put(buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void b_u32(buf *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(buf *b, uint64_t v) { b_put(b, &v, 8); }
static void b_str(buf *b, const char *s) { b_u64(b, strlen(s)); b_put(b, s, strlen(s)); }
static void b_pad(buf *b, size_t a) { while (b->len % a) b_put(b, "", 1); }

/* One-tensor file: header, optional extra raw kv bytes, one alignment key, tensor "t". */
typedef struct spec {
    uint32_t version;
    uint64_t n_kv_override, n_tensors_override; /* 0 = real count */
    uint32_t alignment;
    uint32_t n_dims;
    uint64_t ne[5];
    uint32_t type;
    uint64_t offset;
    size_t data_len;
    const buf *extra_kv;  /* appended kv records (count given by extra_n) */
    uint64_t extra_n;
    const char *tname2;   /* if set, a second tensor of the same shape at the next offset */
} spec;

static buf make_file(const spec *s) {
    buf b = {0};
    b_put(&b, "GGUF", 4);
    b_u32(&b, s->version);
    uint64_t nt = s->tname2 ? 2 : 1;
    b_u64(&b, s->n_tensors_override ? s->n_tensors_override : nt);
    b_u64(&b, s->n_kv_override ? s->n_kv_override : 1 + s->extra_n);
    b_str(&b, "general.alignment");
    b_u32(&b, OB_GGUF_UINT32);
    b_u32(&b, s->alignment);
    if (s->extra_kv) b_put(&b, s->extra_kv->p, s->extra_kv->len);
    for (uint64_t k = 0; k < nt; k++) {
        b_str(&b, k ? s->tname2 : "t");
        b_u32(&b, s->n_dims);
        for (uint32_t d = 0; d < s->n_dims && d < 5; d++) b_u64(&b, s->ne[d]);
        b_u32(&b, s->type);
        b_u64(&b, s->offset + k * ((s->data_len + 31) / 32 * 32));
    }
    b_pad(&b, s->alignment && s->alignment < 4096 ? s->alignment : 32);
    for (uint64_t k = 0; k < nt; k++) {
        if (k) b_pad(&b, 32);
        for (size_t i = 0; i < s->data_len; i++) {
            uint8_t x = (uint8_t)(i * 37 + 11);
            b_put(&b, &x, 1);
        }
    }
    return b;
}

static spec base_spec(void) {
    spec s = {0};
    s.version = 3;
    s.alignment = 32;
    s.n_dims = 2;
    s.ne[0] = 64; s.ne[1] = 3;
    s.type = OB_TYPE_Q8_0;       /* 2 blocks of 34 bytes per row: 204 bytes */
    s.data_len = 204;
    return s;
}

/* Opens bytes from an exact-size heap copy, so ASan sees any read past the end. */
static ob_status open_copy(const void *p, size_t len, char *err, size_t err_len) {
    void *c = malloc(len ? len : 1);
    if (len) memcpy(c, p, len);
    ob_gguf *g = NULL;
    ob_status st = ob_gguf_open_mem(c, len, &g, err, err_len);
    CHECK((st == OB_OK) == (g != NULL));
    ob_gguf_close(g);
    free(c);
    return st;
}

/* Expects failure with an error line containing want. */
static void expect_fail(const buf *b, const char *want, const char *what) {
    char err[256] = "";
    ob_status st = open_copy(b->p, b->len, err, sizeof(err));
    CHECKF(st != OB_OK, "%s: opened but should fail", what);
    CHECKF(strstr(err, want) != NULL, "%s: error '%s' lacks '%s'", what, err, want);
    CHECKF(strchr(err, '\n') == NULL && strncmp(err, "gguf: ", 6) == 0, "%s: bad error line '%s'", what, err);
}

static void test_hostile(void) {
    spec s = base_spec();
    buf b = make_file(&s);
    char err[256];
    /* The baseline must load, or the failures below prove nothing. */
    ob_gguf *g = NULL;
    CHECK(ob_gguf_open_mem(b.p, b.len, &g, err, sizeof(err)) == OB_OK);
    if (g) {
        const ob_gguf_tensor *t = ob_gguf_find_tensor(g, "t");
        CHECK(t && t->size == 204 && t->ne[0] == 64 && t->ne[1] == 3 && t->type == OB_TYPE_Q8_0);
        CHECK(t && ((const uint8_t *)t->data)[5] == (uint8_t)(5 * 37 + 11));
        ob_gguf_close(g);
    }
    free(b.p);

    buf m = make_file(&s);
    memcpy(m.p, "GGUG", 4);
    expect_fail(&m, "magic", "bad magic");
    free(m.p);

    uint32_t versions[] = {0, 1, 4, 0x03000000u, 0xffffffffu};
    const char *vwant[] = {"unsupported version", "version 1", "unsupported version", "big-endian", "unsupported"};
    for (int i = 0; i < 5; i++) {
        s = base_spec(); s.version = versions[i];
        m = make_file(&s); expect_fail(&m, vwant[i], "version"); free(m.p);
    }
    s = base_spec(); s.version = 2;
    m = make_file(&s);
    CHECK(open_copy(m.p, m.len, err, sizeof(err)) == OB_OK);
    free(m.p);

    uint64_t huge[] = {1ull << 20 | 1, 1ull << 40, UINT64_MAX, 1000};
    for (int i = 0; i < 4; i++) {
        s = base_spec(); s.n_kv_override = huge[i];
        m = make_file(&s); expect_fail(&m, "key count", "huge n_kv"); free(m.p);
        s = base_spec(); s.n_tensors_override = huge[i];
        m = make_file(&s); expect_fail(&m, "tensor count", "huge n_tensors"); free(m.p);
    }
    /* n_kv one too many, still plausible by size: runs into tensor info bytes and fails. */
    s = base_spec(); s.n_kv_override = 2;
    m = make_file(&s);
    CHECK(open_copy(m.p, m.len, err, sizeof(err)) != OB_OK);
    free(m.p);

    /* Huge string length of the first key. */
    s = base_spec();
    m = make_file(&s);
    uint64_t big = 1ull << 62;
    memcpy(m.p + 24, &big, 8);
    expect_fail(&m, "exceeds the limit of 65536", "huge key length");
    big = 60000;
    memcpy(m.p + 24, &big, 8);
    expect_fail(&m, "file ends", "key past end");
    free(m.p);

    /* Shapes. */
    s = base_spec(); s.n_dims = 5; s.ne[2] = s.ne[3] = s.ne[4] = 1;
    m = make_file(&s); expect_fail(&m, "5 dimensions", "n_dims 5"); free(m.p);
    s = base_spec(); s.ne[1] = 0;
    m = make_file(&s); expect_fail(&m, "must be > 0", "ne 0"); free(m.p);
    s = base_spec(); s.ne[1] = (uint64_t)1 << 63;
    m = make_file(&s); expect_fail(&m, "must be > 0", "ne negative"); free(m.p);
    s = base_spec(); s.n_dims = 4; s.ne[0] = 1ull << 20; s.ne[1] = 1ull << 20; s.ne[2] = 1ull << 20; s.ne[3] = 1ull << 20;
    m = make_file(&s); expect_fail(&m, "overflows", "ne product overflow"); free(m.p);
    s = base_spec(); s.n_dims = 2; s.type = OB_TYPE_F32; s.ne[0] = 1ull << 62; s.ne[1] = 1;
    m = make_file(&s); expect_fail(&m, "overflows", "bytes overflow"); free(m.p);
    s = base_spec(); s.ne[0] = 48;
    m = make_file(&s); expect_fail(&m, "block size", "row not block multiple"); free(m.p);
    s = base_spec(); s.type = 200;
    m = make_file(&s); expect_fail(&m, "unknown type id 200", "type 200"); free(m.p);
    s = base_spec(); s.type = 4; /* a removed ggml type id */
    m = make_file(&s); expect_fail(&m, "unknown type id 4", "type 4"); free(m.p);

    /* Offsets. */
    s = base_spec(); s.offset = 8;
    m = make_file(&s); expect_fail(&m, "not a multiple of the alignment", "misaligned"); free(m.p);
    s = base_spec(); s.offset = 64;
    m = make_file(&s); expect_fail(&m, "beyond file size", "data past end"); free(m.p);
    s = base_spec(); s.offset = UINT64_MAX - 31;
    m = make_file(&s); expect_fail(&m, "beyond file size", "offset overflow"); free(m.p);
    s = base_spec(); s.data_len = 203; /* one byte short */
    m = make_file(&s); expect_fail(&m, "'t' data [", "one byte short"); free(m.p);

    /* Alignment key. */
    uint32_t bad_align[] = {0, 48, 3, 0x80000000u};
    for (int i = 0; i < 4; i++) {
        s = base_spec(); s.alignment = bad_align[i];
        m = make_file(&s); expect_fail(&m, "general.alignment", "bad alignment"); free(m.p);
    }
    s = base_spec(); s.alignment = 64;
    m = make_file(&s);
    CHECK(open_copy(m.p, m.len, err, sizeof(err)) == OB_OK);
    free(m.p);

    /* Duplicates. */
    buf kv = {0};
    b_str(&kv, "general.alignment"); b_u32(&kv, OB_GGUF_UINT32); b_u32(&kv, 32);
    s = base_spec(); s.extra_kv = &kv; s.extra_n = 1;
    m = make_file(&s); expect_fail(&m, "duplicate key 'general.alignment'", "dup key"); free(m.p);
    free(kv.p);
    s = base_spec(); s.tname2 = "t";
    m = make_file(&s); expect_fail(&m, "duplicate tensor name 't'", "dup tensor"); free(m.p);
    s = base_spec(); s.tname2 = "u";
    m = make_file(&s);
    CHECK(open_copy(m.p, m.len, err, sizeof(err)) == OB_OK);
    free(m.p);

    /* Value types. */
    kv = (buf){0};
    b_str(&kv, "x"); b_u32(&kv, 13); b_u32(&kv, 0);
    s = base_spec(); s.extra_kv = &kv; s.extra_n = 1;
    m = make_file(&s); expect_fail(&m, "unknown value type 13", "value type 13"); free(m.p);
    free(kv.p);
    kv = (buf){0};
    b_str(&kv, "x"); b_u32(&kv, OB_GGUF_ARRAY); b_u32(&kv, OB_GGUF_ARRAY); b_u64(&kv, 1);
    b_u32(&kv, OB_GGUF_UINT8); b_u64(&kv, 1); b_u32(&kv, 0);
    s = base_spec(); s.extra_kv = &kv; s.extra_n = 1;
    m = make_file(&s); expect_fail(&m, "nested array", "nested"); free(m.p);
    free(kv.p);
    kv = (buf){0};
    b_str(&kv, "x"); b_u32(&kv, OB_GGUF_ARRAY); b_u32(&kv, OB_GGUF_UINT64); b_u64(&kv, 1ull << 61);
    s = base_spec(); s.extra_kv = &kv; s.extra_n = 1;
    m = make_file(&s); expect_fail(&m, "runs past the file end", "array n * size overflow"); free(m.p);
    free(kv.p);
    kv = (buf){0};
    b_str(&kv, "x"); b_u32(&kv, OB_GGUF_ARRAY); b_u32(&kv, OB_GGUF_STRING); b_u64(&kv, 3);
    b_str(&kv, "a"); b_u64(&kv, 1ull << 40);
    s = base_spec(); s.extra_kv = &kv; s.extra_n = 1;
    m = make_file(&s); expect_fail(&m, "element 1", "string array element too long"); free(m.p);
    free(kv.p);
    kv = (buf){0};
    b_str(&kv, "x"); b_u32(&kv, OB_GGUF_STRING); b_u64(&kv, (1ull << 30) + 1);
    s = base_spec(); s.extra_kv = &kv; s.extra_n = 1;
    m = make_file(&s); expect_fail(&m, "exceeds the limit of 1073741824", "string over 1 GiB"); free(m.p);
    free(kv.p);
    /* A hostile name must not break the one-line error. */
    kv = (buf){0};
    b_str(&kv, "bad\nkey\x01"); b_u32(&kv, 99);
    s = base_spec(); s.extra_kv = &kv; s.extra_n = 1;
    m = make_file(&s); expect_fail(&m, "bad\\x0akey\\x01", "escaped name"); free(m.p);
    free(kv.p);

    /* Files and sizes. */
    ob_gguf *h = NULL;
    CHECK(ob_gguf_open("/nonexistent/x.gguf", &h, err, sizeof(err)) == OB_ERR_IO && !h);
    CHECK(ob_gguf_open_mem("GG", 2, &h, err, sizeof(err)) == OB_ERR_FORMAT && !h);
    CHECK(ob_gguf_open_mem(NULL, 0, &h, err, sizeof(err)) == OB_ERR_FORMAT && !h);
    char path[256];
    snprintf(path, sizeof(path), "%s/empty.gguf", g_dir);
    FILE *f = fopen(path, "wb");
    fclose(f);
    CHECK(ob_gguf_open(path, &h, err, sizeof(err)) == OB_ERR_FORMAT && strstr(err, "too small"));
    remove(path);
}

/* ---- round trips through our writer ---- */

static const ob_gguf_type k_num_types[] = {
    OB_GGUF_UINT8, OB_GGUF_INT8, OB_GGUF_UINT16, OB_GGUF_INT16, OB_GGUF_UINT32, OB_GGUF_INT32,
    OB_GGUF_FLOAT32, OB_GGUF_BOOL, OB_GGUF_UINT64, OB_GGUF_INT64, OB_GGUF_FLOAT64,
};
static size_t esize(ob_gguf_type t) {
    switch (t) {
    case OB_GGUF_UINT8: case OB_GGUF_INT8: case OB_GGUF_BOOL: return 1;
    case OB_GGUF_UINT16: case OB_GGUF_INT16: return 2;
    case OB_GGUF_UINT32: case OB_GGUF_INT32: case OB_GGUF_FLOAT32: return 4;
    default: return 8;
    }
}

typedef struct rt_tensor {
    const char *name;
    ob_type type;
    int n_dims;
    int64_t ne[4];
    uint8_t *data;
    size_t size;
    bool streamed;
} rt_tensor;

static bool fill_cb(void *ctx, int64_t index, void *dst, size_t size) {
    rt_tensor *ts = ctx;
    if (ts[index].size != size) return false;
    memcpy(dst, ts[index].data, size);
    return true;
}
static bool fail_cb(void *ctx, int64_t index, void *dst, size_t size) { return false; }

static bool str_eq(const ob_gguf_str *s, const char *p, uint64_t len) {
    return s->len == len && memcmp(s->p, p, len) == 0 && s->p[len] == 0;
}

/* Two kvs hold the same key, type and value. */
static bool kv_equal(const ob_gguf_kv *a, const ob_gguf_kv *b) {
    if (!str_eq(&a->key, b->key.p, b->key.len) || a->type != b->type || a->n != b->n) return false;
    if (a->type == OB_GGUF_STRING) return str_eq(&a->v.str, b->v.str.p, b->v.str.len);
    if (a->type == OB_GGUF_BOOL) return a->v.b == b->v.b;
    if (a->type == OB_GGUF_FLOAT32 || a->type == OB_GGUF_FLOAT64) return memcmp(&a->v.f64, &b->v.f64, 8) == 0;
    if (a->type != OB_GGUF_ARRAY) return a->v.u64 == b->v.u64;
    if (a->arr_type != b->arr_type) return false;
    if (a->arr_type == OB_GGUF_STRING) {
        for (uint64_t i = 0; i < a->n; i++)
            if (!str_eq(&a->arr_str[i], b->arr_str[i].p, b->arr_str[i].len)) return false;
        return true;
    }
    return a->n == 0 || memcmp(a->arr, b->arr, a->n * esize(a->arr_type)) == 0;
}

static void roundtrip(uint32_t version, size_t alignment, uint64_t seed) {
    ob_rng r;
    ob_rng_seed(&r, seed);
    char err[256] = "", path[256];
    snprintf(path, sizeof(path), "%s/rt_v%u_a%zu.gguf", g_dir, version, alignment);
    ob_gguf_writer *w = ob_gguf_writer_new(version, alignment);
    CHECK(w != NULL);
    if (!w) return;

    int64_t i64 = -(int64_t)(ob_rng_u64(&r) >> 2);
    uint64_t u64 = ob_rng_u64(&r) | (1ull << 63);
    float f32 = ob_rng_normal(&r);
    double f64 = (double)ob_rng_normal(&r) * 1e100;
    ob_gguf_set_str(w, "general.architecture", "replaced-below");
    ob_gguf_set_u8(w, "t.u8", 200);
    ob_gguf_set_i8(w, "t.i8", -100);
    ob_gguf_set_u16(w, "t.u16", 60000);
    ob_gguf_set_i16(w, "t.i16", -30000);
    ob_gguf_set_u32(w, "t.u32", 4000000000u);
    ob_gguf_set_i32(w, "t.i32", -2000000000);
    ob_gguf_set_u64(w, "t.u64", u64);
    ob_gguf_set_i64(w, "t.i64", i64);
    ob_gguf_set_f32(w, "t.f32", f32);
    ob_gguf_set_f64(w, "t.f64", f64);
    ob_gguf_set_bool(w, "t.true", true);
    ob_gguf_set_bool(w, "t.false", false);
    ob_gguf_set_str(w, "t.empty", "");
    ob_gguf_set_strn(w, "t.nul", "a\0b\0", 4);
    ob_gguf_set_str(w, "general.architecture", "llama"); /* replaces, keeps position */

    /* Arrays of every numeric type with random bytes, including an empty one. */
    uint8_t arrs[11][8 * 40];
    uint64_t arr_n[11];
    for (int t = 0; t < 11; t++) {
        arr_n[t] = t == 3 ? 0 : 1 + ob_rng_u64(&r) % 40;
        for (size_t i = 0; i < sizeof(arrs[t]); i++) arrs[t][i] = (uint8_t)ob_rng_u64(&r);
        if (k_num_types[t] == OB_GGUF_BOOL)
            for (size_t i = 0; i < sizeof(arrs[t]); i++) arrs[t][i] &= 1;
        char key[32];
        snprintf(key, sizeof(key), "arr.%d", (int)k_num_types[t]);
        ob_gguf_set_arr(w, key, k_num_types[t], arrs[t], arr_n[t]);
    }
    const char *strs[] = {"hello", "", "x\0y", "\xe2\x96\x81tok", "last"};
    const uint64_t lens[] = {5, 0, 3, 6, 4};
    ob_gguf_set_arr_str(w, "arr.str", strs, lens, 5);
    const char *strs2[] = {"one", "two"};
    ob_gguf_set_arr_str(w, "arr.str2", strs2, NULL, 2);
    ob_gguf_set_arr_str(w, "arr.str_empty", NULL, NULL, 0);

    /* Tensors of several types and shapes; random bytes (any bit pattern is a valid block). */
    rt_tensor ts[] = {
        {"tok_embd.weight", OB_TYPE_F32, 2, {37, 3, 1, 1}, NULL, 0, false},
        {"blk.0.attn_q.weight", OB_TYPE_Q8_0, 3, {64, 2, 3, 1}, NULL, 0, true},
        {"blk.0.ffn_up.weight", OB_TYPE_Q4_K, 2, {512, 2, 1, 1}, NULL, 0, false},
        {"norm", OB_TYPE_F16, 1, {5, 1, 1, 1}, NULL, 0, true},
        {"ids", OB_TYPE_I32, 4, {3, 1, 2, 2}, NULL, 0, false},
        {"q6", OB_TYPE_Q6_K, 1, {256, 1, 1, 1}, NULL, 0, false},
    };
    int nt = (int)OB_ARRAY_LEN(ts);
    for (int i = 0; i < nt; i++) {
        size_t rows = (size_t)(ts[i].ne[1] * ts[i].ne[2] * ts[i].ne[3]);
        ts[i].size = ob_row_size(ts[i].type, ts[i].ne[0]) * rows;
        CHECK(ts[i].size > 0);
        ts[i].data = malloc(ts[i].size);
        for (size_t j = 0; j < ts[i].size; j++) ts[i].data[j] = (uint8_t)ob_rng_u64(&r);
        ob_status st = ts[i].streamed
            ? ob_gguf_add_tensor_fn(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne, fill_cb, ts, err, sizeof(err))
            : ob_gguf_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne, ts[i].data, err, sizeof(err));
        CHECKF(st == OB_OK, "add %s: %s", ts[i].name, err);
    }
    /* Writer-side validation. */
    int64_t bad_ne[2] = {33, 1};
    CHECK(ob_gguf_add_tensor(w, "bad", OB_TYPE_Q8_0, 2, bad_ne, ts[0].data, err, sizeof(err)) != OB_OK &&
          strstr(err, "block size"));
    CHECK(ob_gguf_add_tensor(w, "norm", OB_TYPE_F32, 1, bad_ne, ts[0].data, err, sizeof(err)) != OB_OK &&
          strstr(err, "duplicate"));
    CHECK(ob_gguf_add_tensor(w, "bad", (ob_type)4, 1, bad_ne, ts[0].data, err, sizeof(err)) != OB_OK);
    int64_t ne5[5] = {1, 1, 1, 1, 1};
    CHECK(ob_gguf_add_tensor(w, "bad", OB_TYPE_F32, 5, ne5, ts[0].data, err, sizeof(err)) != OB_OK);
    int64_t neg[1] = {-4};
    CHECK(ob_gguf_add_tensor(w, "bad", OB_TYPE_F32, 1, neg, ts[0].data, err, sizeof(err)) != OB_OK);

    ob_status st = ob_gguf_writer_write(w, path, err, sizeof(err));
    CHECKF(st == OB_OK, "write: %s", err);
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0);

    ob_gguf *g = NULL;
    st = ob_gguf_open(path, &g, err, sizeof(err));
    CHECKF(st == OB_OK, "open: %s", err);
    if (st == OB_OK) {
        struct stat sb;
        stat(path, &sb);
        CHECK(ob_gguf_file_size(g) == (uint64_t)sb.st_size);
        CHECK(ob_gguf_version(g) == version);
        CHECK(ob_gguf_alignment(g) == (alignment ? alignment : 32));
        CHECK((ob_gguf_find_kv(g, "general.alignment") != NULL) == (alignment == 64));
        int64_t want_kv = 15 + 11 + 3 + (alignment == 64);
        CHECK(ob_gguf_n_kv(g) == want_kv);
        CHECK(strcmp(ob_gguf_kv_at(g, 0)->key.p, "general.architecture") == 0);
        CHECK(ob_gguf_kv_at(g, want_kv) == NULL && ob_gguf_kv_at(g, -1) == NULL);
        CHECK(strcmp(ob_gguf_get_str(g, "general.architecture"), "llama") == 0);
        const ob_gguf_kv *kv = ob_gguf_find_kv(g, "t.u8");
        CHECK(kv && kv->type == OB_GGUF_UINT8 && kv->v.u64 == 200 && kv->n == 1);
        kv = ob_gguf_find_kv(g, "t.i8");
        CHECK(kv && kv->type == OB_GGUF_INT8 && kv->v.i64 == -100);
        kv = ob_gguf_find_kv(g, "t.u16");
        CHECK(kv && kv->type == OB_GGUF_UINT16 && kv->v.u64 == 60000);
        kv = ob_gguf_find_kv(g, "t.i16");
        CHECK(kv && kv->type == OB_GGUF_INT16 && kv->v.i64 == -30000);
        kv = ob_gguf_find_kv(g, "t.u32");
        CHECK(kv && kv->type == OB_GGUF_UINT32 && kv->v.u64 == 4000000000u);
        kv = ob_gguf_find_kv(g, "t.i32");
        CHECK(kv && kv->type == OB_GGUF_INT32 && kv->v.i64 == -2000000000);
        kv = ob_gguf_find_kv(g, "t.u64");
        CHECK(kv && kv->type == OB_GGUF_UINT64 && kv->v.u64 == u64);
        kv = ob_gguf_find_kv(g, "t.i64");
        CHECK(kv && kv->type == OB_GGUF_INT64 && kv->v.i64 == i64);
        kv = ob_gguf_find_kv(g, "t.f32");
        CHECK(kv && kv->type == OB_GGUF_FLOAT32 && (float)kv->v.f64 == f32);
        kv = ob_gguf_find_kv(g, "t.f64");
        CHECK(kv && kv->type == OB_GGUF_FLOAT64 && kv->v.f64 == f64);
        kv = ob_gguf_find_kv(g, "t.nul");
        CHECK(kv && kv->type == OB_GGUF_STRING && str_eq(&kv->v.str, "a\0b\0", 4));
        kv = ob_gguf_find_kv(g, "t.empty");
        CHECK(kv && kv->type == OB_GGUF_STRING && str_eq(&kv->v.str, "", 0));

        /* Typed getters: compatible types only, and the value must fit. */
        uint32_t u32;
        int64_t v64;
        float f;
        bool bv;
        CHECK(ob_gguf_get_u32(g, "t.u8", &u32) && u32 == 200);
        CHECK(ob_gguf_get_u32(g, "t.u32", &u32) && u32 == 4000000000u);
        CHECK(!ob_gguf_get_u32(g, "t.i8", &u32));
        CHECK(!ob_gguf_get_u32(g, "t.u64", &u32));
        CHECK(!ob_gguf_get_u32(g, "t.f32", &u32));
        CHECK(!ob_gguf_get_u32(g, "missing", &u32));
        CHECK(ob_gguf_get_i64(g, "t.i64", &v64) && v64 == i64);
        CHECK(ob_gguf_get_i64(g, "t.i16", &v64) && v64 == -30000);
        CHECK(!ob_gguf_get_i64(g, "t.u64", &v64)); /* above INT64_MAX */
        CHECK(ob_gguf_get_f32(g, "t.f32", &f) && f == f32);
        CHECK(ob_gguf_get_f32(g, "t.i32", &f) && f == -2000000000.0f);
        CHECK(!ob_gguf_get_f32(g, "t.nul", &f));
        CHECK(ob_gguf_get_bool(g, "t.true", &bv) && bv);
        CHECK(ob_gguf_get_bool(g, "t.false", &bv) && !bv);
        CHECK(!ob_gguf_get_bool(g, "t.u8", &bv));
        CHECK(ob_gguf_get_str(g, "t.u8") == NULL && ob_gguf_get_str(g, "nope") == NULL);

        for (int t = 0; t < 11; t++) {
            char key[32];
            snprintf(key, sizeof(key), "arr.%d", (int)k_num_types[t]);
            kv = ob_gguf_find_kv(g, key);
            CHECKF(kv && kv->type == OB_GGUF_ARRAY && kv->arr_type == k_num_types[t] && kv->n == arr_n[t] &&
                   (arr_n[t] == 0 || memcmp(kv->arr, arrs[t], arr_n[t] * esize(k_num_types[t])) == 0),
                   "array %s", key);
            if (!kv || arr_n[t] == 0) continue;
            uint64_t last = arr_n[t] - 1;
            int64_t iv;
            float fv;
            const uint8_t *p = arrs[t] + last * esize(k_num_types[t]);
            switch (k_num_types[t]) {
            case OB_GGUF_INT16: { int16_t x; memcpy(&x, p, 2); CHECK(ob_gguf_arr_i64(kv, last, &iv) && iv == x);
                                  CHECK(ob_gguf_arr_f32(kv, last, &fv) && fv == (float)x); break; }
            case OB_GGUF_UINT32: { uint32_t x; memcpy(&x, p, 4); CHECK(ob_gguf_arr_i64(kv, last, &iv) && iv == x); break; }
            case OB_GGUF_FLOAT32: { float x; memcpy(&x, p, 4);
                                    CHECK(ob_gguf_arr_f32(kv, last, &fv) && (fv == x || (isnan(fv) && isnan(x))));
                                    CHECK(!ob_gguf_arr_i64(kv, last, &iv)); break; }
            case OB_GGUF_INT8: CHECK(ob_gguf_arr_i64(kv, last, &iv) && iv == (int8_t)*p); break;
            case OB_GGUF_UINT64: { uint64_t x; memcpy(&x, p, 8);
                                   CHECK(ob_gguf_arr_i64(kv, last, &iv) == (x <= (uint64_t)INT64_MAX)); break; }
            default: break;
            }
            CHECK(!ob_gguf_arr_i64(kv, arr_n[t], &iv) && !ob_gguf_arr_f32(kv, arr_n[t], &fv));
        }
        kv = ob_gguf_find_kv(g, "arr.str");
        CHECK(kv && kv->type == OB_GGUF_ARRAY && kv->arr_type == OB_GGUF_STRING && kv->n == 5);
        for (int i = 0; kv && i < 5; i++) CHECK(str_eq(&kv->arr_str[i], strs[i], lens[i]));
        kv = ob_gguf_find_kv(g, "arr.str2");
        CHECK(kv && kv->n == 2 && str_eq(&kv->arr_str[1], "two", 3));
        kv = ob_gguf_find_kv(g, "arr.str_empty");
        CHECK(kv && kv->n == 0 && kv->arr_type == OB_GGUF_STRING);

        CHECK(ob_gguf_n_tensors(g) == nt);
        for (int i = 0; i < nt; i++) {
            const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
            CHECK(t && t == ob_gguf_find_tensor(g, ts[i].name));
            if (!t) continue;
            CHECK(t->type == ts[i].type && t->n_dims == ts[i].n_dims && t->size == ts[i].size);
            CHECK(memcmp(t->ne, ts[i].ne, sizeof(t->ne)) == 0);
            CHECK(memcmp(t->data, ts[i].data, ts[i].size) == 0);
            CHECK(t->offset % ob_gguf_alignment(g) == 0);
        }
        CHECK(ob_gguf_find_tensor(g, "nope") == NULL && ob_gguf_tensor_at(g, nt) == NULL);

        /* copy_kv into a new writer reproduces every key. */
        char path2[300];
        snprintf(path2, sizeof(path2), "%s.copy", path);
        ob_gguf_writer *w2 = ob_gguf_writer_new(3, 0);
        ob_gguf_copy_kv(w2, g);
        st = ob_gguf_writer_write(w2, path2, err, sizeof(err));
        CHECKF(st == OB_OK, "copy write: %s", err);
        ob_gguf_writer_free(w2);
        ob_gguf *g2 = NULL;
        st = ob_gguf_open(path2, &g2, err, sizeof(err));
        CHECKF(st == OB_OK, "copy open: %s", err);
        if (g2) {
            CHECK(ob_gguf_n_kv(g2) == ob_gguf_n_kv(g) && ob_gguf_n_tensors(g2) == 0);
            for (int64_t i = 0; i < ob_gguf_n_kv(g); i++) {
                const ob_gguf_kv *a = ob_gguf_kv_at(g, i), *b = ob_gguf_kv_at(g2, i);
                if (strcmp(a->key.p, "general.alignment") == 0) {
                    CHECK(b->v.u64 == 32); /* rewritten to the new writer's alignment */
                    continue;
                }
                CHECKF(kv_equal(a, b), "copied key %s differs", a->key.p);
            }
            ob_gguf_close(g2);
        }
        remove(path2);

        /* open_mem on an exact-size copy sees the same file. */
        size_t len = 0;
        uint8_t *bytes = ob_test_read_file(path, &len);
        ob_gguf *g3 = NULL;
        CHECK(bytes && ob_gguf_open_mem(bytes, len, &g3, err, sizeof(err)) == OB_OK);
        size_t end_last = len;
        if (g3) {
            for (int64_t i = 0; i < ob_gguf_n_kv(g); i++) CHECK(kv_equal(ob_gguf_kv_at(g, i), ob_gguf_kv_at(g3, i)));
            const ob_gguf_tensor *t0 = ob_gguf_tensor_at(g3, 0), *tl = ob_gguf_tensor_at(g3, nt - 1);
            size_t data_start = (size_t)((const uint8_t *)t0->data - bytes) - (size_t)t0->offset;
            CHECK(data_start % ob_gguf_alignment(g3) == 0);
            end_last = data_start + (size_t)tl->offset + tl->size;
            CHECK(end_last <= len && len - end_last < ob_gguf_alignment(g3));
            ob_gguf_close(g3);
        }
        /* Truncations: every length before the last tensor's data ends fails cleanly with
         * one line; from there on (trailing padding is optional) the file opens. ASan
         * checks each exact-size copy for reads past its end. */
        int bad = 0;
        for (size_t cut = 0; bytes && cut < len; cut++) {
            char e2[256] = "";
            ob_status s2 = open_copy(bytes, cut, e2, sizeof(e2));
            if ((s2 == OB_OK) != (cut >= end_last)) bad++;
            if (s2 != OB_OK && (strncmp(e2, "gguf: ", 6) != 0 || strchr(e2, '\n'))) bad++;
        }
        CHECKF(bad == 0, "%d bad truncations", bad);
        free(bytes);
        ob_gguf_close(g);
    }
    ob_gguf_writer_free(w);
    remove(path);
    for (int i = 0; i < nt; i++) free(ts[i].data);
}

static void test_writer_errors(void) {
    char err[256] = "", path[256];
    CHECK(ob_gguf_writer_new(1, 0) == NULL);
    CHECK(ob_gguf_writer_new(4, 0) == NULL);
    CHECK(ob_gguf_writer_new(3, 48) == NULL);
    /* A failing fill aborts the write and leaves neither the file nor the temporary. */
    snprintf(path, sizeof(path), "%s/fail.gguf", g_dir);
    ob_gguf_writer *w = ob_gguf_writer_new(3, 0);
    int64_t ne[1] = {32};
    CHECK(ob_gguf_add_tensor_fn(w, "x", OB_TYPE_F32, 1, ne, fail_cb, NULL, err, sizeof(err)) == OB_OK);
    CHECK(ob_gguf_writer_write(w, path, err, sizeof(err)) != OB_OK && strstr(err, "'x'"));
    CHECK(access(path, F_OK) != 0);
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0);
    ob_gguf_writer_free(w);
    /* Unwritable destination. */
    w = ob_gguf_writer_new(2, 0);
    CHECK(ob_gguf_writer_write(w, "/nonexistent/dir/x.gguf", err, sizeof(err)) == OB_ERR_IO);
    ob_gguf_writer_free(w);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_hostile();
    roundtrip(3, 0, 1);
    roundtrip(2, 32, 2);
    roundtrip(3, 64, 3);
    roundtrip(2, 64, 4);
    test_writer_errors();
    rmdir(g_dir);
    return ob_test_done("test_gguf");
}
