#include "core/common.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static enum ob_log_level g_log_level = OB_LOG_INFO; /* set once at start-up by main() */

ob_status ob_fail(char *err, size_t err_len, ob_status st, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return st;
}

static int g_device_fault;

void ob_note_device_fault(void) { __atomic_store_n(&g_device_fault, 1, __ATOMIC_RELEASE); }

bool ob_device_faulted(void) { return __atomic_load_n(&g_device_fault, __ATOMIC_ACQUIRE) != 0; }

void ob_panic(const char *file, int line, const char *what) {
    fprintf(stderr, "onebit: internal error at %s:%d: %s\n", file, line, what);
    abort();
}

void ob_log_set_level(enum ob_log_level lvl) { g_log_level = lvl; }

void ob_log(enum ob_log_level lvl, const char *fmt, ...) {
    if (lvl < g_log_level) return;
    static const char *names[] = {"debug", "info", "warn", "error"};
    fprintf(stderr, "[%s] ", names[lvl]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

double ob_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

char *ob_read_text_file(const char *path, size_t max, size_t *len) {
    FILE *f = fopen(path, "rb");
    size_t n = 0, cap = 1 << 16;
    char *t = f ? malloc(cap + 1) : NULL;
    for (size_t k; t && (k = fread(t + n, 1, cap - n, f)) > 0;) {
        n += k;
        if (n > max) { free(t); t = NULL; break; }
        if (n == cap) {
            char *u = realloc(t, cap * 2 + 1);
            if (!u) { free(t); t = NULL; break; }
            t = u;
            cap *= 2;
        }
    }
    if (f) fclose(f);
    if (t && memchr(t, 0, n)) { free(t); t = NULL; }
    if (t) t[n] = 0;
    if (t && len) *len = n;
    return t;
}

int ob_argmax_f32(const float *w, int n) {
    if (n <= 0 || w[0] != w[0]) return 0;
    /* eight running maxima without a loop-carried index, then the first index holding it */
    float m8[8];
    for (int k = 0; k < 8; k++) m8[k] = w[0];
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) m8[k] = w[i + k] > m8[k] ? w[i + k] : m8[k];
    float m = w[0];
    for (int k = 0; k < 8; k++) m = m8[k] > m ? m8[k] : m;
    for (; i < n; i++) m = w[i] > m ? w[i] : m;
    for (i = 0; i < n; i++)
        if (w[i] == m) return i;
    return 0;
}

#ifndef ONEBIT_BUILD_INFO
#define ONEBIT_BUILD_INFO "b0-unknown"
#endif
const char *ob_build_info(void) { return ONEBIT_BUILD_INFO; }
