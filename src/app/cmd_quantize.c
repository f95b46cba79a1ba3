/* 1bit quantize: rewrite a GGUF with its 2-D weight matrices in another type (norms,
 * biases and other 1-D tensors stay as they are). Uses the reference quantizers. */
#include "app/commands.h"
#include "core/common.h"
#include "format/gguf.h"
#include "format/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const ob_gguf *g; ob_type *types; } ob_qctx;

static bool fill(void *ctx, int64_t index, void *buf, size_t size) {
    ob_qctx *q = ctx;
    const ob_gguf_tensor *t = ob_gguf_tensor_at(q->g, index);
    if (t->type == q->types[index]) { memcpy(buf, t->data, size); return true; }
    const ob_type_traits *src = ob_type_traits_get(t->type), *dst = ob_type_traits_get(q->types[index]);
    int64_t n = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    float *row = malloc(sizeof(float) * (size_t)n);
    if (!row) return false;
    size_t in_rs = ob_row_size(t->type, n), out_rs = ob_row_size(q->types[index], n);
    for (int64_t r = 0; r < rows; r++) {
        src->to_float((const char *)t->data + (size_t)r * in_rs, row, n);
        dst->from_float(row, (char *)buf + (size_t)r * out_rs, n);
    }
    free(row);
    return true;
}

int ob_cmd_quantize(int argc, char **argv) {
    if (argc < 4 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        printf("usage: 1bit quantize IN.gguf OUT.gguf TYPE\n  quantizes every 2-D weight to TYPE (Q8_0, Q4_K, TQ2_0, ...)\n");
        return argc < 4 ? 2 : 0;
    }
    ob_type type;
    if (!ob_type_from_name(argv[3], &type) || !ob_type_traits_get(type) || !ob_type_traits_get(type)->from_float) {
        fprintf(stderr, "1bit quantize: no quantizer for type '%s'\n", argv[3]);
        return 2;
    }
    char err[512];
    ob_gguf *g = NULL;
    if (ob_gguf_open(argv[1], &g, err, sizeof(err))) { fprintf(stderr, "1bit quantize: %s\n", err); return 1; }
    int64_t n = ob_gguf_n_tensors(g);
    ob_qctx q = {g, calloc((size_t)(n ? n : 1), sizeof(ob_type))};
    ob_gguf_writer *w = ob_gguf_writer_new(3, ob_gguf_alignment(g));
    int rc = 0;
    if (!q.types || !w) { fprintf(stderr, "1bit quantize: out of memory\n"); rc = 1; goto done; }
    ob_gguf_copy_kv(w, g);
    int64_t bs = ob_type_traits_get(type)->block_size;
    for (int64_t i = 0; i < n && !rc; i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        const ob_type_traits *tr = ob_type_traits_get(t->type);
        bool conv = t->n_dims >= 2 && t->ne[0] % bs == 0 && tr && tr->to_float;
        q.types[i] = conv ? type : t->type;
        if (ob_gguf_add_tensor_fn(w, t->name.p, q.types[i], t->n_dims, t->ne, fill, &q, err, sizeof(err))) {
            fprintf(stderr, "1bit quantize: %s\n", err);
            rc = 1;
        }
    }
    if (!rc && ob_gguf_writer_write(w, argv[2], err, sizeof(err))) { fprintf(stderr, "1bit quantize: %s\n", err); rc = 1; }
done:
    ob_gguf_writer_free(w);
    free(q.types);
    ob_gguf_close(g);
    return rc;
}
