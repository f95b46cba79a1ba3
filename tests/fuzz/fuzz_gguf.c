/* libFuzzer target for the GGUF reader: any input must either fail with one "gguf: " line
 * or open into a file whose strings and tensors are safe to walk.
 * Build: CC=clang cmake -B build-fuzz -DONEBIT_FUZZ=ON -DONEBIT_SANITIZE=ON \
 *          -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link   (instruments libonebit too)
 * Run:   build-fuzz/fuzz_gguf -max_total_time=120 tests/fixtures/gguf */
#include "format/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256] = "";
    ob_gguf *g = NULL;
    ob_status st = ob_gguf_open_mem(data, size, &g, err, sizeof(err));
    if (st != OB_OK) {
        if (g || strncmp(err, "gguf: ", 6) != 0 || strchr(err, '\n')) abort();
        return 0;
    }
    volatile uint64_t sum = 0;
    for (int64_t i = 0; i < ob_gguf_n_kv(g); i++) {
        const ob_gguf_kv *kv = ob_gguf_kv_at(g, i);
        sum += (uint8_t)kv->key.p[kv->key.len];
        if (kv->type == OB_GGUF_STRING) sum += (uint8_t)kv->v.str.p[kv->v.str.len];
        for (uint64_t j = 0; kv->arr_str && j < kv->n; j++) sum += (uint8_t)kv->arr_str[j].p[kv->arr_str[j].len];
        int64_t iv;
        float fv;
        if (kv->n && ob_gguf_arr_i64(kv, kv->n - 1, &iv)) sum += (uint64_t)iv;
        if (kv->n && ob_gguf_arr_f32(kv, kv->n - 1, &fv)) sum += fv > 0;
    }
    for (int64_t i = 0; i < ob_gguf_n_tensors(g); i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        const uint8_t *d = t->data;
        if (d < data || t->size > size || (size_t)(d - data) > size - t->size) abort();
        if (t->size) sum += d[0] + d[t->size - 1];
    }
    (void)sum;
    ob_gguf_close(g);
    return 0;
}
