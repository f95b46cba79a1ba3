/* 1bit run: complete a prompt (-p) or chat interactively with the model's template. */
#include "app/commands.h"
#include "app/opts.h"
#include "engine/chat_model.h"
#include "engine/spec.h"
#include "core/common.h"
#include "tokenizer/tokenizer.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ob_gen {
    ob_model *m;
    ob_context *c;
    ob_sampler *s;
    const ob_tokenizer *tok;
    int n_past;
    /* speculative decoding (-md): NULL spec = plain decoding */
    ob_spec *spec;
    int32_t *hist;           /* [n_ctx] tokens in sequence 0's KV, for the draft */
    int32_t *draft;          /* [n_max] proposals */
    int32_t *b_tok, *b_pos, *b_seq;  /* [n_max + 1] verification batch */
    int8_t *b_want;
    long n_drafted, n_accepted;
} ob_gen;

static void emit_piece(ob_gen *g, ob_detok *dt, int32_t id, char **reply, size_t *reply_len) {
    char buf[256];
    size_t w = ob_detok_push(g->tok, dt, id, buf, sizeof(buf));
    if (w > sizeof(buf)) return;
    fwrite(buf, 1, w, stdout);
    fflush(stdout);
    if (reply) {
        char *r = realloc(*reply, *reply_len + w + 1);
        if (r) { memcpy(r + *reply_len, buf, w); *reply_len += w; r[*reply_len] = 0; *reply = r; }
    }
}

/* Feeds id at the end of sequence 0 together with the draft's proposals, then samples the
 * target's tokens row by row (see engine/spec.h for why this equals plain decoding).
 * Emitted tokens go through emit like plain decoding's; *k counts them. Returns the next
 * sampled token not yet in the KV, or -1 when generation ended (*st says if by error). */
static int32_t spec_step(ob_gen *g, int32_t id, int *k, int n_predict, ob_detok *dt, char **reply,
                         size_t *reply_len, int *n_gen, ob_status *st) {
    char err[512];
    int n_ctx = ob_context_n_ctx(g->c);
    /* row i is plain decoding's token decoded at n_past + i: keep within its limits */
    int cap = OB_MIN(n_predict - *k - 1, n_ctx - g->n_past - 2);
    ob_spec_seq q = {.seq = 0, .hist = g->hist, .n_hist = g->n_past, .last = id, .n_max = cap, .draft = g->draft};
    int nd = 0;
    if (cap > 0) {
        if (ob_spec_draft(g->spec, &q, 1, err, sizeof(err)) == OB_OK) nd = q.n_draft;
        else fprintf(stderr, "1bit: draft: %s (going on without it)\n", err);
    }
    g->hist[g->n_past] = id;
    for (int i = 0; i <= nd; i++) {
        g->b_tok[i] = i == 0 ? id : g->draft[i - 1];
        g->b_pos[i] = g->n_past + i;
        g->b_seq[i] = 0;
        g->b_want[i] = 1;
    }
    ob_batch b = {nd + 1, g->b_tok, g->b_pos, g->b_seq, g->b_want};
    *st = ob_decode(g->c, &b, err, sizeof(err));
    if (*st) { fprintf(stderr, "1bit: %s\n", err); return -1; }
    g->n_past++;
    g->n_drafted += nd;
    int32_t next = -1;
    for (int i = 0; i <= nd; i++) {
        int32_t t = ob_sampler_sample(g->s, ob_get_logits(g->c, i));
        if (i == nd || t != g->draft[i]) { next = t; break; }
        /* accepted: already in the KV at n_past; the checks plain decoding makes */
        g->n_accepted++;
        if (ob_token_is_eog(g->tok, t)) break;
        emit_piece(g, dt, t, reply, reply_len);
        (*n_gen)++;
        if (++*k >= n_predict) break;
        if (g->n_past + 1 >= n_ctx) { fprintf(stderr, "\n1bit: context full\n"); break; }
        g->hist[g->n_past++] = t;
    }
    ob_seq_truncate(g->c, 0, g->n_past);
    return next;
}

/* Feeds tokens [0, n) at the end of sequence 0, then samples and streams up to n_predict
 * tokens to stdout. The reply's text is appended to *reply when reply is not NULL. */
static ob_status generate(ob_gen *g, const int32_t *toks, int n, int n_predict, char **reply, size_t *reply_len,
                          double *t_prompt, double *t_gen, int *n_gen) {
    char err[512];
    int n_ctx = ob_context_n_ctx(g->c);
    if (g->n_past + n >= n_ctx) {
        fprintf(stderr, "1bit: the prompt (%d tokens) does not fit the context of %d tokens (-c)\n", g->n_past + n, n_ctx);
        return OB_ERR_CONTEXT;
    }
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n), *seq = calloc((size_t)n, sizeof(int32_t));
    if (!pos || !seq) { free(pos); free(seq); return OB_ERR_NOMEM; }
    for (int i = 0; i < n; i++) pos[i] = g->n_past + i;
    double t0 = ob_time_s();
    ob_batch b = {n, toks, pos, seq, NULL};
    ob_status st = ob_decode(g->c, &b, err, sizeof(err));
    free(pos);
    free(seq);
    if (st) { fprintf(stderr, "1bit: %s\n", err); return st; }
    for (int i = 0; i < n; i++) ob_sampler_accept(g->s, toks[i]);
    if (g->hist) memcpy(g->hist + g->n_past, toks, sizeof(int32_t) * (size_t)n);
    g->n_past += n;
    *t_prompt += ob_time_s() - t0;
    t0 = ob_time_s();
    ob_detok dt = {0};
    char buf[256];
    const float *logits = ob_get_logits(g->c, n - 1);
    if (g->spec && n_predict > 0) {
        int k = 0;
        int32_t id = ob_sampler_sample(g->s, logits);
        while (id >= 0 && !ob_token_is_eog(g->tok, id)) {
            emit_piece(g, &dt, id, reply, reply_len);
            (*n_gen)++;
            if (++k >= n_predict) break;
            if (g->n_past + 1 >= n_ctx) { fprintf(stderr, "\n1bit: context full\n"); break; }
            id = spec_step(g, id, &k, n_predict, &dt, reply, reply_len, n_gen, &st);
        }
        n_predict = 0; /* the plain loop below has nothing left to do */
    }
    /* Each step samples its next token in the step itself (on the device when the sampler
     * allows: only the token comes back); the last emitted token is decoded without a draw,
     * so the sampler's stream is where host sampling would leave it. */
    int32_t id = n_predict > 0 ? ob_sampler_sample(g->s, logits) : -1;
    for (int k = 0; k < n_predict; k++) {
        if (ob_token_is_eog(g->tok, id)) break;
        emit_piece(g, &dt, id, reply, reply_len);
        (*n_gen)++;
        if (g->n_past + 1 >= n_ctx) { fprintf(stderr, "\n1bit: context full\n"); break; }
        int32_t p = g->n_past, s0 = 0, next = -1;
        ob_batch nb = {1, &id, &p, &s0, NULL};
        st = k + 1 < n_predict ? ob_decode_sample(g->c, &nb, &g->s, &next, err, sizeof(err))
                               : ob_decode(g->c, &nb, err, sizeof(err));
        if (st) { fprintf(stderr, "1bit: %s\n", err); break; }
        g->n_past++;
        id = next;
    }
    size_t w = ob_detok_flush(&dt, buf, sizeof(buf));
    if (w && w <= sizeof(buf)) fwrite(buf, 1, w, stdout);
    fflush(stdout);
    *t_gen += ob_time_s() - t0;
    return st;
}

static int32_t *tokenize_all(const ob_tokenizer *t, const char *text, bool add_special, int *n) {
    size_t len = strlen(text);
    int cap = (int)len + 16;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids) return NULL;
    int k = ob_tokenize(t, text, len, ids, cap, add_special, true);
    if (k > cap) {
        int32_t *r = realloc(ids, sizeof(int32_t) * (size_t)k);
        if (!r) { free(ids); return NULL; }
        ids = r;
        k = ob_tokenize(t, text, len, ids, k, add_special, true);
    }
    if (k < 0) { free(ids); return NULL; }
    *n = k;
    return ids;
}

static void print_timings(int n_prompt, double t_prompt, int n_gen, double t_gen) {
    fprintf(stderr, "\n[prompt: %d tokens, %.1f tok/s | generation: %d tokens, %.1f tok/s]\n", n_prompt,
            t_prompt > 0 ? n_prompt / t_prompt : 0.0, n_gen, t_gen > 0 ? n_gen / t_gen : 0.0);
}

/* Renders the conversation with the model's chat template (or the built-in one for its
 * architecture when the file carries none). */
static ob_status render_chat(ob_model *m, json_t *msgs, bool add_gen, char **out, char *err, size_t err_len) {
    return ob_chat_render_model(m, msgs, add_gen, out, err, err_len);
}

/* Each turn re-renders the whole conversation, keeps the KV cache for the longest token
 * prefix it shares with what the model has already seen, and feeds only the rest. */
static int chat_loop(ob_gen *g, int n_predict, const char *system) {
    ob_model_info info;
    ob_model_get_info(g->m, &info);
    json_t *msgs = json_array();
    if (system) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", system));
    int32_t *seen = NULL; /* tokens in the KV cache of sequence 0 */
    int n_seen = 0;
    char line[8192];
    fprintf(stderr, "1bit: chatting with %s (Ctrl-D to quit)\n", info.name);
    int rc = 0;
    for (;;) {
        fprintf(stderr, "> ");
        fflush(stderr);
        if (!fgets(line, sizeof(line), stdin)) break;
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", line));
        char err[512];
        char *text = NULL;
        if (render_chat(g->m, msgs, true, &text, err, sizeof(err))) { fprintf(stderr, "1bit: %s\n", err); rc = 1; break; }
        int n = 0;
        int32_t *ids = tokenize_all(g->tok, text, true, &n);
        free(text);
        if (!ids || n == 0) { free(ids); continue; }
        int keep = 0;
        while (keep < n_seen && keep < n - 1 && seen[keep] == ids[keep]) keep++;
        ob_seq_truncate(g->c, 0, keep);
        g->n_past = keep;
        char *reply = strdup("");
        size_t reply_len = 0;
        double tp = 0, tg = 0;
        int ng = 0;
        ob_status st = generate(g, ids + keep, n - keep, n_predict, &reply, &reply_len, &tp, &tg, &ng);
        fputc('\n', stdout);
        print_timings(n - keep, tp, ng, tg);
        /* What the cache now holds: the prompt, then the reply as sampled. Re-tokenizing the
         * reply inside the next rendering usually reproduces it; where not, the prefix match
         * above simply keeps less. */
        free(seen);
        seen = ids;
        n_seen = n;
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content", reply ? reply : ""));
        free(reply);
        if (st) { rc = 1; break; }
    }
    free(seen);
    json_decref(msgs);
    return rc;
}

int ob_cmd_run(int argc, char **argv) {
    ob_common_opts o;
    ob_opts_init(&o);
    const char *prompt = NULL, *system = NULL, *draft_path = NULL;
    int n_predict = -1;
    ob_spec_params spp = ob_spec_default_params();
    for (int i = 1; i < argc; i++) {
        int r = ob_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *a = argv[i];
        if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) prompt = argv[++i];
        else if ((!strcmp(a, "-n") || !strcmp(a, "--n-predict")) && i + 1 < argc) n_predict = atoi(argv[++i]);
        else if ((!strcmp(a, "-sys") || !strcmp(a, "--system")) && i + 1 < argc) system = argv[++i];
        else if ((!strcmp(a, "-md") || !strcmp(a, "--model-draft")) && i + 1 < argc) draft_path = argv[++i];
        else if (!strcmp(a, "--draft-max") || !strcmp(a, "--draft") || !strcmp(a, "--draft-n") ||
                 !strcmp(a, "--draft-min") || !strcmp(a, "--draft-n-min") || !strcmp(a, "--draft-p-min")) {
            char *end = NULL;
            double v = i + 1 < argc ? strtod(argv[i + 1], &end) : -1;
            bool pmin = !strcmp(a, "--draft-p-min");
            if (!end || *end || end == argv[i + 1] || v < 0 || v > (pmin ? 1 : 1024) || (!pmin && v != (int)v)) {
                fprintf(stderr, "1bit run: bad value for %s (%s)\n", a, pmin ? "a probability in [0, 1]" : "an integer in [0, 1024]");
                return 2;
            }
            i++;
            if (pmin) spp.p_min = (float)v;
            else if (strstr(a, "min")) spp.n_min = (int)v;
            else spp.n_max = (int)v;
        }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: 1bit run [-m FILE] [-p PROMPT] [-n N] [--system TEXT] [options]\n"
                   "  -p, --prompt TEXT        complete this text (no prompt: interactive chat)\n"
                   "  -n, --n-predict N        tokens to generate (default: 256; -1 in chat: until the end)\n"
                   "  -sys, --system TEXT      system prompt for chat\n"
                   "  -md, --model-draft FILE  speculative decoding with this draft model (same vocabulary)\n"
                   "  --draft-max N            most tokens drafted per step (default 16)\n"
                   "  --draft-min N            drop drafts shorter than N (default 0)\n"
                   "  --draft-p-min P          stop drafting below this draft probability (default 0.75)\n%s",
                   ob_opts_help);
            return 0;
        } else {
            fprintf(stderr, "1bit run: unknown option '%s' (see 1bit run --help)\n", a);
            return 2;
        }
    }
    ob_model *m = NULL;
    if (ob_opts_load_model(&o, &m)) return 1;
    char err[512];
    ob_context *c = NULL;
    if (ob_context_new(m, &o.cp, &c, err, sizeof(err))) {
        fprintf(stderr, "1bit: %s\n", err);
        ob_model_free(m);
        return 1;
    }
    ob_gen g = {.m = m, .c = c, .tok = ob_model_tokenizer(m)};
    g.s = ob_sampler_new(&o.sp, ob_tokenizer_n_vocab(g.tok));
    ob_model *dm = NULL;
    int rc = 0;
    if (!g.s) { fprintf(stderr, "1bit: out of memory\n"); rc = 1; }
    else if (draft_path && (spp.n_max = OB_MIN(spp.n_max, o.cp.n_batch - 1)) > 0) {
        ob_status st = ob_model_load(draft_path, &o.mp, &dm, err, sizeof(err));
        if (!st) st = ob_spec_check_vocab(m, dm, err, sizeof(err));
        if (!st) st = ob_spec_new(dm, &spp, 1, ob_context_n_ctx(c), o.cp.n_batch, &g.spec, err, sizeof(err));
        if (st) { fprintf(stderr, "1bit: %s\n", err); rc = 1; }
        else {
            int nc = ob_context_n_ctx(c), nm = spp.n_max + 1;
            g.hist = malloc(sizeof(int32_t) * (size_t)nc);
            g.draft = malloc(sizeof(int32_t) * (size_t)nm);
            g.b_tok = malloc(sizeof(int32_t) * (size_t)nm);
            g.b_pos = malloc(sizeof(int32_t) * (size_t)nm);
            g.b_seq = malloc(sizeof(int32_t) * (size_t)nm);
            g.b_want = malloc((size_t)nm);
            if (!g.hist || !g.draft || !g.b_tok || !g.b_pos || !g.b_seq || !g.b_want) { fprintf(stderr, "1bit: out of memory\n"); rc = 1; }
        }
    }
    if (rc) {}
    else if (prompt) {
        int n = 0;
        int32_t *ids = tokenize_all(g.tok, prompt, true, &n);
        if (!ids || n == 0) { fprintf(stderr, "1bit: the prompt could not be tokenized\n"); rc = 1; }
        else {
            double tp = 0, tg = 0;
            int ng = 0;
            ob_status st = generate(&g, ids, n, n_predict < 0 ? 256 : n_predict, NULL, NULL, &tp, &tg, &ng);
            if (!st) {
                fputc('\n', stdout);
                print_timings(n, tp, ng, tg);
            }
            rc = st ? 1 : 0;
        }
        free(ids);
    } else {
        rc = chat_loop(&g, n_predict < 0 ? 1 << 20 : n_predict, system);
    }
    if (g.spec)
        fprintf(stderr, "[draft: %ld tokens proposed, %ld accepted (%.1f%%)]\n", g.n_drafted, g.n_accepted,
                g.n_drafted ? 100.0 * (double)g.n_accepted / (double)g.n_drafted : 0.0);
    ob_spec_free(g.spec);
    ob_model_free(dm);
    free(g.hist);
    free(g.draft);
    free(g.b_tok);
    free(g.b_pos);
    free(g.b_seq);
    free(g.b_want);
    ob_sampler_free(g.s);
    ob_context_free(c);
    ob_model_free(m);
    return rc;
}
