/* 1bit perplexity: llama-perplexity's method. The text is cut into non-overlapping
 * windows of n_ctx tokens (the first token of each replaced by BOS when the model adds
 * one); each window is evaluated from an empty cache and only its second half is
 * scored, so every scored token sees at least n_ctx/2 tokens of context. */
#include "app/commands.h"
#include "app/opts.h"
#include "core/common.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *r = realloc(buf, cap * 2 + 1);
            if (!r) { free(buf); buf = NULL; break; }
            buf = r;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) { buf[n] = 0; *len = n; }
    return buf;
}

int ob_cmd_perplexity(int argc, char **argv) {
    ob_common_opts o;
    ob_opts_init(&o);
    const char *file = NULL;
    int n_ctx = 512, max_chunks = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        /* -c here is the window size, as in llama-perplexity */
        if ((!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) && i + 1 < argc) { n_ctx = atoi(argv[++i]); continue; }
        int r = ob_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-f") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(a, "--chunks") && i + 1 < argc) max_chunks = atoi(argv[++i]);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: 1bit perplexity -m FILE -f TEXT [-c 512] [-b N] [--chunks N] [options]\n%s", ob_opts_help);
            return 0;
        } else { fprintf(stderr, "1bit perplexity: unknown option '%s'\n", a); return 2; }
    }
    if (!file) { fprintf(stderr, "1bit perplexity: -f TEXT is required\n"); return 2; }
    if (n_ctx < 8 || n_ctx > 1 << 20) { fprintf(stderr, "1bit perplexity: bad -c %d\n", n_ctx); return 2; }
    size_t len = 0;
    char *text = read_all(file, &len);
    if (!text) { fprintf(stderr, "1bit perplexity: cannot read %s\n", file); return 1; }
    ob_model *m = NULL;
    if (ob_opts_load_model(&o, &m)) { free(text); return 1; }
    const ob_tokenizer *tok = ob_model_tokenizer(m);
    int cap = (int)OB_MIN(len + 16, (size_t)1 << 30);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    int n = ids ? ob_tokenize(tok, text, len, ids, cap, true, false) : -1;
    free(text);
    int rc = 0;
    ob_context *c = NULL;
    char err[512];
    o.cp.n_ctx = n_ctx;
    o.cp.n_seq = 1;
    if (o.cp.n_batch < n_ctx) o.cp.n_batch = n_ctx;
    if (n < 0 || n > cap) { fprintf(stderr, "1bit perplexity: tokenization failed\n"); rc = 1; goto done; }
    if (n < 2 * n_ctx) { fprintf(stderr, "1bit perplexity: need at least %d tokens, the text has %d\n", 2 * n_ctx, n); rc = 1; goto done; }
    if (ob_context_new(m, &o.cp, &c, err, sizeof(err))) { fprintf(stderr, "1bit: %s\n", err); rc = 1; goto done; }
    int n_chunk = n / n_ctx;
    if (max_chunks > 0 && max_chunks < n_chunk) n_chunk = max_chunks;
    int bos = ob_token_bos(tok);
    bool add_bos = n > 0 && bos >= 0 && ids[0] == bos;
    int first = n_ctx / 2;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)n_ctx), *bp = malloc(sizeof(int32_t) * (size_t)n_ctx),
            *bs = calloc((size_t)n_ctx, sizeof(int32_t));
    int8_t *want = malloc((size_t)n_ctx);
    double nll = 0, nll2 = 0;
    int count = 0;
    int n_vocab = ob_tokenizer_n_vocab(tok);
    fprintf(stderr, "perplexity: %d tokens, %d chunks of %d\n", n, n_chunk, n_ctx);
    double t0 = ob_time_s();
    for (int ch = 0; ch < n_chunk && !rc; ch++) {
        int start = ch * n_ctx;
        for (int j = 0; j < n_ctx; j++) { bt[j] = ids[start + j]; bp[j] = j; want[j] = j >= first && j < n_ctx - 1; }
        if (add_bos) bt[0] = bos;
        ob_seq_truncate(c, 0, 0);
        ob_batch b = {n_ctx, bt, bp, bs, want};
        if (ob_decode(c, &b, err, sizeof(err))) { fprintf(stderr, "1bit: %s\n", err); rc = 1; break; }
        for (int j = first; j < n_ctx - 1; j++) {
            const float *lg = ob_get_logits(c, j);
            double mx = lg[0];
            for (int v = 1; v < n_vocab; v++) if (lg[v] > mx) mx = lg[v];
            double se = 0;
            for (int v = 0; v < n_vocab; v++) se += exp(lg[v] - mx);
            double lp = lg[ids[start + j + 1]] - mx - log(se);
            nll += -lp;
            nll2 += lp * lp;
            count++;
        }
        printf("[%d]%.4f,", ch + 1, exp(nll / count));
        fflush(stdout);
    }
    if (!rc) {
        double mean = nll / count, var = nll2 / count - mean * mean;
        double ppl = exp(mean), err_ppl = var > 0 ? ppl * sqrt(var / (count - 1)) : 0;
        printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, err_ppl);
        fprintf(stderr, "perplexity: %.1f s, %.1f tokens/s\n", ob_time_s() - t0, n_chunk * n_ctx / (ob_time_s() - t0));
    }
    free(bt); free(bp); free(bs); free(want);
done:
    free(ids);
    ob_context_free(c);
    ob_model_free(m);
    return rc;
}
