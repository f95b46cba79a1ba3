/* 1bit bench: llama-bench style rows for prefill (pp) and decode (tg), with the weight
 * bandwidth each achieves. Token ids are random (speed does not depend on them). */
#include "app/commands.h"
#include "app/opts.h"
#include "core/common.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct { double mean, sd; } ob_stat;

static ob_stat stats(const double *v, int n) {
    ob_stat s = {0, 0};
    for (int i = 0; i < n; i++) s.mean += v[i];
    s.mean /= n;
    for (int i = 0; i < n; i++) s.sd += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0;
    return s;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static int32_t rand_token(int n_vocab) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (int32_t)(g_rng % (uint64_t)n_vocab);
}

/* Prefill n_prompt tokens into every one of n_seq sequences; returns seconds. */
static double run_pp(ob_context *c, int n_vocab, int n_prompt, int n_seq, char *err, size_t el, ob_status *st) {
    int n = n_prompt * n_seq;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *pos = malloc(sizeof(int32_t) * (size_t)n),
            *seq = malloc(sizeof(int32_t) * (size_t)n);
    for (int s = 0; s < n_seq; s++) {
        ob_seq_truncate(c, s, 0);
        for (int i = 0; i < n_prompt; i++) {
            tok[s * n_prompt + i] = rand_token(n_vocab);
            pos[s * n_prompt + i] = i;
            seq[s * n_prompt + i] = s;
        }
    }
    double t0 = ob_time_s();
    ob_batch b = {n, tok, pos, seq, NULL};
    *st = ob_decode(c, &b, err, el);
    double t = ob_time_s() - t0;
    free(tok); free(pos); free(seq);
    return t;
}

/* n_gen decode steps, each one token for every sequence; returns seconds. */
static double run_tg(ob_context *c, int n_vocab, int n_gen, int n_seq, int start, char *err, size_t el, ob_status *st) {
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_seq), *pos = malloc(sizeof(int32_t) * (size_t)n_seq),
            *seq = malloc(sizeof(int32_t) * (size_t)n_seq);
    int8_t *want = malloc((size_t)n_seq);
    double t0 = ob_time_s();
    *st = OB_OK;
    for (int k = 0; k < n_gen && !*st; k++) {
        for (int s = 0; s < n_seq; s++) { tok[s] = rand_token(n_vocab); pos[s] = start + k; seq[s] = s; want[s] = 1; }
        ob_batch b = {n_seq, tok, pos, seq, want};
        *st = ob_decode(c, &b, err, el);
    }
    double t = ob_time_s() - t0;
    free(tok); free(pos); free(seq); free(want);
    return t;
}

int ob_cmd_bench(int argc, char **argv) {
    ob_common_opts o;
    ob_opts_init(&o);
    int n_prompt = 512, n_gen = 128, reps = 3, n_par = 1, depth = 0;
    double peak_gbs = 0;
    for (int i = 1; i < argc; i++) {
        int r = ob_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *a = argv[i];
        if (!strcmp(a, "-p") && i + 1 < argc) n_prompt = atoi(argv[++i]);
        else if (!strcmp(a, "-n") && i + 1 < argc) n_gen = atoi(argv[++i]);
        else if (!strcmp(a, "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if ((!strcmp(a, "-np") || !strcmp(a, "--parallel")) && i + 1 < argc) n_par = atoi(argv[++i]);
        else if ((!strcmp(a, "-d") || !strcmp(a, "--depth")) && i + 1 < argc) depth = atoi(argv[++i]);
        else if (!strcmp(a, "--peak-gbs") && i + 1 < argc) peak_gbs = atof(argv[++i]);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: 1bit bench -m FILE [-p 512] [-n 128] [-r 3] [-t N] [-np N] [-d DEPTH] [--peak-gbs X] [options]\n"
                   "  -p N        prompt tokens for the prefill test (0: skip)\n"
                   "  -n N        generated tokens for the decode test (0: skip)\n"
                   "  -r N        repetitions\n"
                   "  -np N       parallel sequences (aggregate decode)\n"
                   "  -d N        context depth before the decode test\n"
                   "  --peak-gbs  the device's peak bandwidth, to print the fraction reached\n%s", ob_opts_help);
            return 0;
        } else {
            fprintf(stderr, "1bit bench: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (n_prompt < 0 || n_gen < 0 || reps < 1 || n_par < 1 || depth < 0) {
        fprintf(stderr, "1bit bench: bad sizes\n");
        return 2;
    }
    ob_model *m = NULL;
    if (ob_opts_load_model(&o, &m)) return 1;
    ob_model_info info;
    ob_model_get_info(m, &info);
    int need = (n_prompt > depth ? n_prompt : depth) + n_gen + 8;
    if (o.cp.n_ctx < need) o.cp.n_ctx = need;
    o.cp.n_seq = n_par;
    char err[512];
    ob_context *c = NULL;
    if (ob_context_new(m, &o.cp, &c, err, sizeof(err))) {
        fprintf(stderr, "1bit: %s\n", err);
        ob_model_free(m);
        return 1;
    }
    int threads = o.mp.n_threads;
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *name = strrchr(o.model ? o.model : info.name, '/');
    name = name ? name + 1 : (o.model ? o.model : info.name);
    printf("| model | size | params | backend | threads | test | t/s | weights GB/s |%s\n", peak_gbs > 0 ? " % peak |" : "");
    printf("| --- | ---: | ---: | --- | ---: | --- | ---: | ---: |%s\n", peak_gbs > 0 ? " ---: |" : "");
    double wgb = (double)info.weight_bytes / 1e9;
    int rc = 0;
    ob_status st = OB_OK;
    for (int test = 0; test < 2 && !rc; test++) {
        int n = test == 0 ? n_prompt : n_gen;
        if (n == 0) continue;
        double *v = malloc(sizeof(double) * (size_t)reps), *bw = malloc(sizeof(double) * (size_t)reps);
        /* one warm-up run, not counted */
        for (int r = -1; r < reps && !st; r++) {
            double t;
            if (test == 0) {
                t = run_pp(c, info.n_vocab, n, n_par, err, sizeof(err), &st);
                if (r >= 0) { v[r] = n * n_par / t; bw[r] = wgb * ceil((double)n * n_par / o.cp.n_batch) / t; }
            } else {
                double td = 0;
                if (depth > 0) td = run_pp(c, info.n_vocab, depth, n_par, err, sizeof(err), &st);
                else for (int s = 0; s < n_par; s++) ob_seq_truncate(c, s, 0);
                (void)td;
                if (st) break;
                t = run_tg(c, info.n_vocab, n, n_par, depth, err, sizeof(err), &st);
                if (r >= 0) { v[r] = (double)n * n_par / t; bw[r] = wgb * n / t; }
            }
        }
        if (st) { fprintf(stderr, "1bit: %s\n", err); rc = 1; }
        else {
            ob_stat s = stats(v, reps), b = stats(bw, reps);
            char tname[64];
            if (test == 0) snprintf(tname, sizeof(tname), "pp%d", n);
            else if (depth) snprintf(tname, sizeof(tname), "tg%d @ d%d", n, depth);
            else snprintf(tname, sizeof(tname), "tg%d", n);
            if (n_par > 1) snprintf(tname + strlen(tname), sizeof(tname) - strlen(tname), " x%d", n_par);
            printf("| %s | %.2f GiB | %.2f B | %s | %d | %s | %.2f ± %.2f | %.1f |", name,
                   info.file_size / 1073741824.0, info.n_params / 1e9, info.backend, threads, tname, s.mean, s.sd, b.mean);
            if (peak_gbs > 0) printf(" %.0f%% |", 100.0 * b.mean / peak_gbs);
            printf("\n");
            fflush(stdout);
        }
        free(v);
        free(bw);
    }
    ob_context_free(c);
    ob_model_free(m);
    return rc;
}
