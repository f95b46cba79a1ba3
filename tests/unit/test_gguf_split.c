/* Split GGUFs (llama.cpp's gguf-split layout: NAME-0000i-of-0000N.gguf, every key in the
 * first file with split.no / split.count / split.tensors.count, each file its own tensors):
 * a model cut into three files opens as one table with the same bytes and gives bitwise the
 * same logits as the whole file; broken sets are refused with a line naming the file. */
#include "testutil.h"
#include "format/gguf.h"
#include "onebit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SRC "tests/fixtures/models/qwen3.gguf"

static char dir[256];

static void part_name(char *out, size_t cap, const char *stem, int i, int n) {
    snprintf(out, cap, "%s/%s-%05d-of-%05d.gguf", dir, stem, i, n);
}

/* Writes src's tensors [from, to) as part i of n; the first part gets every key. ntens:
 * what split.tensors.count says. dup: also write tensor 0 again (hostile). */
static void write_part(const ob_gguf *src, const char *stem, int i, int n, int64_t from, int64_t to, int64_t ntens,
                       bool dup) {
    char err[256], path[512];
    ob_gguf_writer *w = ob_gguf_writer_new(3, 0);
    if (i == 1) ob_gguf_copy_kv(w, src);
    ob_gguf_set_u16(w, "split.no", (uint16_t)(i - 1));
    ob_gguf_set_u16(w, "split.count", (uint16_t)n);
    ob_gguf_set_i32(w, "split.tensors.count", (int32_t)ntens);
    for (int64_t k = from; k < to; k++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(src, k);
        CHECK(ob_gguf_add_tensor(w, t->name.p, t->type, t->n_dims, t->ne, t->data, err, sizeof(err)) == OB_OK);
    }
    if (dup) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(src, 0);
        CHECK(ob_gguf_add_tensor(w, t->name.p, t->type, t->n_dims, t->ne, t->data, err, sizeof(err)) == OB_OK);
    }
    part_name(path, sizeof(path), stem, i, n);
    CHECK(ob_gguf_writer_write(w, path, err, sizeof(err)) == OB_OK);
    ob_gguf_writer_free(w);
}

/* src cut in three at the given tensor counts */
static void write_split(const ob_gguf *src, const char *stem, int64_t a, int64_t b, int64_t ntens, bool dup) {
    int64_t n = ob_gguf_n_tensors(src);
    write_part(src, stem, 1, 3, 0, a, ntens, false);
    write_part(src, stem, 2, 3, a, b, ntens, false);
    write_part(src, stem, 3, 3, b, n, ntens, dup);
}

/* Logits of a random 24-token prompt (last row of each of three decodes). */
static float *logits_of(const char *path, int *n_vocab) {
    char err[256];
    ob_model_params mp = ob_model_default_params();
    mp.device = OB_DEVICE_CPU;
    ob_model *m = NULL;
    if (ob_model_load(path, &mp, &m, err, sizeof(err)) != OB_OK) {
        fprintf(stderr, "load %s: %s\n", path, err);
        CHECK(0);
        return NULL;
    }
    ob_model_info info;
    ob_model_get_info(m, &info);
    *n_vocab = info.n_vocab;
    ob_context_params cp = ob_context_default_params();
    cp.n_ctx = 64;
    ob_context *c = NULL;
    CHECK(ob_context_new(m, &cp, &c, err, sizeof(err)) == OB_OK);
    float *out = malloc(sizeof(float) * 3 * (size_t)info.n_vocab);
    uint64_t rng = 0x5eed5711u;
    for (int step = 0; step < 3; step++) {
        int32_t tok[8], pos[8], seq[8];
        for (int i = 0; i < 8; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            tok[i] = (int32_t)((rng >> 33) % (uint64_t)info.n_vocab);
            pos[i] = step * 8 + i;
            seq[i] = 0;
        }
        ob_batch b = {.n_tokens = 8, .token = tok, .pos = pos, .seq = seq};
        CHECK(ob_decode(c, &b, err, sizeof(err)) == OB_OK);
        memcpy(out + (size_t)step * info.n_vocab, ob_get_logits(c, 7), sizeof(float) * (size_t)info.n_vocab);
    }
    ob_context_free(c);
    ob_model_free(m);
    return out;
}

static void expect_refused(const char *path, const char *want) {
    char err[512];
    ob_gguf *g = NULL;
    ob_status st = ob_gguf_open(path, &g, err, sizeof(err));
    CHECK(st != OB_OK && g == NULL);
    if (st != OB_OK && !strstr(err, want)) {
        fprintf(stderr, "refusal of %s: '%s' lacks '%s'\n", path, err, want);
        CHECK(0);
    }
}

int main(void) {
    char err[512], path[512];
    snprintf(dir, sizeof(dir), "/tmp/onebit-split-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    ob_gguf *src = NULL;
    if (ob_gguf_open(SRC, &src, err, sizeof(err)) != OB_OK) {
        fprintf(stderr, "%s: %s\n", SRC, err);
        return 1;
    }
    const int64_t n = ob_gguf_n_tensors(src);
    CHECK(n >= 6);
    const int64_t a = n / 3 + 1, b = 2 * n / 3;

    /* the whole set: one table, the same bytes, the same logits */
    write_split(src, "m", a, b, n, false);
    part_name(path, sizeof(path), "m", 1, 3);
    ob_gguf *g = NULL;
    CHECK(ob_gguf_open(path, &g, err, sizeof(err)) == OB_OK);
    if (g) {
        CHECK(ob_gguf_n_tensors(g) == n);
        CHECK(ob_gguf_n_kv(g) == ob_gguf_n_kv(src) + 3);
        uint64_t total = 0;
        for (int i = 1; i <= 3; i++) {
            char p[512];
            part_name(p, sizeof(p), "m", i, 3);
            FILE *f = fopen(p, "rb");
            fseek(f, 0, SEEK_END);
            total += (uint64_t)ftell(f);
            fclose(f);
        }
        CHECK(ob_gguf_file_size(g) == total);
        for (int64_t k = 0; k < n; k++) {
            const ob_gguf_tensor *t = ob_gguf_tensor_at(src, k), *u = ob_gguf_find_tensor(g, t->name.p);
            CHECK(u && u->size == t->size && u->type == t->type && !memcmp(u->data, t->data, t->size));
        }
        ob_gguf_close(g);
    }
    int nv1 = 0, nv2 = 0;
    float *whole = logits_of(SRC, &nv1), *split = logits_of(path, &nv2);
    CHECK(whole && split && nv1 == nv2 && !memcmp(whole, split, sizeof(float) * 3 * (size_t)nv1));
    free(whole);
    free(split);

    /* a later part is not a model */
    part_name(path, sizeof(path), "m", 2, 3);
    expect_refused(path, "open its first part");
    /* a missing part names itself */
    write_split(src, "gone", a, b, n, false);
    part_name(path, sizeof(path), "gone", 3, 3);
    unlink(path);
    part_name(path, sizeof(path), "gone", 1, 3);
    expect_refused(path, "gone-00003-of-00003.gguf");
    /* the tensor count the first file promises */
    write_split(src, "count", a, b, n + 1, false);
    part_name(path, sizeof(path), "count", 1, 3);
    expect_refused(path, "split.tensors.count");
    /* a tensor in two parts */
    write_split(src, "dup", a, b, n + 1, true);
    part_name(path, sizeof(path), "dup", 1, 3);
    expect_refused(path, "is in two parts");
    /* a first part not named as one */
    write_split(src, "ren", a, b, n, false);
    part_name(path, sizeof(path), "ren", 1, 3);
    char moved[600];
    snprintf(moved, sizeof(moved), "%s/renamed.gguf", dir);
    CHECK(rename(path, moved) == 0);
    expect_refused(moved, "is not named NAME-00001-of-00003.gguf");
    /* parts from another split of the same name */
    write_split(src, "mix", a, b, n, false);
    part_name(path, sizeof(path), "mix", 2, 3);
    ob_gguf *s2 = NULL;
    CHECK(ob_gguf_open(SRC, &s2, err, sizeof(err)) == OB_OK);
    write_part(s2, "mix", 3, 3, 0, 0, n, false); /* rewrite part 3 as an empty part 3: count mismatch */
    ob_gguf_close(s2);
    part_name(path, sizeof(path), "mix", 1, 3);
    expect_refused(path, "split.tensors.count");

    ob_gguf_close(src);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return ob_test_done("test_gguf_split");
}
