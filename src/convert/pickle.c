/* PyTorch checkpoints (pytorch_model.bin, torch.save's zip format): a zip (entries stored,
 * not compressed) holding <name>/data.pkl and one entry <name>/data/<key> per storage.
 *
 * data.pkl is read by a restricted pickle machine: it knows the opcodes that build plain
 * data (dicts, lists, tuples, strings, numbers) and exactly four callables, the ones that
 * rebuild tensors (collections.OrderedDict, torch._utils._rebuild_tensor_v2 and
 * _rebuild_parameter, and the torch.*Storage types as persistent-id tags). Any other global,
 * and every opcode that could instantiate an arbitrary class, is refused by name before
 * anything is called: loading never runs code from the file. */
#include "convert/convert.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PK_MAX_OPS (50u << 20)
#define PK_MAX_STACK (1u << 20)
#define PK_MAX_MEMO (1u << 22)
#define PK_MAX_ITEMS (1u << 24)

/* ---- zip (stored entries, zip64 aware) ------------------------------------------------ */

typedef struct zip_entry { const char *name; size_t name_len; const unsigned char *data; uint64_t size; } zip_entry;
typedef struct zip { zip_entry *e; int64_t n; } zip;

static uint64_t rd(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static ob_status zip_open(zip *z, const unsigned char *b, size_t len, const char *path, char *err, size_t err_len) {
    if (len < 22) return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: not a zip file (too short)", path);
    size_t eocd = 0;
    bool found = false;
    for (size_t i = len - 22 + 1; i-- > 0 && len - i <= 22 + 65535;)
        if (rd(b + i, 4) == 0x06054b50) { eocd = i; found = true; break; }
    if (!found) return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: not a zip file (legacy PyTorch pickles are not supported)", path);
    uint64_t n = rd(b + eocd + 10, 2), cd_size = rd(b + eocd + 12, 4), cd_off = rd(b + eocd + 16, 4);
    if ((n == 0xffff || cd_off == 0xffffffffu) && eocd >= 20 && rd(b + eocd - 20, 4) == 0x07064b50) {
        uint64_t z64 = rd(b + eocd - 20 + 8, 8);
        if (z64 > len - 56 || rd(b + z64, 4) != 0x06064b50) return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: bad zip64 record", path);
        n = rd(b + z64 + 32, 8); cd_size = rd(b + z64 + 40, 8); cd_off = rd(b + z64 + 48, 8);
    }
    if (cd_off > len || cd_size > len - cd_off || n > cd_size / 46)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: zip central directory out of bounds", path);
    z->e = calloc((size_t)(n ? n : 1), sizeof(zip_entry));
    if (!z->e) return ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory");
    const unsigned char *p = b + cd_off, *end = b + cd_off + cd_size;
    for (uint64_t i = 0; i < n; i++) {
        if (end - p < 46 || rd(p, 4) != 0x02014b50) return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: bad zip directory entry", path);
        uint64_t method = rd(p + 10, 2), csize = rd(p + 20, 4), usize = rd(p + 24, 4), off = rd(p + 42, 4);
        size_t nl = rd(p + 28, 2), xl = rd(p + 30, 2), cl = rd(p + 32, 2);
        if ((size_t)(end - p) < 46 + nl + xl + cl) return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: bad zip directory entry", path);
        /* zip64 extra field: the 8-byte values of whichever fields were saturated, in order. */
        for (const unsigned char *x = p + 46 + nl, *xe = x + xl; xe - x >= 4;) {
            size_t id = rd(x, 2), sz = rd(x + 2, 2);
            if ((size_t)(xe - x - 4) < sz) break;
            if (id == 1) {
                const unsigned char *v = x + 4, *ve = v + sz;
                if (usize == 0xffffffffu && ve - v >= 8) { usize = rd(v, 8); v += 8; }
                if (csize == 0xffffffffu && ve - v >= 8) { csize = rd(v, 8); v += 8; }
                if (off == 0xffffffffu && ve - v >= 8) { off = rd(v, 8); v += 8; }
            }
            x += 4 + sz;
        }
        zip_entry *e = &z->e[z->n];
        e->name = (const char *)p + 46;
        e->name_len = nl;
        if (off > len - 30 || rd(b + off, 4) != 0x04034b50) return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: bad zip local header", path);
        uint64_t data = off + 30 + rd(b + off + 26, 2) + rd(b + off + 28, 2);
        if (method != 0 || csize != usize)
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "%s: zip entry '%.*s' is compressed (torch.save stores entries)",
                           path, (int)OB_MIN(nl, 200), e->name);
        if (data > len || usize > len - data) return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: zip entry out of bounds", path);
        e->data = b + data;
        e->size = usize;
        z->n++;
        p += 46 + nl + xl + cl;
    }
    return OB_OK;
}

static const zip_entry *zip_find(const zip *z, const char *name, size_t len) {
    for (int64_t i = 0; i < z->n; i++)
        if (z->e[i].name_len == len && !memcmp(z->e[i].name, name, len)) return &z->e[i];
    return NULL;
}

/* ---- the restricted pickle machine ------------------------------------------------------ */

typedef enum { V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_TUPLE, V_LIST, V_DICT, V_GLOBAL, V_STORAGE, V_TENSOR, V_MARK } vkind;
typedef enum { G_ODICT, G_REBUILD_TENSOR, G_REBUILD_PARAM, G_STORAGE } gkind;

typedef struct val val;
struct val {
    vkind k;
    int64_t i;               /* INT, BOOL; GLOBAL: gkind */
    double f;
    const char *s; size_t sl;/* STR (into the pickle bytes or a copy) */
    val **items; int64_t n, cap; /* TUPLE, LIST; DICT: keys and values interleaved */
    char dtype[16];          /* GLOBAL storage type / STORAGE / TENSOR: dtype name */
    const char *key; size_t key_len; /* STORAGE: storage file name */
    int64_t offset, shape[4], stride[4]; int n_dims; /* TENSOR */
};

typedef struct pk {
    val **all; int64_t n_all, cap_all;  /* every value made, freed at the end */
    val **stack; int64_t sp, cap_stack;
    int64_t *marks; int64_t n_marks, cap_marks;
    val **memo; int64_t cap_memo, n_memo;
    char *err; size_t err_len;
    const char *path;
    ob_status st;
} pk;

static bool grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return true;
    int64_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return false;
    memset((char *)q + (size_t)*cap * elem, 0, (size_t)(c - *cap) * elem);
    *p = q;
    *cap = c;
    return true;
}

static bool fail(pk *m, ob_status st, const char *msg, const char *detail) {
    if (!m->st) m->st = ob_fail(m->err, m->err_len, st, "%s: pickle: %s%s", m->path, msg, detail ? detail : "");
    return false;
}

static val *mk(pk *m, vkind k) {
    if (!grow((void **)&m->all, &m->cap_all, m->n_all + 1, sizeof(val *))) { fail(m, OB_ERR_NOMEM, "out of memory", NULL); return NULL; }
    val *v = calloc(1, sizeof(val));
    if (!v) { fail(m, OB_ERR_NOMEM, "out of memory", NULL); return NULL; }
    v->k = k;
    m->all[m->n_all++] = v;
    return v;
}

static bool push(pk *m, val *v) {
    if (!v) return false;
    if (m->sp >= PK_MAX_STACK) return fail(m, OB_ERR_FORMAT, "stack too deep", NULL);
    if (!grow((void **)&m->stack, &m->cap_stack, m->sp + 1, sizeof(val *))) return fail(m, OB_ERR_NOMEM, "out of memory", NULL);
    m->stack[m->sp++] = v;
    return true;
}

static val *pop(pk *m) {
    int64_t floor = m->n_marks ? m->marks[m->n_marks - 1] : 0;
    if (m->sp <= floor) { fail(m, OB_ERR_FORMAT, "stack underflow", NULL); return NULL; }
    return m->stack[--m->sp];
}

static val *top(pk *m) {
    int64_t floor = m->n_marks ? m->marks[m->n_marks - 1] : 0;
    if (m->sp <= floor) { fail(m, OB_ERR_FORMAT, "stack underflow", NULL); return NULL; }
    return m->stack[m->sp - 1];
}

static bool add_item(pk *m, val *c, val *x) {
    if (c->n >= PK_MAX_ITEMS) return fail(m, OB_ERR_FORMAT, "container too large", NULL);
    if (!grow((void **)&c->items, &c->cap, c->n + 1, sizeof(val *))) return fail(m, OB_ERR_NOMEM, "out of memory", NULL);
    c->items[c->n++] = x;
    return true;
}

/* Pops everything down to the last mark into a new container of kind k. */
static val *pop_mark(pk *m, vkind k) {
    if (!m->n_marks) { fail(m, OB_ERR_FORMAT, "no mark", NULL); return NULL; }
    int64_t at = m->marks[--m->n_marks];
    val *c = mk(m, k);
    for (int64_t i = at; c && i < m->sp; i++) if (!add_item(m, c, m->stack[i])) return NULL;
    m->sp = at;
    return c;
}

static val *tuple_n(pk *m, int n) {
    val *c = mk(m, V_TUPLE);
    if (!c) return NULL;
    val *x[3];
    for (int i = n - 1; i >= 0; i--) if (!(x[i] = pop(m))) return NULL;
    for (int i = 0; i < n; i++) if (!add_item(m, c, x[i])) return NULL;
    return c;
}

static const struct { const char *name, *dtype; } g_storages[] = {
    {"FloatStorage", "F32"}, {"HalfStorage", "F16"}, {"BFloat16Storage", "BF16"}, {"DoubleStorage", "F64"},
    {"LongStorage", "I64"}, {"IntStorage", "I32"}, {"ShortStorage", "I16"}, {"CharStorage", "I8"},
    {"ByteStorage", "U8"}, {"BoolStorage", "BOOL"},
};

static size_t dtype_bytes(const char *d) {
    if (!strcmp(d, "F64") || !strcmp(d, "I64")) return 8;
    if (!strcmp(d, "F32") || !strcmp(d, "I32")) return 4;
    if (!strcmp(d, "F16") || !strcmp(d, "BF16") || !strcmp(d, "I16")) return 2;
    return 1;
}

/* The only globals a tensor checkpoint needs; anything else would mean running code. */
static val *global(pk *m, const char *mod, size_t ml, const char *name, size_t nl) {
    char full[256];
    snprintf(full, sizeof(full), "%.*s.%.*s", (int)OB_MIN(ml, 100), mod, (int)OB_MIN(nl, 100), name);
    val *g = NULL;
#define IS(a, b) (ml == strlen(a) && !memcmp(mod, a, ml) && nl == strlen(b) && !memcmp(name, b, nl))
    if (IS("collections", "OrderedDict")) { if ((g = mk(m, V_GLOBAL))) g->i = G_ODICT; }
    else if (IS("torch._utils", "_rebuild_tensor_v2")) { if ((g = mk(m, V_GLOBAL))) g->i = G_REBUILD_TENSOR; }
    else if (IS("torch._utils", "_rebuild_parameter")) { if ((g = mk(m, V_GLOBAL))) g->i = G_REBUILD_PARAM; }
    else {
        for (size_t i = 0; i < OB_ARRAY_LEN(g_storages); i++)
            if (IS("torch", g_storages[i].name) && (g = mk(m, V_GLOBAL))) {
                g->i = G_STORAGE;
                snprintf(g->dtype, sizeof(g->dtype), "%s", g_storages[i].dtype);
            }
    }
#undef IS
    if (!g && !m->st) fail(m, OB_ERR_UNSUPPORTED, "refusing global (it would run code): ", full);
    return g;
}

static bool int_of(const val *v, int64_t *out) {
    if (!v || (v->k != V_INT && v->k != V_BOOL)) return false;
    *out = v->i;
    return true;
}

/* REDUCE of a whitelisted callable. */
static val *reduce(pk *m, val *f, val *args) {
    if (!f || !args || f->k != V_GLOBAL || args->k != V_TUPLE) { fail(m, OB_ERR_UNSUPPORTED, "REDUCE of something that is not a known callable", NULL); return NULL; }
    if (f->i == G_ODICT) return mk(m, V_DICT);
    if (f->i == G_REBUILD_PARAM) {
        if (args->n < 1 || args->items[0]->k != V_TENSOR) { fail(m, OB_ERR_FORMAT, "bad _rebuild_parameter arguments", NULL); return NULL; }
        return args->items[0];
    }
    if (f->i != G_REBUILD_TENSOR) { fail(m, OB_ERR_UNSUPPORTED, "REDUCE of a storage type", NULL); return NULL; }
    /* (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]) */
    if (args->n < 4 || args->items[0]->k != V_STORAGE || args->items[2]->k != V_TUPLE || args->items[3]->k != V_TUPLE ||
        args->items[2]->n != args->items[3]->n || args->items[2]->n > 4) {
        fail(m, OB_ERR_FORMAT, "bad _rebuild_tensor_v2 arguments", NULL);
        return NULL;
    }
    val *t = mk(m, V_TENSOR);
    if (!t) return NULL;
    const val *s = args->items[0];
    memcpy(t->dtype, s->dtype, sizeof(t->dtype));
    t->key = s->key;
    t->key_len = s->key_len;
    t->n_dims = (int)args->items[2]->n;
    if (!int_of(args->items[1], &t->offset)) { fail(m, OB_ERR_FORMAT, "bad tensor offset", NULL); return NULL; }
    for (int d = 0; d < t->n_dims; d++)
        if (!int_of(args->items[2]->items[d], &t->shape[d]) || !int_of(args->items[3]->items[d], &t->stride[d])) {
            fail(m, OB_ERR_FORMAT, "bad tensor shape", NULL);
            return NULL;
        }
    return t;
}

static bool memo_put(pk *m, uint64_t i, val *v) {
    if (!v) return fail(m, OB_ERR_FORMAT, "memo of an empty stack", NULL);
    if (i >= PK_MAX_MEMO) return fail(m, OB_ERR_FORMAT, "memo index too large", NULL);
    if (!grow((void **)&m->memo, &m->cap_memo, (int64_t)i + 1, sizeof(val *))) return fail(m, OB_ERR_NOMEM, "out of memory", NULL);
    if (!m->memo[i]) m->n_memo++;
    m->memo[i] = v;
    return true;
}

static val *memo_get(pk *m, uint64_t i) {
    if ((int64_t)i >= m->cap_memo || !m->memo[i]) { fail(m, OB_ERR_FORMAT, "memo miss", NULL); return NULL; }
    return m->memo[i];
}

static val *str_val(pk *m, const unsigned char *p, size_t n) {
    val *v = mk(m, V_STR);
    if (v) { v->s = (const char *)p; v->sl = n; }
    return v;
}

/* Runs the pickle; returns the value left by STOP. */
static val *run(pk *m, const unsigned char *b, size_t len) {
    size_t i = 0;
    for (uint64_t ops = 0; ops < PK_MAX_OPS && !m->st; ops++) {
        if (i >= len) { fail(m, OB_ERR_FORMAT, "truncated", NULL); return NULL; }
        unsigned char op = b[i++];
        size_t left = len - i;
#define NEED(n) do { if (left < (size_t)(n)) { fail(m, OB_ERR_FORMAT, "truncated", NULL); return NULL; } } while (0)
        switch (op) {
        case 0x80: NEED(1); if (b[i] > 5) { fail(m, OB_ERR_UNSUPPORTED, "protocol above 5", NULL); return NULL; } i++; break; /* PROTO */
        case 0x95: NEED(8); i += 8; break;                               /* FRAME */
        case '.': return pop(m);                                         /* STOP */
        case '(':                                                        /* MARK */
            if (!grow((void **)&m->marks, &m->cap_marks, m->n_marks + 1, sizeof(int64_t))) { fail(m, OB_ERR_NOMEM, "out of memory", NULL); return NULL; }
            m->marks[m->n_marks++] = m->sp;
            break;
        case '}': push(m, mk(m, V_DICT)); break;                         /* EMPTY_DICT */
        case ']': push(m, mk(m, V_LIST)); break;                         /* EMPTY_LIST */
        case ')': push(m, mk(m, V_TUPLE)); break;                        /* EMPTY_TUPLE */
        case 't': push(m, pop_mark(m, V_TUPLE)); break;                  /* TUPLE */
        case 'l': push(m, pop_mark(m, V_LIST)); break;                   /* LIST */
        case 0x85: case 0x86: case 0x87: push(m, tuple_n(m, op - 0x84)); break; /* TUPLE1..3 */
        case 'N': push(m, mk(m, V_NONE)); break;
        case 0x88: case 0x89: { val *v = mk(m, V_BOOL); if (v) v->i = op == 0x88; push(m, v); break; }
        case 'K': { NEED(1); val *v = mk(m, V_INT); if (v) v->i = b[i]; i += 1; push(m, v); break; }
        case 'M': { NEED(2); val *v = mk(m, V_INT); if (v) v->i = (int64_t)rd(b + i, 2); i += 2; push(m, v); break; }
        case 'J': { NEED(4); val *v = mk(m, V_INT); if (v) v->i = (int32_t)rd(b + i, 4); i += 4; push(m, v); break; }
        case 0x8a: {                                                     /* LONG1 */
            NEED(1);
            size_t n = b[i++];
            if (n > 8 || len - i < n) { fail(m, OB_ERR_UNSUPPORTED, "integer too large", NULL); return NULL; }
            uint64_t u = rd(b + i, (int)n);
            if (n && n < 8 && (b[i + n - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * n); /* sign-extend */
            val *v = mk(m, V_INT);
            if (v) v->i = (int64_t)u;
            i += n;
            push(m, v);
            break;
        }
        case 'G': {                                                      /* BINFLOAT (big-endian) */
            NEED(8);
            uint64_t u = 0;
            for (int k = 0; k < 8; k++) u = u << 8 | b[i + k];
            val *v = mk(m, V_FLOAT);
            if (v) memcpy(&v->f, &u, 8);
            i += 8;
            push(m, v);
            break;
        }
        case 'X': case 0x8c: case 'B': case 'C': case 0x8d: case 0x8e: { /* strings and bytes */
            int w = op == 0x8c || op == 'C' ? 1 : op == 0x8d || op == 0x8e ? 8 : 4;
            NEED(w);
            uint64_t n = rd(b + i, w);
            i += (size_t)w;
            if (n > len - i) { fail(m, OB_ERR_FORMAT, "truncated string", NULL); return NULL; }
            push(m, str_val(m, b + i, (size_t)n));
            i += (size_t)n;
            break;
        }
        case 'q': NEED(1); memo_put(m, b[i], top(m)); i += 1; break;    /* BINPUT */
        case 'r': NEED(4); memo_put(m, rd(b + i, 4), top(m)); i += 4; break; /* LONG_BINPUT */
        case 0x94: memo_put(m, (uint64_t)m->n_memo, top(m)); break;    /* MEMOIZE: index = entries so far */
        case 'h': NEED(1); push(m, memo_get(m, b[i])); i += 1; break;   /* BINGET */
        case 'j': NEED(4); push(m, memo_get(m, rd(b + i, 4))); i += 4; break; /* LONG_BINGET */
        case 'c': {                                                      /* GLOBAL "mod\nname\n" */
            const unsigned char *nl1 = memchr(b + i, '\n', left);
            const unsigned char *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(b + len - nl1 - 1)) : NULL;
            if (!nl2) { fail(m, OB_ERR_FORMAT, "truncated GLOBAL", NULL); return NULL; }
            push(m, global(m, (const char *)b + i, (size_t)(nl1 - b - i), (const char *)nl1 + 1, (size_t)(nl2 - nl1 - 1)));
            i = (size_t)(nl2 - b) + 1;
            break;
        }
        case 0x93: {                                                     /* STACK_GLOBAL */
            val *name = pop(m), *mod = pop(m);
            if (!name || !mod || name->k != V_STR || mod->k != V_STR) { fail(m, OB_ERR_FORMAT, "bad STACK_GLOBAL", NULL); return NULL; }
            push(m, global(m, mod->s, mod->sl, name->s, name->sl));
            break;
        }
        case 'Q': {                                                      /* BINPERSID: ('storage', type, key, location, numel) */
            val *pid = pop(m);
            if (!pid || pid->k != V_TUPLE || pid->n < 5 || pid->items[1]->k != V_GLOBAL || pid->items[1]->i != G_STORAGE ||
                pid->items[2]->k != V_STR) {
                fail(m, OB_ERR_FORMAT, "unknown persistent id", NULL);
                return NULL;
            }
            val *s = mk(m, V_STORAGE);
            if (s) {
                memcpy(s->dtype, pid->items[1]->dtype, sizeof(s->dtype));
                s->key = pid->items[2]->s;
                s->key_len = pid->items[2]->sl;
            }
            push(m, s);
            break;
        }
        case 'R': { val *args = pop(m), *f = pop(m); push(m, reduce(m, f, args)); break; } /* REDUCE */
        case 's': {                                                      /* SETITEM */
            val *v = pop(m), *k = pop(m), *d = top(m);
            if (!d || d->k != V_DICT) { fail(m, OB_ERR_FORMAT, "SETITEM on a non-dict", NULL); return NULL; }
            if (add_item(m, d, k)) add_item(m, d, v);
            break;
        }
        case 'u': {                                                      /* SETITEMS */
            val *items = pop_mark(m, V_LIST), *d = items ? top(m) : NULL;
            if (!d || d->k != V_DICT || items->n % 2) { fail(m, OB_ERR_FORMAT, "bad SETITEMS", NULL); return NULL; }
            for (int64_t k = 0; k < items->n && !m->st; k++) add_item(m, d, items->items[k]);
            break;
        }
        case 'a': { val *v = pop(m), *l = top(m); if (!l || l->k != V_LIST) { fail(m, OB_ERR_FORMAT, "bad APPEND", NULL); return NULL; } add_item(m, l, v); break; }
        case 'e': {                                                      /* APPENDS */
            val *items = pop_mark(m, V_LIST), *l = items ? top(m) : NULL;
            if (!l || l->k != V_LIST) { fail(m, OB_ERR_FORMAT, "bad APPENDS", NULL); return NULL; }
            for (int64_t k = 0; k < items->n && !m->st; k++) add_item(m, l, items->items[k]);
            break;
        }
        case 'b': {                                                      /* BUILD: state of a dict (OrderedDict._metadata): ignored */
            val *state = pop(m), *obj = top(m);
            if (!state || !obj || obj->k != V_DICT) { fail(m, OB_ERR_UNSUPPORTED, "BUILD of an object that is not a dict", NULL); return NULL; }
            break;
        }
        case '0': pop(m); break;                                         /* POP */
        case '1': pop_mark(m, V_LIST); break;                            /* POP_MARK */
        case '2': push(m, top(m)); break;                                /* DUP */
        default: {
            char what[64];
            snprintf(what, sizeof(what), "0x%02x at byte %zu", op, i - 1);
            /* i, o, INST, OBJ, NEWOBJ, EXT*, PERSID and the rest: refused, never emulated. */
            fail(m, OB_ERR_UNSUPPORTED, "refusing opcode ", what);
            return NULL;
        }
        }
#undef NEED
    }
    if (!m->st) fail(m, OB_ERR_FORMAT, "too many operations", NULL);
    return NULL;
}

static void pk_free(pk *m) {
    for (int64_t i = 0; i < m->n_all; i++) { free(m->all[i]->items); free(m->all[i]); }
    free(m->all);
    free(m->stack);
    free(m->marks);
    free(m->memo);
}

ob_status ob_pt_load(ob_src_set *s, const char *path, char *err, size_t err_len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ob_fail(err, err_len, OB_ERR_IO, "%s: cannot open", path);
    struct stat sb;
    if (fstat(fd, &sb) || sb.st_size <= 0) { close(fd); return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: empty file", path); }
    size_t len = (size_t)sb.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return ob_fail(err, err_len, OB_ERR_IO, "%s: cannot map", path);
    ob_status st = ob_src_keep_map(s, map, len, err, err_len);
    if (st) { munmap(map, len); return st; }
    zip z = {0};
    pk m = {.err = err, .err_len = err_len, .path = path};
    if ((st = zip_open(&z, map, len, path, err, err_len))) goto done;
    const zip_entry *pkl = NULL;
    for (int64_t i = 0; i < z.n && !pkl; i++) {
        const zip_entry *e = &z.e[i];
        if (e->name_len >= 9 && !memcmp(e->name + e->name_len - 9, "/data.pkl", 9)) pkl = e;
    }
    if (!pkl) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: no data.pkl in the archive", path); goto done; }
    size_t prefix = pkl->name_len - 8; /* "<name>/" */
    val *root = run(&m, pkl->data, (size_t)pkl->size);
    if (m.st) { st = m.st; goto done; }
    if (!root || root->k != V_DICT) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: the pickle is not a dict of tensors", path); goto done; }
    for (int64_t i = 0; i + 1 < root->n && !st; i += 2) {
        const val *k = root->items[i], *t = root->items[i + 1];
        if (k->k != V_STR || t->k != V_TENSOR) continue; /* e.g. non-tensor entries */
        char name[512];
        snprintf(name, sizeof(name), "%.*sdata/%.*s", (int)prefix, pkl->name, (int)OB_MIN(t->key_len, 100), t->key);
        const zip_entry *d = zip_find(&z, name, strlen(name));
        if (!d) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: storage '%s' missing", path, name); break; }
        size_t es = dtype_bytes(t->dtype);
        int64_t numel = 1, expect = 1;
        bool ok = t->offset >= 0;
        /* Only contiguous (row-major) tensors: strides must be the suffix products. */
        for (int dd = t->n_dims - 1; dd >= 0 && ok; dd--) {
            if (t->shape[dd] < 0 || t->shape[dd] > ((int64_t)1 << 40)) ok = false;
            else if (t->shape[dd] != 1 && t->stride[dd] != expect) ok = false;
            expect *= t->shape[dd] ? t->shape[dd] : 1;
            numel *= t->shape[dd];
        }
        if (!ok || numel < 0 || (uint64_t)(t->offset + numel) > d->size / es) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: tensor '%.*s' is not contiguous or lies outside its storage",
                         path, (int)OB_MIN(k->sl, 200), k->s);
            break;
        }
        st = ob_src_add(s, k->s, k->sl, t->dtype, t->n_dims, t->shape, d->data + (size_t)t->offset * es,
                        (size_t)numel * es, err, err_len);
    }
done:
    pk_free(&m);
    free(z.e);
    return st;
}
