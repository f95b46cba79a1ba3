/* 1bit bench: llama-bench style rows for prefill (pp) and decode (tg), with the weight
 * bandwidth each achieves. Token ids are random (speed does not depend on them).
 * A model with no logits (an encoder: embedding or rerank), or --embd, gets one
 * embeddings row instead: -np inputs of -p tokens each pooled per ob_decode, as the
 * server's /v1/embeddings packs a request. */
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

/* n_gen decode steps, each one token for every sequence, sampled greedily and fed back as
 * a generation does (in the step's graph where the backend can: the real step, with only
 * the tokens coming back); returns seconds. */
static double run_tg(ob_context *c, int n_vocab, int n_gen, int n_seq, int start, char *err, size_t el, ob_status *st) {
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_seq), *pos = malloc(sizeof(int32_t) * (size_t)n_seq),
            *seq = malloc(sizeof(int32_t) * (size_t)n_seq), *next = malloc(sizeof(int32_t) * (size_t)n_seq);
    int8_t *want = malloc((size_t)n_seq);
    ob_sampler **smp = calloc((size_t)n_seq, sizeof(ob_sampler *));
    ob_sampler_params sp = ob_sampler_default_params();
    sp.temperature = 0;
    *st = OB_OK;
    for (int s = 0; s < n_seq && smp; s++)
        if (!(smp[s] = ob_sampler_new(&sp, n_vocab))) *st = OB_ERR_NOMEM;
    if (!tok || !pos || !seq || !next || !want || !smp) *st = OB_ERR_NOMEM;
    if (*st) snprintf(err, el, "bench: out of memory");
    for (int s = 0; s < n_seq && !*st; s++) tok[s] = rand_token(n_vocab);
    double t0 = ob_time_s();
    for (int k = 0; k < n_gen && !*st; k++) {
        for (int s = 0; s < n_seq; s++) { pos[s] = start + k; seq[s] = s; want[s] = 1; }
        ob_batch b = {n_seq, tok, pos, seq, want};
        *st = ob_decode_sample(c, &b, smp, next, err, el);
        if (!*st) memcpy(tok, next, sizeof(int32_t) * (size_t)n_seq);
    }
    double t = ob_time_s() - t0;
    for (int s = 0; s < n_seq && smp; s++) ob_sampler_free(smp[s]);
    free(smp); free(tok); free(pos); free(seq); free(next); free(want);
    return t;
}

/* The special tokens the tokenizer puts around a text ([CLS] .. [SEP] for BERT, BOS for
 * most decoders): found by encoding one word with and without them. */
typedef struct { int32_t pre[4], post[4]; int n_pre, n_post; } bench_specials;

static void find_specials(const ob_tokenizer *tk, bench_specials *sp) {
    memset(sp, 0, sizeof(*sp));
    int32_t with[16], without[16];
    int nw = ob_tokenize(tk, "hello", 5, with, 16, true, false);
    int nn = ob_tokenize(tk, "hello", 5, without, 16, false, false);
    if (nw < 0 || nn < 1 || nw > 16 || nn > 16 || nw < nn) return;
    for (int k = 0; k + nn <= nw; k++) {
        if (memcmp(with + k, without, sizeof(int32_t) * (size_t)nn)) continue;
        if (k > 4 || nw - nn - k > 4) return;
        sp->n_pre = k;
        sp->n_post = nw - nn - k;
        memcpy(sp->pre, with, sizeof(int32_t) * (size_t)k);
        memcpy(sp->post, with + k + nn, sizeof(int32_t) * (size_t)sp->n_post);
        return;
    }
}

/* One embeddings pass: n_seq inputs of n_tok tokens each (specials kept at the ends, random
 * ids between), pooled in one ob_decode; returns seconds including reading every vector. */
static double run_embd(ob_context *c, int n_vocab, const bench_specials *sp, int n_tok, int n_seq, char *err, size_t el,
                       ob_status *st) {
    int n = n_tok * n_seq;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *pos = malloc(sizeof(int32_t) * (size_t)n),
            *seq = malloc(sizeof(int32_t) * (size_t)n);
    if (!tok || !pos || !seq) {
        free(tok); free(pos); free(seq);
        *st = ob_fail(err, el, OB_ERR_NOMEM, "bench: out of memory");
        return 0;
    }
    /* an input too short for its specials is plain random ids */
    bool ends = sp->n_pre + sp->n_post < n_tok;
    for (int s = 0; s < n_seq; s++) {
        int32_t *t = tok + (size_t)s * n_tok;
        for (int i = 0; i < n_tok; i++) {
            t[i] = rand_token(n_vocab);
            pos[s * n_tok + i] = i;
            seq[s * n_tok + i] = s;
        }
        if (ends) {
            memcpy(t, sp->pre, sizeof(int32_t) * (size_t)sp->n_pre);
            memcpy(t + n_tok - sp->n_post, sp->post, sizeof(int32_t) * (size_t)sp->n_post);
        }
    }
    double t0 = ob_time_s();
    ob_batch b = {n, tok, pos, seq, NULL};
    *st = ob_decode(c, &b, err, el);
    for (int s = 0; s < n_seq && !*st; s++)
        if (!ob_get_embeddings(c, s)) *st = ob_fail(err, el, OB_ERR_DEVICE, "bench: no embedding for input %d", s);
    double t = ob_time_s() - t0;
    free(tok); free(pos); free(seq);
    return t;
}

typedef struct {
    const char *name;        /* file name of the model */
    const ob_model_info *info;
    int threads;
    double peak_gbs;
} bench_row;

static void print_header(const bench_row *r) {
    printf("| model | size | params | backend | threads | test | t/s | weights GB/s |%s\n", r->peak_gbs > 0 ? " % peak |" : "");
    printf("| --- | ---: | ---: | --- | ---: | --- | ---: | ---: |%s\n", r->peak_gbs > 0 ? " ---: |" : "");
}

static void print_row(const bench_row *r, const char *test, ob_stat s, ob_stat b) {
    printf("| %s | %.2f GiB | %.2f B | %s | %d | %s | %.2f ± %.2f | %.1f |", r->name, r->info->file_size / 1073741824.0,
           r->info->n_params / 1e9, r->info->backend, r->threads, test, s.mean, s.sd, b.mean);
    if (r->peak_gbs > 0) printf(" %.0f%% |", 100.0 * b.mean / r->peak_gbs);
    printf("\n");
    fflush(stdout);
}

/* The embeddings row: reps timed passes after one warm-up. t/s counts tokens; inputs/s
 * follows the table. */
static int bench_embd(ob_model *m, ob_common_opts *o, const bench_row *row, int n_tok, int n_seq, int reps, bool kv_set) {
    const ob_model_info *info = row->info;
    if (info->n_ctx_train > 0 && n_tok > info->n_ctx_train) {
        fprintf(stderr, "1bit bench: -p %d is longer than the model's context of %d tokens\n", n_tok, info->n_ctx_train);
        return 2;
    }
    if ((int64_t)n_tok * n_seq > 1 << 16) {
        fprintf(stderr, "1bit bench: %d inputs of %d tokens exceed one pass of 65536 tokens\n", n_seq, n_tok);
        return 2;
    }
    /* whole inputs in one pass, as the server runs them; F32 KV like the server unless asked */
    o->cp.embeddings = true;
    o->cp.pooling = OB_POOLING_DEFAULT;
    o->cp.normalize = true;
    o->cp.n_ctx = n_tok;
    o->cp.n_seq = n_seq;
    o->cp.n_batch = n_tok * n_seq;
    if (!kv_set) o->cp.type_k = o->cp.type_v = OB_KV_F32;
    char err[512];
    ob_context *c = NULL;
    if (ob_context_new(m, &o->cp, &c, err, sizeof(err))) {
        fprintf(stderr, "1bit: %s\n", err);
        return 1;
    }
    bench_specials sp;
    find_specials(ob_model_tokenizer(m), &sp);
    double *tps = malloc(sizeof(double) * (size_t)reps), *ips = malloc(sizeof(double) * (size_t)reps),
           *bw = malloc(sizeof(double) * (size_t)reps);
    ob_status st = !tps || !ips || !bw ? ob_fail(err, sizeof(err), OB_ERR_NOMEM, "bench: out of memory") : OB_OK;
    double wgb = (double)info->weight_bytes / 1e9;
    for (int r = -1; r < reps && !st; r++) {
        double t = run_embd(c, info->n_vocab, &sp, n_tok, n_seq, err, sizeof(err), &st);
        if (r >= 0 && !st) {
            tps[r] = (double)n_tok * n_seq / t;
            ips[r] = n_seq / t;
            bw[r] = wgb / t; /* one pass reads the weights once */
        }
    }
    int rc = 0;
    if (st) {
        fprintf(stderr, "1bit: %s\n", err);
        rc = 1;
    } else {
        char test[64];
        snprintf(test, sizeof(test), "%s %dx%d", ob_model_pooling(m) == OB_POOLING_RANK ? "rank" : "embd", n_tok, n_seq);
        print_header(row);
        print_row(row, test, stats(tps, reps), stats(bw, reps));
        ob_stat s = stats(ips, reps);
        printf("\n%s: %.2f ± %.2f inputs/s (%d inputs of %d tokens per pass)\n", test, s.mean, s.sd, n_seq, n_tok);
    }
    free(tps); free(ips); free(bw);
    ob_context_free(c);
    return rc;
}

int ob_cmd_bench(int argc, char **argv) {
    ob_common_opts o;
    ob_opts_init(&o);
    int n_prompt = 512, n_gen = 128, reps = 3, n_par = 1, depth = 0;
    bool embd = false, par_set = false, kv_set = false;
    double peak_gbs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-ctk") || !strcmp(a, "-ctv") || !strcmp(a, "--cache-type-k") || !strcmp(a, "--cache-type-v")) kv_set = true;
        int r = ob_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-p") && i + 1 < argc) n_prompt = atoi(argv[++i]);
        else if (!strcmp(a, "-n") && i + 1 < argc) n_gen = atoi(argv[++i]);
        else if (!strcmp(a, "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if ((!strcmp(a, "-np") || !strcmp(a, "--parallel")) && i + 1 < argc) { n_par = atoi(argv[++i]); par_set = true; }
        else if ((!strcmp(a, "-d") || !strcmp(a, "--depth")) && i + 1 < argc) depth = atoi(argv[++i]);
        else if (!strcmp(a, "--peak-gbs") && i + 1 < argc) peak_gbs = atof(argv[++i]);
        else if (!strcmp(a, "--embd") || !strcmp(a, "--embeddings")) embd = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: 1bit bench -m FILE [-p 512] [-n 128] [-r 3] [-t N] [-np N] [-d DEPTH] [--peak-gbs X] [--embd] [options]\n"
                   "  -p N        prompt tokens for the prefill test (0: skip); tokens per input with --embd\n"
                   "  -n N        generated tokens for the decode test (0: skip)\n"
                   "  -r N        repetitions (after one warm-up)\n"
                   "  -np N       parallel sequences (aggregate decode); inputs per pass with --embd (default 32)\n"
                   "  -d N        context depth before the decode test\n"
                   "  --peak-gbs  the device's peak bandwidth, to print the fraction reached\n"
                   "  --embd      embeddings test (automatic for a model with no logits): -np inputs of\n"
                   "              -p tokens pooled in one pass; t/s is tokens/s, inputs/s follows the table\n%s",
                   ob_opts_help);
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
    int threads = o.mp.n_threads;
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *name = strrchr(o.model ? o.model : info.name, '/');
    name = name ? name + 1 : (o.model ? o.model : info.name);
    bench_row row = {name, &info, threads, peak_gbs};
    char err[512];
    ob_context *c = NULL;
    if (!embd) {
        ob_context_params cp = o.cp;
        int need = (n_prompt > depth ? n_prompt : depth) + n_gen + 8;
        if (cp.n_ctx < need) cp.n_ctx = need;
        cp.n_seq = n_par;
        ob_status st = ob_context_new(m, &cp, &c, err, sizeof(err));
        /* an encoder refuses a logits context: it is benched as what it is, an embedder */
        if (st == OB_ERR_UNSUPPORTED && ob_model_pooling(m) != OB_POOLING_NONE) embd = true;
        else if (st) {
            fprintf(stderr, "1bit: %s\n", err);
            ob_model_free(m);
            return 1;
        }
    }
    if (embd) {
        if (n_prompt < 1) {
            fprintf(stderr, "1bit bench: the embeddings test needs -p of at least 1\n");
            ob_model_free(m);
            return 2;
        }
        int rc = bench_embd(m, &o, &row, n_prompt, par_set ? n_par : 32, reps, kv_set);
        ob_model_free(m);
        return rc;
    }
    print_header(&row);
    double wgb = (double)info.weight_bytes / 1e9;
    int n_batch = o.cp.n_batch > 0 ? o.cp.n_batch : 512;
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
                if (r >= 0) { v[r] = n * n_par / t; bw[r] = wgb * ceil((double)n * n_par / n_batch) / t; }
            } else {
                if (depth > 0) run_pp(c, info.n_vocab, depth, n_par, err, sizeof(err), &st);
                else for (int s = 0; s < n_par; s++) ob_seq_truncate(c, s, 0);
                if (st) break;
                t = run_tg(c, info.n_vocab, n, n_par, depth, err, sizeof(err), &st);
                if (r >= 0) { v[r] = (double)n * n_par / t; bw[r] = wgb * n / t; }
            }
        }
        if (st) { fprintf(stderr, "1bit: %s\n", err); rc = 1; }
        else {
            char tname[64];
            if (test == 0) snprintf(tname, sizeof(tname), "pp%d", n);
            else if (depth) snprintf(tname, sizeof(tname), "tg%d @ d%d", n, depth);
            else snprintf(tname, sizeof(tname), "tg%d", n);
            if (n_par > 1) snprintf(tname + strlen(tname), sizeof(tname) - strlen(tname), " x%d", n_par);
            print_row(&row, tname, stats(v, reps), stats(bw, reps));
        }
        free(v);
        free(bw);
    }
    ob_context_free(c);
    ob_model_free(m);
    return rc;
}
