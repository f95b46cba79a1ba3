/* GGUF reader and writer.
 *
 * The reader treats every file as hostile: each count, length and offset is checked
 * against the bytes that remain before anything is allocated or dereferenced, so a
 * malformed file costs at most a few times its own size in memory and yields one error
 * line. Strings are copied into an arena (NUL-terminated, few mallocs even for a
 * 262k-token vocabulary); numeric arrays and tensor data point into the mapping.
 *
 * Layout (all little-endian; versions 2 and 3 are identical on disk):
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x   { str key | u32 type | value }           value: scalar, str, or
 *                                                      { u32 elem_type | u64 n | n values }
 *   n_tensors x { str name | u32 n_dims | u64 ne[n_dims] | u32 type | u64 offset }
 *   padding to alignment | data section (tensor offsets are relative to its start)
 *   str = u64 len | len bytes */
#include "format/gguf.h"
#include "format/quant.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
/* Sanity limits: far above any real model, low enough that a corrupted count can't
 * make us allocate or loop for long. Counts are also bounded by the bytes left. */
#define GGUF_MAX_STR (1ull << 30)
#define GGUF_MAX_NAME (1ull << 16)   /* keys and tensor names */
#define GGUF_MAX_KV (1ull << 20)
#define GGUF_MAX_TENSORS (1ull << 20)
/* Smallest encodings, used to bound counts by the bytes that remain. */
#define GGUF_MIN_KV_BYTES 13     /* key len (8) + type (4) + a 1-byte value */
#define GGUF_MIN_TI_BYTES 24     /* name len (8) + n_dims (4) + type (4) + offset (8) */

/* ---- arena for strings ---- */

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
} arena_chunk;

typedef struct arena { arena_chunk *head; } arena;

static void *arena_alloc(arena *a, size_t n) {
    n = (n + 7) & ~(size_t)7;
    arena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = OB_MAX(n, (size_t)1 << 16);
        c = malloc(sizeof(*c) + cap);
        if (!c) return NULL;
        c->cap = cap;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

static void arena_free(arena *a) {
    for (arena_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
}

/* ---- name hash: duplicate detection and lookups in O(1) ---- */

typedef struct name_index {
    int64_t *slot;  /* [cap] entry index + 1; 0 = empty */
    size_t cap;     /* power of two, >= 2 * entries */
} name_index;

static uint64_t hash_bytes(const char *p, uint64_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < len; i++) h = (h ^ (uint8_t)p[i]) * 0x100000001b3ull;
    return h;
}

static bool index_init(name_index *ix, int64_t n) {
    size_t cap = 16;
    while (cap < (size_t)n * 2) cap <<= 1;
    ix->slot = calloc(cap, sizeof(*ix->slot));
    ix->cap = cap;
    return ix->slot != NULL;
}

/* Finds name among strs via the index: returns its position or -1. If insert_at >= 0 and
 * the name is absent, records it as entry insert_at. */
static int64_t index_lookup(const name_index *ix, const ob_gguf_str *strs, size_t stride,
                            const char *p, uint64_t len, int64_t insert_at) {
    if (!ix->slot) return -1;
    size_t mask = ix->cap - 1, i = (size_t)hash_bytes(p, len) & mask;
    for (;; i = (i + 1) & mask) {
        int64_t e = ix->slot[i];
        if (e == 0) {
            if (insert_at >= 0) ix->slot[i] = insert_at + 1;
            return -1;
        }
        const ob_gguf_str *s = (const ob_gguf_str *)((const char *)strs + (size_t)(e - 1) * stride);
        if (s->len == len && memcmp(s->p, p, len) == 0) return e - 1;
    }
}

/* ---- reader ---- */

struct ob_gguf {
    const uint8_t *base;     /* [len] the whole file */
    size_t len;
    void *map;               /* non-NULL when we own an mmap of the file */
    uint32_t version;
    size_t alignment;
    uint64_t data_offset;    /* start of the data section */
    int64_t n_kv;
    ob_gguf_kv *kv;          /* [n_kv] */
    int64_t n_tensors;
    ob_gguf_tensor *tensors; /* [n_tensors] */
    name_index kv_index, tensor_index;
    arena strings;
    int n_parts;             /* a split model's further files (gguf-split's -0000i-of-0000N), */
    ob_gguf **parts;         /* whose tensors are in this one's table; their keys are not */
    uint64_t total_len;      /* bytes of every file */
};

typedef struct cursor {
    const uint8_t *p;
    size_t len, pos;
    char *err;
    size_t err_len;
    ob_status st;  /* status of the first failure */
} cursor;

/* Writes a string for an error message: printable ASCII only, truncated, so a hostile
 * name can't break the one-line error or make it huge. */
static const char *printable(char *buf, size_t cap, const char *p, uint64_t len) {
    size_t o = 0;
    for (uint64_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)p[i];
        bool plain = ch >= 0x20 && ch < 0x7f && ch != '\'' && ch != '\\';
        if (o + (plain ? 1 : 4) + 4 >= cap) { /* keep room for "..." and the NUL */
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (plain) buf[o++] = (char)ch;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
    }
    buf[o] = 0;
    return buf;
}

/* Records the first error (one line) and its status; returns false for chaining. */
static bool cfail(cursor *c, ob_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool cfail(cursor *c, ob_status st, const char *fmt, ...) {
    if (c->err && c->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->err_len, fmt, ap);
        va_end(ap);
    }
    c->st = st;
    return false;
}

static bool need(cursor *c, uint64_t n, const char *what) {
    if (n > c->len - c->pos) {
        return cfail(c, OB_ERR_FORMAT,
                "gguf: %s at offset %zu needs %llu bytes but the file ends at %zu",
                what, c->pos, (unsigned long long)n, c->len);
    }
    return true;
}

static bool rd(cursor *c, void *dst, size_t n, const char *what) {
    if (!need(c, n, what)) return false;
    memcpy(dst, c->p + c->pos, n);
    c->pos += n;
    return true;
}

static bool rd_u32(cursor *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static bool rd_u64(cursor *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

/* Reads a length-prefixed string as a view into the file (not yet NUL-terminated):
 * strings are copied only once the whole file has validated, so a corrupted length that
 * swallows most of a large file costs no copying. max bounds keys and names. */
static bool rd_str(cursor *c, ob_gguf_str *s, uint64_t max, const char *what) {
    uint64_t len;
    if (!rd_u64(c, &len, what)) return false;
    if (len > max) {
        return cfail(c, OB_ERR_FORMAT, "gguf: %s length %llu at offset %zu exceeds the limit of %llu bytes",
                     what, (unsigned long long)len, c->pos - 8, (unsigned long long)max);
    }
    if (!need(c, len, what)) return false;
    s->p = (char *)(c->p + c->pos); /* repointed to an owned copy by materialise() */
    s->len = len;
    c->pos += (size_t)len;
    return true;
}

static size_t scalar_size(ob_gguf_type t) {
    switch (t) {
    case OB_GGUF_UINT8: case OB_GGUF_INT8: case OB_GGUF_BOOL: return 1;
    case OB_GGUF_UINT16: case OB_GGUF_INT16: return 2;
    case OB_GGUF_UINT32: case OB_GGUF_INT32: case OB_GGUF_FLOAT32: return 4;
    case OB_GGUF_UINT64: case OB_GGUF_INT64: case OB_GGUF_FLOAT64: return 8;
    default: return 0; /* string, array, unknown */
    }
}

static bool type_valid(uint32_t t) { return t <= OB_GGUF_FLOAT64; }

static bool is_signed(ob_gguf_type t) {
    return t == OB_GGUF_INT8 || t == OB_GGUF_INT16 || t == OB_GGUF_INT32 || t == OB_GGUF_INT64;
}
static bool is_unsigned(ob_gguf_type t) {
    return t == OB_GGUF_UINT8 || t == OB_GGUF_UINT16 || t == OB_GGUF_UINT32 || t == OB_GGUF_UINT64;
}
static bool is_float(ob_gguf_type t) { return t == OB_GGUF_FLOAT32 || t == OB_GGUF_FLOAT64; }

/* Decodes one numeric element of type t at p (unaligned) into the kv's value union. */
static void decode_scalar(ob_gguf_type t, const uint8_t *p, ob_gguf_kv *kv) {
    switch (t) {
    case OB_GGUF_UINT8: kv->v.u64 = p[0]; break;
    case OB_GGUF_INT8: kv->v.i64 = (int8_t)p[0]; break;
    case OB_GGUF_BOOL: kv->v.b = p[0] != 0; break;
    case OB_GGUF_UINT16: { uint16_t x; memcpy(&x, p, 2); kv->v.u64 = x; break; }
    case OB_GGUF_INT16: { int16_t x; memcpy(&x, p, 2); kv->v.i64 = x; break; }
    case OB_GGUF_UINT32: { uint32_t x; memcpy(&x, p, 4); kv->v.u64 = x; break; }
    case OB_GGUF_INT32: { int32_t x; memcpy(&x, p, 4); kv->v.i64 = x; break; }
    case OB_GGUF_FLOAT32: { float x; memcpy(&x, p, 4); kv->v.f64 = x; break; }
    case OB_GGUF_UINT64: memcpy(&kv->v.u64, p, 8); break;
    case OB_GGUF_INT64: memcpy(&kv->v.i64, p, 8); break;
    case OB_GGUF_FLOAT64: memcpy(&kv->v.f64, p, 8); break;
    default: break;
    }
}

static bool read_kv(cursor *c, ob_gguf *g, int64_t i) {
    ob_gguf_kv *kv = &g->kv[i];
    char name[96], what[160];
    snprintf(what, sizeof(what), "key %lld name", (long long)i);
    if (!rd_str(c, &kv->key, GGUF_MAX_NAME, what)) return false;
    printable(name, sizeof(name), kv->key.p, kv->key.len);
    if (index_lookup(&g->kv_index, &g->kv[0].key, sizeof(ob_gguf_kv), kv->key.p, kv->key.len, i) >= 0) {
        return cfail(c, OB_ERR_FORMAT, "gguf: duplicate key '%s'", name);
    }
    snprintf(what, sizeof(what), "key '%s' type", name);
    uint32_t type;
    if (!rd_u32(c, &type, what)) return false;
    if (!type_valid(type)) {
        return cfail(c, OB_ERR_FORMAT, "gguf: key '%s' has unknown value type %u", name, type);
    }
    kv->type = (ob_gguf_type)type;
    kv->n = 1;
    snprintf(what, sizeof(what), "key '%s' value", name);
    if (type == OB_GGUF_STRING) return rd_str(c, &kv->v.str, GGUF_MAX_STR, what);
    if (type != OB_GGUF_ARRAY) {
        size_t sz = scalar_size(kv->type);
        if (!need(c, sz, what)) return false;
        decode_scalar(kv->type, c->p + c->pos, kv);
        c->pos += sz;
        return true;
    }
    uint32_t et;
    uint64_t n;
    if (!rd_u32(c, &et, what) || !rd_u64(c, &n, what)) return false;
    if (!type_valid(et)) {
        return cfail(c, OB_ERR_FORMAT, "gguf: key '%s' array has unknown element type %u", name, et);
    }
    if (et == OB_GGUF_ARRAY) {
        return cfail(c, OB_ERR_UNSUPPORTED, "gguf: key '%s' is a nested array (not supported)", name);
    }
    kv->arr_type = (ob_gguf_type)et;
    kv->n = n;
    /* Every element takes at least esize bytes of file, so n is bounded by what remains. */
    size_t esize = et == OB_GGUF_STRING ? 8 : scalar_size(kv->arr_type);
    if (n > (c->len - c->pos) / esize) {
        return cfail(c, OB_ERR_FORMAT,
                "gguf: key '%s' array of %llu elements at offset %zu runs past the file end %zu",
                name, (unsigned long long)n, c->pos, c->len);
    }
    if (et != OB_GGUF_STRING) {
        kv->arr = c->p + c->pos;
        c->pos += (size_t)n * esize;
        return true;
    }
    /* Validate the elements now; the string table is built by materialise(). */
    kv->arr = c->p + c->pos;
    for (uint64_t j = 0; j < n; j++) {
        ob_gguf_str tmp;
        snprintf(what, sizeof(what), "key '%s' element %llu", name, (unsigned long long)j);
        if (!rd_str(c, &tmp, GGUF_MAX_STR, what)) return false;
    }
    return true;
}

/* Reads general.alignment, if present: any integer type, a nonzero power of two. */
static bool read_alignment(cursor *c, ob_gguf *g) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const ob_gguf_kv *kv = ob_gguf_find_kv(g, "general.alignment");
    if (!kv) return true;
    uint64_t a;
    if (is_unsigned(kv->type)) a = kv->v.u64;
    else if (is_signed(kv->type) && kv->v.i64 > 0) a = (uint64_t)kv->v.i64;
    else return cfail(c, OB_ERR_FORMAT, "gguf: general.alignment must be a positive integer");
    if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 30)) {
        return cfail(c, OB_ERR_FORMAT,
                "gguf: general.alignment %llu is not a power of two in [1, 2^30]", (unsigned long long)a);
    }
    g->alignment = (size_t)a;
    return true;
}

static bool read_tensor_info(cursor *c, ob_gguf *g, int64_t i) {
    ob_gguf_tensor *t = &g->tensors[i];
    char name[96], what[160];
    snprintf(what, sizeof(what), "tensor %lld name", (long long)i);
    if (!rd_str(c, &t->name, GGUF_MAX_NAME, what)) return false;
    printable(name, sizeof(name), t->name.p, t->name.len);
    if (index_lookup(&g->tensor_index, &g->tensors[0].name, sizeof(ob_gguf_tensor), t->name.p,
                     t->name.len, i) >= 0) {
        return cfail(c, OB_ERR_FORMAT, "gguf: duplicate tensor name '%s'", name);
    }
    snprintf(what, sizeof(what), "tensor '%s' info", name);
    uint32_t n_dims;
    if (!rd_u32(c, &n_dims, what)) return false;
    if (n_dims > GGUF_MAX_DIMS) {
        return cfail(c, OB_ERR_FORMAT, "gguf: tensor '%s' has %u dimensions (max %d)",
                name, n_dims, GGUF_MAX_DIMS);
    }
    t->n_dims = (int)n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne;
        if (!rd_u64(c, &ne, what)) return false;
        if (ne == 0 || ne > (uint64_t)INT64_MAX) {
            return cfail(c, OB_ERR_FORMAT, "gguf: tensor '%s' dimension %u is %lld (must be > 0)",
                    name, d, (long long)ne);
        }
        t->ne[d] = (int64_t)ne;
    }
    uint32_t type;
    if (!rd_u32(c, &type, what) || !rd_u64(c, &t->offset, what)) return false;
    const ob_type_traits *tr = ob_type_traits_get((ob_type)type);
    if (!tr || tr->block_size <= 0 || tr->type_size == 0) {
        return cfail(c, OB_ERR_UNSUPPORTED, "gguf: tensor '%s' has unknown type id %u", name, type);
    }
    t->type = (ob_type)type;
    if (t->ne[0] % tr->block_size != 0) {
        return cfail(c, OB_ERR_FORMAT,
                "gguf: tensor '%s' row of %lld elements is not a multiple of the %s block size %lld",
                name, (long long)t->ne[0], tr->name, (long long)tr->block_size);
    }
    /* Elements and bytes must fit: the product of ne in int64, the size in size_t. */
    int64_t nel = 1;
    size_t size = (size_t)(t->ne[0] / tr->block_size);
    bool ok = !__builtin_mul_overflow(size, tr->type_size, &size);
    for (int d = 0; d < GGUF_MAX_DIMS; d++) ok = ok && !__builtin_mul_overflow(nel, t->ne[d], &nel);
    for (int d = 1; d < GGUF_MAX_DIMS; d++) ok = ok && ob_mul_ok(size, (size_t)t->ne[d], &size);
    if (!ok) {
        return cfail(c, OB_ERR_FORMAT, "gguf: tensor '%s' shape [%lld, %lld, %lld, %lld] overflows",
                name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    }
    t->size = size;
    return true;
}

/* Checks tensor offsets against the data section and sets the data pointers. */
static bool place_tensors(cursor *c, ob_gguf *g) {
    char name[96];
    for (int64_t i = 0; i < g->n_tensors; i++) {
        ob_gguf_tensor *t = &g->tensors[i];
        printable(name, sizeof(name), t->name.p, t->name.len);
        if (t->offset % g->alignment != 0) {
            return cfail(c, OB_ERR_FORMAT,
                    "gguf: tensor '%s' offset %llu is not a multiple of the alignment %zu", name,
                    (unsigned long long)t->offset, g->alignment);
        }
        size_t start, end;
        if (!ob_add_ok((size_t)g->data_offset, (size_t)t->offset, &start) || !ob_add_ok(start, t->size, &end) ||
            g->data_offset > g->len || end > g->len) {
            return cfail(c, OB_ERR_FORMAT,
                    "gguf: tensor '%s' data [%llu, %llu) beyond file size %zu", name,
                    (unsigned long long)g->data_offset + t->offset,
                    (unsigned long long)g->data_offset + t->offset + t->size, g->len);
        }
        t->data = g->base + start;
    }
    return true;
}

/* Copies a validated string view into the arena, NUL-terminated. */
static bool own_str(arena *a, ob_gguf_str *s) {
    char *p = arena_alloc(a, (size_t)s->len + 1);
    if (!p) return false;
    memcpy(p, s->p, (size_t)s->len);
    p[s->len] = 0;
    s->p = p;
    return true;
}

/* After validation: gives every key, string value, string array and tensor name an owned
 * NUL-terminated copy. String arrays are re-walked from the file (already checked). */
static bool materialise(ob_gguf *g) {
    for (int64_t i = 0; i < g->n_kv; i++) {
        ob_gguf_kv *kv = &g->kv[i];
        if (!own_str(&g->strings, &kv->key)) return false;
        if (kv->type == OB_GGUF_STRING && !own_str(&g->strings, &kv->v.str)) return false;
        if (kv->type != OB_GGUF_ARRAY || kv->arr_type != OB_GGUF_STRING) continue;
        const uint8_t *p = kv->arr;
        kv->arr = NULL;
        kv->arr_str = arena_alloc(&g->strings, (size_t)OB_MAX(kv->n, 1) * sizeof(ob_gguf_str));
        if (!kv->arr_str) return false;
        for (uint64_t j = 0; j < kv->n; j++) {
            ob_gguf_str *e = &kv->arr_str[j];
            memcpy(&e->len, p, 8);
            e->p = (char *)(p + 8);
            p += 8 + e->len;
            if (!own_str(&g->strings, e)) return false;
        }
    }
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (!own_str(&g->strings, &g->tensors[i].name)) return false;
    return true;
}

static ob_status parse(ob_gguf *g, char *err, size_t err_len) {
    cursor cur = {g->base, g->len, 0, err, err_len, OB_OK}, *c = &cur;
    if (g->len < 4 || memcmp(g->base, GGUF_MAGIC, 4) != 0) {
        return ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: not a GGUF file (bad magic)");
    }
    c->pos = 4;
    uint32_t version;
    if (!rd_u32(c, &version, "version")) return c->st;
    if (version == 1) {
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED,
                       "gguf: version 1 files are not supported (re-convert the model)");
    }
    if (version == 0x02000000u || version == 0x03000000u) {
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "gguf: big-endian files are not supported");
    }
    if (version != 2 && version != 3) {
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "gguf: unsupported version %u (expected 2 or 3)", version);
    }
    g->version = version;
    uint64_t n_tensors, n_kv;
    if (!rd_u64(c, &n_tensors, "tensor count") || !rd_u64(c, &n_kv, "key count")) return c->st;
    size_t left = c->len - c->pos;
    if (n_kv > GGUF_MAX_KV || n_kv > left / GGUF_MIN_KV_BYTES) {
        return ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: key count %llu is impossible for a %zu-byte file",
                       (unsigned long long)n_kv, g->len);
    }
    if (n_tensors > GGUF_MAX_TENSORS || n_tensors > left / GGUF_MIN_TI_BYTES) {
        return ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: tensor count %llu is impossible for a %zu-byte file",
                       (unsigned long long)n_tensors, g->len);
    }
    g->kv = calloc((size_t)OB_MAX(n_kv, 1), sizeof(*g->kv));
    g->tensors = calloc((size_t)OB_MAX(n_tensors, 1), sizeof(*g->tensors));
    if (!g->kv || !g->tensors || !index_init(&g->kv_index, (int64_t)n_kv) ||
        !index_init(&g->tensor_index, (int64_t)n_tensors)) {
        return ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: out of memory");
    }
    for (uint64_t i = 0; i < n_kv; i++) {
        if (!read_kv(c, g, (int64_t)i)) return c->st;
        g->n_kv = (int64_t)i + 1;
    }
    if (!read_alignment(c, g)) return c->st;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (!read_tensor_info(c, g, (int64_t)i)) return c->st;
        g->n_tensors = (int64_t)i + 1;
    }
    /* A file without tensors may end before the padding; the data section is then empty. */
    g->data_offset = ((uint64_t)c->pos + g->alignment - 1) / g->alignment * g->alignment;
    if (!place_tensors(c, g)) return c->st;
    if (!materialise(g)) return ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: out of memory copying strings");
    return OB_OK;
}

static ob_gguf *gguf_alloc(const void *buf, size_t len) {
    ob_gguf *g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->base = buf;
    g->len = len;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    return g;
}

ob_status ob_gguf_open_mem(const void *buf, size_t len, ob_gguf **out, char *err, size_t err_len) {
    *out = NULL;
    if (!buf && len) return ob_fail(err, err_len, OB_ERR_ARG, "gguf: NULL buffer");
    ob_gguf *g = gguf_alloc(buf ? buf : "", len);
    if (!g) return ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: out of memory");
    ob_status st = parse(g, err, err_len);
    if (st != OB_OK) {
        ob_gguf_close(g);
        return st;
    }
    *out = g;
    return OB_OK;
}

static ob_status open_one(const char *path, ob_gguf **out, char *err, size_t err_len) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ob_fail(err, err_len, OB_ERR_IO, "gguf: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ob_fail(err, err_len, OB_ERR_IO, "gguf: '%s' is not a regular file", path);
    }
    if (st.st_size < 4) {
        close(fd);
        return ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: '%s' is too small (%lld bytes) to be a GGUF file",
                       path, (long long)st.st_size);
    }
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int mmap_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        return ob_fail(err, err_len, OB_ERR_IO, "gguf: cannot map '%s': %s", path, strerror(mmap_errno));
    }
    ob_gguf *g = gguf_alloc(map, len);
    if (!g) {
        munmap(map, len);
        return ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: out of memory");
    }
    g->map = map;
    ob_status s = parse(g, err, err_len);
    if (s != OB_OK) {
        ob_gguf_close(g);
        return s;
    }
    *out = g;
    return OB_OK;
}

/* ---- split models (llama.cpp's gguf-split: NAME-00001-of-0000N.gguf ...) ----
 * The first file carries every key plus split.no = 0, split.count = N and
 * split.tensors.count; each file carries its own tensors. Opening the first file opens the
 * rest beside it and lists every tensor in one table, so a split model loads as one. */

static bool split_key(const ob_gguf *g, const char *key, uint32_t *v) {
    return ob_gguf_find_kv(g, key) && ob_gguf_get_u32(g, key, v);
}

/* path's part number i (1-based) of n: the stem before "-00001-of-0000N.gguf" with i. */
static bool part_path(const char *path, int i, int n, char *out, size_t cap) {
    size_t len = strlen(path);
    const size_t tail = strlen("-00001-of-00001.gguf");
    if (len < tail) return false;
    int a = 0, b = 0;
    char end[8];
    if (sscanf(path + len - tail, "-%5d-of-%5d%7s", &a, &b, end) != 3 || strcmp(end, ".gguf") || a != 1 || b != n)
        return false;
    int w = snprintf(out, cap, "%.*s-%05d-of-%05d.gguf", (int)(len - tail), path, i, n);
    return w > 0 && (size_t)w < cap;
}

static ob_status open_split(ob_gguf *g, const char *path, uint32_t n, char *err, size_t err_len) {
    uint32_t no = 0, want = 0;
    if (!split_key(g, "split.no", &no) || no != 0)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: '%s' is part %u of a split model: open its first part",
                       path, no + 1);
    if (n > 4096) return ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: '%s': split.count %u is impossible", path, n);
    char *pp = malloc(strlen(path) + 32);
    g->parts = calloc(n, sizeof(*g->parts));
    if (!pp || !g->parts) {
        free(pp);
        return ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: out of memory");
    }
    ob_status st = OB_OK;
    int64_t total = g->n_tensors;
    g->total_len = g->len;
    for (uint32_t i = 1; i < n && !st; i++) {
        if (!part_path(path, (int)i + 1, (int)n, pp, strlen(path) + 32)) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT,
                         "gguf: '%s' says it is split in %u files but is not named NAME-00001-of-%05u.gguf", path, n, n);
            break;
        }
        ob_gguf *q;
        if ((st = open_one(pp, &q, err, err_len))) break;
        g->parts[g->n_parts++] = q;
        uint32_t qno = 0, qn = 0;
        if (!split_key(q, "split.no", &qno) || !split_key(q, "split.count", &qn) || qno != i || qn != n) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: '%s' is not part %u of %u (split.no / split.count)", pp,
                         i + 1, n);
            break;
        }
        total += q->n_tensors;
        g->total_len += q->len;
    }
    free(pp);
    if (st) return st;
    if (split_key(g, "split.tensors.count", &want) && (int64_t)want != total)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: '%s': split.tensors.count is %u but the %u files hold %lld",
                       path, want, n, (long long)total);
    /* one table: this file's tensors, then each part's (names stay in the part's arena) */
    ob_gguf_tensor *t = realloc(g->tensors, (size_t)OB_MAX(total, 1) * sizeof(*t));
    if (!t) return ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: out of memory");
    g->tensors = t;
    free(g->tensor_index.slot);
    if (!index_init(&g->tensor_index, total)) return ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: out of memory");
    int64_t k = g->n_tensors;
    for (int p = 0; p < g->n_parts; p++)
        for (int64_t j = 0; j < g->parts[p]->n_tensors; j++) t[k++] = g->parts[p]->tensors[j];
    for (int64_t i = 0; i < total; i++) {
        if (index_lookup(&g->tensor_index, &t[0].name, sizeof(*t), t[i].name.p, t[i].name.len, i) >= 0) {
            char name[96];
            return ob_fail(err, err_len, OB_ERR_FORMAT, "gguf: tensor '%s' is in two parts of '%s'",
                           printable(name, sizeof(name), t[i].name.p, t[i].name.len), path);
        }
    }
    g->n_tensors = total;
    return OB_OK;
}

ob_status ob_gguf_open(const char *path, ob_gguf **out, char *err, size_t err_len) {
    ob_gguf *g;
    ob_status st = open_one(path, &g, err, err_len);
    if (st) return st;
    uint32_t n = 0;
    if (split_key(g, "split.count", &n) && n > 1 && (st = open_split(g, path, n, err, err_len))) {
        ob_gguf_close(g);
        return st;
    }
    *out = g;
    return OB_OK;
}

void ob_gguf_close(ob_gguf *g) {
    if (!g) return;
    for (int i = 0; i < g->n_parts; i++) ob_gguf_close(g->parts[i]);
    free(g->parts);
    if (g->map) munmap(g->map, g->len);
    arena_free(&g->strings);
    free(g->kv);
    free(g->tensors);
    free(g->kv_index.slot);
    free(g->tensor_index.slot);
    free(g);
}

uint32_t ob_gguf_version(const ob_gguf *g) { return g->version; }
size_t ob_gguf_alignment(const ob_gguf *g) { return g->alignment; }
uint64_t ob_gguf_file_size(const ob_gguf *g) { return g->n_parts ? g->total_len : g->len; }
int64_t ob_gguf_n_kv(const ob_gguf *g) { return g->n_kv; }
int64_t ob_gguf_n_tensors(const ob_gguf *g) { return g->n_tensors; }

const ob_gguf_kv *ob_gguf_kv_at(const ob_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const ob_gguf_tensor *ob_gguf_tensor_at(const ob_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const ob_gguf_kv *ob_gguf_find_kv(const ob_gguf *g, const char *key) {
    if (!g || !key) return NULL;
    int64_t i = index_lookup(&g->kv_index, &g->kv[0].key, sizeof(ob_gguf_kv), key,
                             strlen(key), -1);
    return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const ob_gguf_tensor *ob_gguf_find_tensor(const ob_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    int64_t i = index_lookup(&g->tensor_index, &g->tensors[0].name, sizeof(ob_gguf_tensor),
                             name, strlen(name), -1);
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

/* Integer value of a scalar kv: false for non-integers and u64 values above INT64_MAX. */
static bool scalar_i64(const ob_gguf_kv *kv, int64_t *out) {
    if (!kv || kv->type == OB_GGUF_ARRAY) return false;
    if (is_signed(kv->type)) { *out = kv->v.i64; return true; }
    if (is_unsigned(kv->type) && kv->v.u64 <= (uint64_t)INT64_MAX) { *out = (int64_t)kv->v.u64; return true; }
    return false;
}

bool ob_gguf_get_u32(const ob_gguf *g, const char *key, uint32_t *out) {
    int64_t v;
    if (!scalar_i64(ob_gguf_find_kv(g, key), &v) || v < 0 || v > (int64_t)UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

bool ob_gguf_get_i64(const ob_gguf *g, const char *key, int64_t *out) {
    return scalar_i64(ob_gguf_find_kv(g, key), out);
}

bool ob_gguf_get_f32(const ob_gguf *g, const char *key, float *out) {
    const ob_gguf_kv *kv = ob_gguf_find_kv(g, key);
    int64_t v;
    if (kv && is_float(kv->type)) { *out = (float)kv->v.f64; return true; }
    if (scalar_i64(kv, &v)) { *out = (float)v; return true; }
    return false;
}

bool ob_gguf_get_bool(const ob_gguf *g, const char *key, bool *out) {
    const ob_gguf_kv *kv = ob_gguf_find_kv(g, key);
    if (!kv || kv->type != OB_GGUF_BOOL) return false;
    *out = kv->v.b;
    return true;
}

const char *ob_gguf_get_str(const ob_gguf *g, const char *key) {
    const ob_gguf_kv *kv = ob_gguf_find_kv(g, key);
    return kv && kv->type == OB_GGUF_STRING ? kv->v.str.p : NULL;
}

/* Element i of a numeric array, decoded into a scratch kv. */
static bool arr_elem(const ob_gguf_kv *kv, uint64_t i, ob_gguf_kv *tmp) {
    if (!kv || kv->type != OB_GGUF_ARRAY || !kv->arr || i >= kv->n) return false;
    size_t sz = scalar_size(kv->arr_type);
    if (!sz) return false;
    memset(tmp, 0, sizeof(*tmp));
    decode_scalar(kv->arr_type, (const uint8_t *)kv->arr + i * sz, tmp);
    return true;
}

bool ob_gguf_arr_i64(const ob_gguf_kv *kv, uint64_t i, int64_t *out) {
    ob_gguf_kv e;
    if (!arr_elem(kv, i, &e)) return false;
    if (is_signed(kv->arr_type)) *out = e.v.i64;
    else if (is_unsigned(kv->arr_type) && e.v.u64 <= (uint64_t)INT64_MAX) *out = (int64_t)e.v.u64;
    else if (kv->arr_type == OB_GGUF_BOOL) *out = e.v.b;
    else return false;
    return true;
}

bool ob_gguf_arr_f32(const ob_gguf_kv *kv, uint64_t i, float *out) {
    ob_gguf_kv e;
    if (!arr_elem(kv, i, &e)) return false;
    if (is_float(kv->arr_type)) *out = (float)e.v.f64;
    else if (is_signed(kv->arr_type)) *out = (float)e.v.i64;
    else if (is_unsigned(kv->arr_type)) *out = (float)e.v.u64;
    else return false;
    return true;
}

/* ---- writer ---- */

/* A key is kept serialised (type tag + value bytes, as in the file): setters, copy_kv
 * and the writer then share one encoding path. */
typedef struct wkv {
    char *key;
    uint64_t key_len;
    uint8_t *val;  /* [val_len] u32 type, then the value */
    size_t val_len;
} wkv;

typedef struct wtensor {
    char *name;
    ob_type type;
    int n_dims;
    int64_t ne[4];
    size_t size;
    const void *data;      /* borrowed, or NULL when fill is set */
    ob_gguf_fill_fn fill;
    void *ctx;
} wtensor;

struct ob_gguf_writer {
    uint32_t version;
    size_t alignment;
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    bool oom;  /* a void setter failed to allocate: reported by ob_gguf_writer_write */
};

ob_gguf_writer *ob_gguf_writer_new(uint32_t version, size_t alignment) {
    if (version != 2 && version != 3) return NULL;
    if (alignment == 0) alignment = GGUF_DEFAULT_ALIGNMENT;
    if ((alignment & (alignment - 1)) != 0 || alignment > (1u << 30)) return NULL;
    ob_gguf_writer *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->version = version;
    w->alignment = alignment;
    return w;
}

void ob_gguf_writer_free(ob_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* Growable byte buffer for serialising one value. */
typedef struct bytes { uint8_t *p; size_t len, cap; bool oom; } bytes;

static void put(bytes *b, const void *src, size_t n) {
    if (b->oom) return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) { b->oom = true; return; }
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void put_u32(bytes *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(bytes *b, uint64_t v) { put(b, &v, 8); }
static void put_str(bytes *b, const char *s, uint64_t len) {
    put_u64(b, len);
    put(b, s, (size_t)len);
}

/* Takes ownership of b's bytes as the value of key (replacing an existing one). */
static void set_raw(ob_gguf_writer *w, const char *key, uint64_t key_len, bytes *b) {
    if (!w) { free(b->p); return; }
    if (b->oom || !key) { free(b->p); w->oom = true; return; }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (w->kv[i].key_len == key_len && memcmp(w->kv[i].key, key, key_len) == 0) {
            free(w->kv[i].val);
            w->kv[i].val = b->p;
            w->kv[i].val_len = b->len;
            return;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        wkv *p = realloc(w->kv, cap * sizeof(*p));
        if (!p) { free(b->p); w->oom = true; return; }
        w->kv = p;
        w->cap_kv = cap;
    }
    char *k = malloc((size_t)key_len + 1);
    if (!k) { free(b->p); w->oom = true; return; }
    memcpy(k, key, (size_t)key_len);
    k[key_len] = 0;
    w->kv[w->n_kv++] = (wkv){k, key_len, b->p, b->len};
}

static void set_scalar(ob_gguf_writer *w, const char *key, ob_gguf_type t, const void *v, size_t n) {
    bytes b = {0};
    put_u32(&b, (uint32_t)t);
    put(&b, v, n);
    set_raw(w, key, key ? strlen(key) : 0, &b);
}

void ob_gguf_set_u8(ob_gguf_writer *w, const char *key, uint8_t v) { set_scalar(w, key, OB_GGUF_UINT8, &v, 1); }
void ob_gguf_set_i8(ob_gguf_writer *w, const char *key, int8_t v) { set_scalar(w, key, OB_GGUF_INT8, &v, 1); }
void ob_gguf_set_u16(ob_gguf_writer *w, const char *key, uint16_t v) { set_scalar(w, key, OB_GGUF_UINT16, &v, 2); }
void ob_gguf_set_i16(ob_gguf_writer *w, const char *key, int16_t v) { set_scalar(w, key, OB_GGUF_INT16, &v, 2); }
void ob_gguf_set_u32(ob_gguf_writer *w, const char *key, uint32_t v) { set_scalar(w, key, OB_GGUF_UINT32, &v, 4); }
void ob_gguf_set_i32(ob_gguf_writer *w, const char *key, int32_t v) { set_scalar(w, key, OB_GGUF_INT32, &v, 4); }
void ob_gguf_set_u64(ob_gguf_writer *w, const char *key, uint64_t v) { set_scalar(w, key, OB_GGUF_UINT64, &v, 8); }
void ob_gguf_set_i64(ob_gguf_writer *w, const char *key, int64_t v) { set_scalar(w, key, OB_GGUF_INT64, &v, 8); }
void ob_gguf_set_f32(ob_gguf_writer *w, const char *key, float v) { set_scalar(w, key, OB_GGUF_FLOAT32, &v, 4); }
void ob_gguf_set_f64(ob_gguf_writer *w, const char *key, double v) { set_scalar(w, key, OB_GGUF_FLOAT64, &v, 8); }

void ob_gguf_set_bool(ob_gguf_writer *w, const char *key, bool v) {
    uint8_t x = v ? 1 : 0;
    set_scalar(w, key, OB_GGUF_BOOL, &x, 1);
}

void ob_gguf_set_strn(ob_gguf_writer *w, const char *key, const char *v, uint64_t len) {
    bytes b = {0};
    put_u32(&b, OB_GGUF_STRING);
    if (!v && len) b.oom = true;
    else put_str(&b, v ? v : "", len);
    set_raw(w, key, key ? strlen(key) : 0, &b);
}

void ob_gguf_set_str(ob_gguf_writer *w, const char *key, const char *v) {
    ob_gguf_set_strn(w, key, v, v ? strlen(v) : 0);
}

static void set_arr_key(ob_gguf_writer *w, const char *key, uint64_t key_len, ob_gguf_type et,
                        const void *data, uint64_t n) {
    bytes b = {0};
    size_t esize = scalar_size(et), total;
    if (!esize || !ob_mul_ok(esize, (size_t)n, &total) || (!data && n)) {
        b.oom = true; /* an invalid element type is reported as a failed write */
    } else {
        put_u32(&b, OB_GGUF_ARRAY);
        put_u32(&b, (uint32_t)et);
        put_u64(&b, n);
        put(&b, data, total);
    }
    set_raw(w, key, key_len, &b);
}

void ob_gguf_set_arr(ob_gguf_writer *w, const char *key, ob_gguf_type elem_type, const void *data, uint64_t n) {
    set_arr_key(w, key, key ? strlen(key) : 0, elem_type, data, n);
}

static void set_arr_str_key(ob_gguf_writer *w, const char *key, uint64_t key_len, const ob_gguf_str *s,
                            const char *const *strs, const uint64_t *lens, uint64_t n) {
    bytes b = {0};
    put_u32(&b, OB_GGUF_ARRAY);
    put_u32(&b, OB_GGUF_STRING);
    put_u64(&b, n);
    for (uint64_t i = 0; i < n && !b.oom; i++) {
        if (s) put_str(&b, s[i].p, s[i].len);
        else if (!strs || !strs[i]) b.oom = true;
        else put_str(&b, strs[i], lens ? lens[i] : strlen(strs[i]));
    }
    set_raw(w, key, key_len, &b);
}

void ob_gguf_set_arr_str(ob_gguf_writer *w, const char *key, const char *const *strs, const uint64_t *lens,
                         uint64_t n) {
    set_arr_str_key(w, key, key ? strlen(key) : 0, NULL, strs, lens, n);
}

void ob_gguf_copy_kv(ob_gguf_writer *w, const ob_gguf *g) {
    if (!w || !g) return;
    for (int64_t i = 0; i < g->n_kv; i++) {
        const ob_gguf_kv *kv = &g->kv[i];
        const char *k = kv->key.p;
        uint64_t kl = kv->key.len;
        if (kv->type == OB_GGUF_ARRAY && kv->arr_type == OB_GGUF_STRING) {
            set_arr_str_key(w, k, kl, kv->arr_str, NULL, NULL, kv->n);
        } else if (kv->type == OB_GGUF_ARRAY) {
            set_arr_key(w, k, kl, kv->arr_type, kv->arr, kv->n);
        } else {
            bytes b = {0};
            put_u32(&b, (uint32_t)kv->type);
            if (kv->type == OB_GGUF_STRING) {
                put_str(&b, kv->v.str.p, kv->v.str.len);
            } else {
                /* Re-encode the widened value at its original width (little-endian). */
                uint8_t raw[8];
                uint64_t u = kv->v.u64;
                if (kv->type == OB_GGUF_FLOAT32) { float f = (float)kv->v.f64; memcpy(&u, &f, 4); }
                else if (kv->type == OB_GGUF_BOOL) u = kv->v.b;
                memcpy(raw, &u, 8);
                put(&b, raw, scalar_size(kv->type));
            }
            set_raw(w, k, kl, &b);
        }
    }
}

static ob_status add_tensor(ob_gguf_writer *w, const char *name, ob_type type, int n_dims, const int64_t *ne,
                            const void *data, ob_gguf_fill_fn fill, void *ctx, char *err, size_t err_len) {
    if (!w || !name || (n_dims > 0 && !ne)) return ob_fail(err, err_len, OB_ERR_ARG, "gguf: NULL argument");
    char pname[96];
    printable(pname, sizeof(pname), name, strlen(name));
    if (n_dims < 0 || n_dims > GGUF_MAX_DIMS) {
        return ob_fail(err, err_len, OB_ERR_ARG, "gguf: tensor '%s' has %d dimensions (max 4)", pname, n_dims);
    }
    const ob_type_traits *tr = ob_type_traits_get(type);
    if (!tr || tr->block_size <= 0 || tr->type_size == 0) {
        return ob_fail(err, err_len, OB_ERR_ARG, "gguf: tensor '%s' has unknown type id %d", pname, (int)type);
    }
    wtensor t = {0};
    t.type = type;
    t.n_dims = n_dims;
    for (int d = 0; d < 4; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] <= 0) {
            return ob_fail(err, err_len, OB_ERR_ARG, "gguf: tensor '%s' dimension %d is %lld", pname, d,
                           (long long)ne[d]);
        }
    }
    if (t.ne[0] % tr->block_size != 0) {
        return ob_fail(err, err_len, OB_ERR_ARG,
                       "gguf: tensor '%s' row of %lld is not a multiple of the %s block size %lld", pname,
                       (long long)t.ne[0], tr->name, (long long)tr->block_size);
    }
    size_t size = (size_t)(t.ne[0] / tr->block_size);
    bool ok = ob_mul_ok(size, tr->type_size, &size);
    for (int d = 1; d < 4; d++) ok = ok && ob_mul_ok(size, (size_t)t.ne[d], &size);
    if (!ok) return ob_fail(err, err_len, OB_ERR_ARG, "gguf: tensor '%s' is too large", pname);
    for (size_t i = 0; i < w->n_t; i++) {
        if (strcmp(w->t[i].name, name) == 0) {
            return ob_fail(err, err_len, OB_ERR_ARG, "gguf: duplicate tensor name '%s'", pname);
        }
    }
    if (!data && !fill && size) return ob_fail(err, err_len, OB_ERR_ARG, "gguf: tensor '%s' has no data", pname);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 32;
        wtensor *p = realloc(w->t, cap * sizeof(*p));
        if (!p) return ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: out of memory");
        w->t = p;
        w->cap_t = cap;
    }
    t.name = strdup(name);
    if (!t.name) return ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: out of memory");
    t.size = size;
    t.data = data;
    t.fill = fill;
    t.ctx = ctx;
    w->t[w->n_t++] = t;
    return OB_OK;
}

ob_status ob_gguf_add_tensor(ob_gguf_writer *w, const char *name, ob_type type, int n_dims, const int64_t *ne,
                             const void *data, char *err, size_t err_len) {
    return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL, err, err_len);
}

ob_status ob_gguf_add_tensor_fn(ob_gguf_writer *w, const char *name, ob_type type, int n_dims,
                                const int64_t *ne, ob_gguf_fill_fn fill, void *ctx, char *err,
                                size_t err_len) {
    if (!fill) return ob_fail(err, err_len, OB_ERR_ARG, "gguf: NULL fill function");
    return add_tensor(w, name, type, n_dims, ne, NULL, fill, ctx, err, err_len);
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static bool write_all(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n; }

static bool write_pad(FILE *f, size_t pos, size_t a) {
    static const uint8_t zeros[256];
    size_t n = align_up(pos, a) - pos;
    while (n) {
        size_t k = OB_MIN(n, sizeof(zeros));
        if (!write_all(f, zeros, k)) return false;
        n -= k;
    }
    return true;
}

/* Serialises everything before the data section: header, keys, tensor infos. */
static bool write_header(ob_gguf_writer *w, bytes *b) {
    put(b, GGUF_MAGIC, 4);
    put_u32(b, w->version);
    put_u64(b, w->n_t);
    put_u64(b, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(b, w->kv[i].key, w->kv[i].key_len);
        put(b, w->kv[i].val, w->kv[i].val_len);
    }
    size_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(b, t->name, strlen(t->name));
        put_u32(b, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_u64(b, (uint64_t)t->ne[d]);
        put_u32(b, (uint32_t)t->type);
        put_u64(b, off);
        if (!ob_add_ok(off, t->size, &off)) return false;
        off = align_up(off, w->alignment);
    }
    return !b->oom;
}

ob_status ob_gguf_writer_write(ob_gguf_writer *w, const char *path, char *err, size_t err_len) {
    if (!w || !path) return ob_fail(err, err_len, OB_ERR_ARG, "gguf: NULL argument");
    if (w->oom) return ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: a metadata value could not be stored");
    /* The alignment key must agree with the layout we write. */
    const char *akey = "general.alignment";
    bool has_akey = false;
    for (size_t i = 0; i < w->n_kv; i++) has_akey |= strcmp(w->kv[i].key, akey) == 0;
    if (has_akey || w->alignment != GGUF_DEFAULT_ALIGNMENT) {
        ob_gguf_set_u32(w, akey, (uint32_t)w->alignment);
        if (w->oom) return ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: out of memory");
    }
    bytes hdr = {0};
    if (!write_header(w, &hdr)) {
        free(hdr.p);
        return ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: out of memory serialising the header");
    }
    size_t plen = strlen(path) + 5;
    char *tmp = malloc(plen);
    if (!tmp) {
        free(hdr.p);
        return ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: out of memory");
    }
    snprintf(tmp, plen, "%s.tmp", path);
    ob_status st = OB_OK;
    void *buf = NULL;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        st = ob_fail(err, err_len, OB_ERR_IO, "gguf: cannot create '%s': %s", tmp, strerror(errno));
        goto done;
    }
    size_t pos = hdr.len;
    if (!write_all(f, hdr.p, hdr.len) || !write_pad(f, pos, w->alignment)) goto io_error;
    pos = align_up(pos, w->alignment);
    size_t buf_cap = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        const void *src = t->data;
        if (t->fill) {
            if (t->size > buf_cap) {
                free(buf);
                buf = malloc(t->size);
                buf_cap = buf ? t->size : 0;
                if (!buf) {
                    st = ob_fail(err, err_len, OB_ERR_NOMEM, "gguf: out of memory for tensor '%s' (%zu bytes)",
                                 t->name, t->size);
                    goto close_error;
                }
            }
            if (!t->fill(t->ctx, (int64_t)i, buf, t->size)) {
                st = ob_fail(err, err_len, OB_ERR_IO, "gguf: producing the data of tensor '%s' failed", t->name);
                goto close_error;
            }
            src = buf;
        }
        if (!write_all(f, src, t->size) || !write_pad(f, pos + t->size, w->alignment)) goto io_error;
        pos = align_up(pos + t->size, w->alignment);
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) goto io_error;
    if (fclose(f) != 0) {
        f = NULL;
        goto io_error;
    }
    f = NULL;
    if (rename(tmp, path) != 0) {
        st = ob_fail(err, err_len, OB_ERR_IO, "gguf: cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        remove(tmp);
    }
    goto done;
io_error:
    st = ob_fail(err, err_len, OB_ERR_IO, "gguf: writing '%s' failed: %s", tmp, strerror(errno));
close_error:
    if (f) fclose(f);
    remove(tmp);
done:
    free(buf);
    free(tmp);
    free(hdr.p);
    return st;
}
