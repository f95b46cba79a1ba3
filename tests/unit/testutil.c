#include "testutil.h"
#include <math.h>

int ob_test_failures = 0;
int ob_test_checks = 0;

int ob_test_done(const char *name) {
    printf("%s: %d checks, %d failed\n", name, ob_test_checks, ob_test_failures);
    return ob_test_failures ? 1 : 0;
}

int ob_test_shard(int k) {
    const char *e = getenv("ONEBIT_TEST_SHARD");
    int i = 0, n = 1;
    if (!e || !*e) return 1;
    if (sscanf(e, "%d/%d", &i, &n) != 2 || n < 1 || i < 0 || i >= n) {
        fprintf(stderr, "ONEBIT_TEST_SHARD=%s: want i/n with 0 <= i < n\n", e);
        exit(2);
    }
    return k % n == i;
}

void ob_rng_seed(ob_rng *r, uint64_t seed) {
    r->s[0] = seed * 0x9E3779B97F4A7C15ull + 1;
    r->s[1] = (seed ^ 0xD1B54A32D192ED03ull) * 0xBF58476D1CE4E5B9ull + 3;
    for (int i = 0; i < 8; i++) ob_rng_u64(r);
}

uint64_t ob_rng_u64(ob_rng *r) {
    uint64_t s0 = r->s[0], s1 = r->s[1], res = s0 + s1;
    s1 ^= s0;
    r->s[0] = ((s0 << 55) | (s0 >> 9)) ^ s1 ^ (s1 << 14);
    r->s[1] = (s1 << 36) | (s1 >> 28);
    return res;
}

float ob_rng_uniform(ob_rng *r) { return (float)(ob_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

float ob_rng_normal(ob_rng *r) {
    float u1 = ob_rng_uniform(r), u2 = ob_rng_uniform(r);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

void ob_rng_fill_normal(ob_rng *r, float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = ob_rng_normal(r) * scale;
}

void *ob_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf && len) *len = (size_t)n;
    return buf;
}

double ob_test_err_ratio(const float *a, const float *r, int64_t n, double atol, double rtol, int64_t *where) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - r[i]), e = d == 0 ? 0 : d / (atol + rtol * fabs(r[i]));
        if (isnan(a[i]) || isnan(r[i])) e = INFINITY;
        if (e > worst) { worst = e; *where = i; }
    }
    return worst;
}
