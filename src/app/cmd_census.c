/* 1bit census: every (model, mode) pair, one row each (docs/census.md). The requests go
 * through the server's own routes and scheduler inside this process (ob_srv_dispatch on a
 * server state of the census's own, no HTTP), so a row is what a client of `1bit serve`
 * with those flags would get; a pair a model cannot do is a row that says why. */
#include "app/commands.h"
#include "app/opts.h"
#include "convert/convert.h"
#include "core/common.h"
#include "engine/chat_model.h"
#include "engine/spec.h"
#include "format/gguf.h"
#include "server/scheduler.h"
#include "server/server.h"
#include <dirent.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MODE_CHAT, MODE_LONG, MODE_KV_Q8, MODE_K_Q8, MODE_PARALLEL, MODE_SPEC, MODE_EMBD, MODE_RERANK, MODE_COUNT };
static const char *const g_mode_names[MODE_COUNT] = {"chat",       "long",        "kv-q8_0",    "k-q8_0",
                                                      "parallel-4", "speculative", "embeddings", "rerank"};
enum { ROW_OK, ROW_NA, ROW_FAIL };
static const char *const g_status_names[] = {"ok", "n/a", "fail"};

#define CENSUS_PAR 4         /* requests at once in the parallel mode */
#define CENSUS_SLOT_CTX 4096 /* a slot's context in the chat modes: `1bit serve`'s default -c */

typedef struct census_opts {
    ob_model_params mp;
    int n_long;          /* prompt tokens of the long mode */
    int n_gen;           /* tokens generated per request */
    const char *draft;   /* the speculative mode's draft: a GGUF, "self", or NULL */
    float draft_p_min;   /* drafting stops below this draft probability (the server's --draft-p-min) */
} census_opts;

typedef struct census_row {
    char arch[32], file[128];
    const char *device;
    int mode, status;
    int off_device, splits; /* -1: no graph was built */
    int answered;           /* -1: nothing was asked; else 1 when every request was answered */
    double pp_tps, tg_tps;  /* 0: not measured */
    uint64_t peak_bytes;    /* 0: not measured */
    double wall_s;          /* the row's own time, context and requests included */
    char note[384];
} census_row;

/* One model under census. */
typedef struct census_model {
    ob_model *m;
    const char *path;        /* the GGUF */
    ob_model_info info;
    int n_mtp;               /* multi-token-prediction layers in the file (nextn_predict_layers) */
    const char *chatml;      /* the template requests render with when the model has none, else NULL */
    bool encoder;            /* the server would run it in embedding mode only (no LM head) */
} census_model;

static void row_note(census_row *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void row_note(census_row *r, const char *fmt, ...) {
    size_t len = strlen(r->note);
    if (len + 3 >= sizeof(r->note)) return;
    if (len) {
        memcpy(r->note + len, "; ", 3);
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->note + len, sizeof(r->note) - len, fmt, ap);
    va_end(ap);
}

static void row_set(census_row *r, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void row_set(census_row *r, int status, const char *fmt, ...) {
    r->status = status;
    char buf[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    row_note(r, "%s", buf);
}

/* The placement of a context into the row: a node off the device fails the row. */
static bool row_placement(census_row *r, const ob_context *c) {
    ob_placement pl;
    ob_context_placement(c, &pl);
    r->off_device = pl.n_off_device;
    r->splits = pl.n_splits;
    if (!pl.n_off_device) return true;
    row_set(r, ROW_FAIL, "%d node%s off the device (%s)", pl.n_off_device, pl.n_off_device > 1 ? "s" : "", pl.off_ops);
    return false;
}

/* ---- requests through the server's routes --------------------------------------------- */

typedef struct census_req {
    ob_server_state *s;
    const char *path;
    char *body;              /* JSON, malloc'd */
    int status;
    json_t *reply;           /* the parsed reply, or NULL */
} census_req;

static void *req_run(void *arg) {
    census_req *q = arg;
    ob_req rq = {"POST", q->path, q->body, strlen(q->body), NULL};
    ob_resp r = {0};
    r.status = 200;
    ob_srv_dispatch(q->s, &rq, &r);
    q->status = r.status;
    q->reply = r.body ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
    if (r.stream && r.stream->close) r.stream->close(r.stream);
    free(r.body);
    free(r.headers);
    return NULL;
}

/* Runs n requests at once (each on a thread of its own, as connections are). */
static void req_all(census_req *q, int n) {
    pthread_t th[CENSUS_PAR];
    bool started[CENSUS_PAR] = {false};
    for (int i = 0; i < n && i < CENSUS_PAR; i++) started[i] = !pthread_create(&th[i], NULL, req_run, &q[i]);
    for (int i = 0; i < n && i < CENSUS_PAR; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else req_run(&q[i]);
    }
}

static void req_clear(census_req *q) {
    free(q->body);
    json_decref(q->reply);
    memset(q, 0, sizeof(*q));
}

/* Why a reply does not count as answered, or NULL when it does. */
static const char *reply_error(const census_req *q, char *buf, size_t len) {
    if (q->status == 200 && q->reply) return NULL;
    json_t *m = json_object_get(json_object_get(q->reply, "error"), "message");
    snprintf(buf, len, "HTTP %d: %s", q->status, json_is_string(m) ? json_string_value(m) : "no reply");
    return buf;
}

static const char g_text[] =
    "The census walks every model through every mode a server is asked for: a short chat, a long "
    "document, a compact cache, several users at once, speculation, embeddings and ranking. ";

static char *chat_body(int k, int n_gen) {
    static const char *const ask[CENSUS_PAR] = {"Write a short poem about the sea.", "Name three colours.",
                                                "What is a prime number?", "Say hello in French."};
    json_t *j = json_pack("{s:[{s:s,s:s}],s:i,s:f,s:b}", "messages", "role", "user", "content", ask[k % CENSUS_PAR],
                          "max_tokens", n_gen, "temperature", 0.0, "ignore_eos", 1);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

/* A prompt of n token ids: the text's tokens over and over. */
static char *long_body(const ob_tokenizer *tk, int n, int n_gen) {
    int32_t ids[256];
    int k = ob_tokenize(tk, g_text, strlen(g_text), ids, 256, false, false);
    if (k < 1 || k > 256) return NULL;
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i % k]));
    json_t *j = json_pack("{s:o,s:i,s:f,s:b,s:b}", "prompt", arr, "n_predict", n_gen, "temperature", 0.0, "ignore_eos", 1,
                          "cache_prompt", 0);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

static double jnum(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : 0;
}

/* ---- the generation modes: a context, the scheduler, chat or completion requests ------- */

/* The draft for the speculative mode, or NULL with the row set to why not. */
static ob_model *spec_draft(const census_opts *o, census_model *cm, census_row *r) {
    if (ob_model_has_recurrent_state(cm->m)) {
        row_set(r, ROW_NA, "speculative decoding is off with recurrent layers (a rejected draft cannot be cut off the state)");
        return NULL;
    }
    if (!o->draft) {
        if (cm->n_mtp) row_set(r, ROW_NA, "the file's %d MTP layer%s are not run yet, and no draft model was given (--draft)",
                               cm->n_mtp, cm->n_mtp > 1 ? "s" : "");
        else row_set(r, ROW_NA, "no MTP layers and no draft model given (--draft FILE or self)");
        return NULL;
    }
    const char *path = strcmp(o->draft, "self") ? o->draft : cm->path;
    char err[512];
    ob_model *d = NULL;
    ob_status st = ob_model_load(path, &o->mp, &d, err, sizeof err);
    if (st) {
        row_set(r, ROW_FAIL, "draft %s: %s", path, err);
        return NULL;
    }
    st = ob_spec_check_vocab(cm->m, d, err, sizeof err);
    if (st) {
        row_set(r, ROW_NA, "draft %s: %s", path, err);
        ob_model_free(d);
        return NULL;
    }
    if (cm->n_mtp) row_note(r, "MTP layers not run yet: a draft model instead");
    row_note(r, "draft %s", strcmp(o->draft, "self") ? o->draft : "self");
    return d;
}

static void run_gen(const census_opts *o, census_model *cm, census_row *r) {
    if (cm->encoder) {
        row_set(r, ROW_NA, "an embedding / rank model: no logits to generate from");
        return;
    }
    const int mode = r->mode, n_slots = mode == MODE_PARALLEL ? CENSUS_PAR : 1;
    const int train = cm->info.n_ctx_train;
    int slot_ctx = train > 0 && train < CENSUS_SLOT_CTX ? train : CENSUS_SLOT_CTX, n_prompt = 0;
    if (mode == MODE_LONG) {
        n_prompt = o->n_long;
        if (train > 0 && n_prompt + o->n_gen + 1 > train) {
            n_prompt = train - o->n_gen - 1;
            if (n_prompt < 64) {
                row_set(r, ROW_NA, "the model's context of %d tokens holds no long prompt", train);
                return;
            }
            row_note(r, "prompt clamped to %d tokens: the model's context is %d", n_prompt, train);
        }
        slot_ctx = n_prompt + o->n_gen + 1;
    }
    ob_model *dm = mode == MODE_SPEC ? spec_draft(o, cm, r) : NULL;
    if (mode == MODE_SPEC && !dm) return;

    ob_srv_config cfg;
    ob_srv_config_default(&cfg);
    cfg.n_slots = n_slots;
    cfg.n_ctx = slot_ctx * n_slots;
    cfg.type_k = mode == MODE_KV_Q8 || mode == MODE_K_Q8 ? OB_KV_Q8_0 : OB_KV_F16;
    cfg.type_v = mode == MODE_KV_Q8 ? OB_KV_Q8_0 : OB_KV_F16;
    cfg.chat_template = cm->chatml;
    cfg.mp = o->mp;
    ob_context_params cp = ob_context_default_params();
    cp.n_seq = n_slots;
    cp.n_ctx = slot_ctx;
    cp.n_batch = cfg.n_batch;
    cp.type_k = cfg.type_k;
    cp.type_v = cfg.type_v;

    ob_model_memory_reset_peak(cm->m);
    if (dm) ob_model_memory_reset_peak(dm);
    char err[512];
    ob_context *ctx = NULL;
    ob_spec *spec = NULL;
    ob_sched *sched = NULL;
    ob_status st = ob_context_new(cm->m, &cp, &ctx, err, sizeof err);
    if (st) {
        /* an encoder has no logits, a head size no q8_0 block: things the model cannot do */
        row_set(r, st == OB_ERR_UNSUPPORTED ? ROW_NA : ROW_FAIL, "%s", err);
        goto done;
    }
    if (!row_placement(r, ctx)) goto done;
    if (dm) {
        ob_spec_params sp = ob_spec_default_params();
        sp.n_max = OB_MIN(sp.n_max, cfg.n_batch - 1);
        sp.p_min = o->draft_p_min;
        st = ob_spec_new(dm, &sp, n_slots, ob_context_n_ctx(ctx), cfg.n_batch, &spec, err, sizeof err);
        if (st) {
            row_set(r, ROW_FAIL, "draft context: %s", err);
            goto done;
        }
    }
    st = ob_sched_new(cm->m, ctx, spec, n_slots, cfg.n_batch, &sched, err, sizeof err);
    if (st) {
        row_set(r, ROW_FAIL, "scheduler: %s", err);
        goto done;
    }
    ob_server_state s = {.cfg = &cfg, .model = cm->m, .tok = ob_model_tokenizer(cm->m), .sched = sched,
                         .model_id = r->file, .chat_template = ob_model_chat_template(cm->m), .ready = 1,
                         .n_ctx_slot = ob_sched_n_ctx_slot(sched), .n_slots = n_slots, .t_start = ob_time_s()};
    census_req q[CENSUS_PAR] = {{0}};
    for (int i = 0; i < n_slots; i++) {
        q[i].s = &s;
        q[i].path = mode == MODE_LONG ? "/completion" : "/v1/chat/completions";
        q[i].body = mode == MODE_LONG ? long_body(s.tok, n_prompt, o->n_gen) : chat_body(i, o->n_gen);
        if (!q[i].body) {
            row_set(r, ROW_FAIL, "cannot make the request");
            break;
        }
    }
    if (r->status == ROW_OK) req_all(q, n_slots);
    int n_ok = 0, pp_n = 0, tg_n = 0, short_n = 0;
    double pp_ms = 0, tg_ms = 0, drafted = 0, accepted = 0;
    for (int i = 0; i < n_slots && r->status == ROW_OK; i++) {
        char why[320];
        const char *bad = reply_error(&q[i], why, sizeof why);
        json_t *t = json_object_get(q[i].reply, "timings");
        int got = (int)jnum(t, "predicted_n");
        if (!bad && got < 1) bad = "a reply with no tokens";
        if (bad) {
            row_note(r, "request %d: %s", i, bad);
            continue;
        }
        n_ok++;
        short_n += got < o->n_gen;
        pp_n += (int)jnum(t, "prompt_n");
        tg_n += got;
        /* the requests ran together: their rate is the tokens over the longest of them */
        pp_ms = OB_MAX(pp_ms, jnum(t, "prompt_ms"));
        tg_ms = OB_MAX(tg_ms, jnum(t, "predicted_ms"));
        drafted += jnum(t, "draft_n");
        accepted += jnum(t, "draft_n_accepted");
    }
    if (r->status == ROW_OK) {
        r->answered = n_ok == n_slots;
        if (!r->answered) r->status = ROW_FAIL;
        if (pp_ms > 0) r->pp_tps = pp_n * 1e3 / pp_ms;
        if (tg_ms > 0) r->tg_tps = tg_n * 1e3 / tg_ms;
        if (short_n) row_note(r, "%d repl%s shorter than %d tokens", short_n, short_n > 1 ? "ies" : "y", o->n_gen);
        if (mode == MODE_SPEC) row_note(r, "%.0f of %.0f drafted tokens accepted", accepted, drafted);
        if (mode != MODE_LONG && cm->chatml) row_note(r, "no chat template in the file: chatml");
    }
    for (int i = 0; i < n_slots; i++) req_clear(&q[i]);
done:;
    uint64_t peak = 0, dpeak = 0;
    ob_model_memory(cm->m, NULL, &peak);
    if (dm) ob_model_memory(dm, NULL, &dpeak);
    if (r->status != ROW_NA) r->peak_bytes = peak + dpeak;
    if (sched) {
        ob_sched_stop(sched);
        ob_sched_free(sched);
    }
    ob_spec_free(spec);
    ob_context_free(ctx);
    ob_model_free(dm);
}

/* ---- embeddings and rerank: the server's embeddings context and routes ------------------ */

static void run_embd(census_model *cm, census_row *r) {
    const bool rank_model = ob_model_pooling(cm->m) == OB_POOLING_RANK, rerank = r->mode == MODE_RERANK;
    if (rerank && !rank_model) {
        row_set(r, ROW_NA, "no rank head (reranking needs a cross-encoder's classifier output)");
        return;
    }
    if (!rerank && rank_model) {
        row_set(r, ROW_NA, "a reranker: its pooled output is a relevance score, not an embedding");
        return;
    }
    ob_srv_config cfg;
    ob_srv_config_default(&cfg);
    cfg.embeddings = !rerank;
    cfg.reranking = rerank;
    ob_model_memory_reset_peak(cm->m);
    char err[512];
    ob_srv_embd *e = NULL;
    ob_status st = ob_srv_embd_new(cm->m, &cfg, &e, err, sizeof err);
    if (st) {
        row_set(r, st == OB_ERR_UNSUPPORTED ? ROW_NA : ROW_FAIL, "%s", err);
        goto done;
    }
    if (!row_placement(r, ob_srv_embd_context(e))) goto done;
    ob_server_state s = {.cfg = &cfg, .model = cm->m, .tok = ob_model_tokenizer(cm->m), .embd = e,
                         .model_id = r->file, .ready = 1, .t_start = ob_time_s()};
    static const char *const docs[] = {"The sea is wide and deep.", "Prime numbers have two divisors.",
                                       "Paris is the capital of France.", "Red, green and blue."};
    const int n_docs = (int)(sizeof(docs) / sizeof(docs[0]));
    json_t *list = json_array();
    for (int i = 0; i < n_docs; i++) json_array_append_new(list, json_string(docs[i]));
    json_t *j = rerank ? json_pack("{s:s,s:o}", "query", "What is the capital of France?", "documents", list)
                       : json_pack("{s:o}", "input", list);
    census_req q = {.s = &s, .path = rerank ? "/v1/rerank" : "/v1/embeddings"};
    q.body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!q.body) {
        row_set(r, ROW_FAIL, "cannot make the request");
        goto done;
    }
    req_run(&q);
    char why[320];
    const char *bad = reply_error(&q, why, sizeof why);
    json_t *items = json_object_get(q.reply, rerank ? "results" : "data");
    if (!bad && (int)json_array_size(items) != n_docs) bad = "a reply without a row for every input";
    r->answered = !bad;
    if (bad) row_set(r, ROW_FAIL, "%s", bad);
    ob_srv_embd_stats es;
    ob_srv_embd_get_stats(e, &es);
    if (es.seconds > 0) r->pp_tps = (double)es.tokens / es.seconds;
    req_clear(&q);
done:;
    uint64_t peak = 0;
    ob_model_memory(cm->m, NULL, &peak);
    if (r->status != ROW_NA) r->peak_bytes = peak;
    ob_srv_embd_free(e);
}

/* ---- models ------------------------------------------------------------------------------ */

/* The file's architecture and MTP layer count, read from its metadata. */
static void read_meta(const char *path, char *arch, size_t len, int *n_mtp) {
    snprintf(arch, len, "?");
    *n_mtp = 0;
    char err[256];
    ob_gguf *g = NULL;
    if (ob_gguf_open(path, &g, err, sizeof err)) return;
    const char *a = ob_gguf_get_str(g, "general.architecture");
    if (a) {
        snprintf(arch, len, "%s", a);
        char key[96];
        uint32_t n = 0;
        snprintf(key, sizeof key, "%s.nextn_predict_layers", a);
        if (ob_gguf_get_u32(g, key, &n) && n < 64) *n_mtp = (int)n;
    }
    ob_gguf_close(g);
}

static void print_header(void) {
    printf("| arch | file | mode | device | status | off | splits | answered | pp t/s | tg t/s | peak MiB | s | note |\n");
    printf("| --- | --- | --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |\n");
    fflush(stdout);
}

static void print_row(const census_row *r) {
    char off[16] = "-", sp[16] = "-", pp[32] = "-", tg[32] = "-", pk[32] = "-";
    if (r->off_device >= 0) snprintf(off, sizeof off, "%d", r->off_device);
    if (r->splits >= 0) snprintf(sp, sizeof sp, "%d", r->splits);
    if (r->pp_tps > 0) snprintf(pp, sizeof pp, "%.1f", r->pp_tps);
    if (r->tg_tps > 0) snprintf(tg, sizeof tg, "%.1f", r->tg_tps);
    if (r->peak_bytes) snprintf(pk, sizeof pk, "%.1f", r->peak_bytes / 1048576.0);
    printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %s |\n", r->arch, r->file,
           g_mode_names[r->mode], r->device, g_status_names[r->status], off, sp,
           r->answered < 0 ? "-" : r->answered ? "yes" : "no", pp, tg, pk, r->wall_s, r->note);
    fflush(stdout);
}

static json_t *row_json(const census_row *r) {
    json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s}", "arch", r->arch, "file", r->file, "mode", g_mode_names[r->mode],
                          "device", r->device, "status", g_status_names[r->status]);
    json_object_set_new(j, "off_device", r->off_device >= 0 ? json_integer(r->off_device) : json_null());
    json_object_set_new(j, "splits", r->splits >= 0 ? json_integer(r->splits) : json_null());
    json_object_set_new(j, "answered", r->answered >= 0 ? json_boolean(r->answered) : json_null());
    json_object_set_new(j, "pp_tps", r->pp_tps > 0 ? json_real(r->pp_tps) : json_null());
    json_object_set_new(j, "tg_tps", r->tg_tps > 0 ? json_real(r->tg_tps) : json_null());
    json_object_set_new(j, "peak_bytes", r->peak_bytes ? json_integer((json_int_t)r->peak_bytes) : json_null());
    json_object_set_new(j, "wall_s", json_real(r->wall_s));
    json_object_set_new(j, "note", json_string(r->note));
    return j;
}

/* Every mode of one model; returns the rows that failed. */
static int census_file(const census_opts *o, const char *path, const char *shown, const char *device, json_t *rows) {
    census_row base = {0};
    base.device = device;
    base.off_device = base.splits = base.answered = -1;
    const char *b = strrchr(shown, '/');
    snprintf(base.file, sizeof base.file, "%s", b ? b + 1 : shown);
    census_model cm = {0};
    cm.path = path;
    read_meta(path, base.arch, sizeof base.arch, &cm.n_mtp);
    char err[512];
    ob_status st = ob_model_load(path, &o->mp, &cm.m, err, sizeof err);
    if (!st) {
        ob_model_get_info(cm.m, &cm.info);
        bool known;
        if (!ob_model_template_or_builtin(cm.m)) cm.chatml = ob_srv_named_template("chatml", &known);
        ob_srv_config cfg;
        ob_srv_config_default(&cfg);
        cm.encoder = ob_srv_embd_wanted(&cfg, cm.m);
    }
    int n_fail = 0;
    for (int mode = 0; mode < MODE_COUNT; mode++) {
        census_row r = base;
        r.mode = mode;
        double t0 = ob_time_s();
        if (st) row_set(&r, ROW_FAIL, "load: %s", err);
        else if (mode == MODE_EMBD || mode == MODE_RERANK) run_embd(&cm, &r);
        else run_gen(o, &cm, &r);
        r.wall_s = ob_time_s() - t0;
        /* nothing more can run on a device that faulted: the census stops at this row */
        if (ob_device_faulted()) row_set(&r, ROW_FAIL, "the device faulted: the census stops here");
        n_fail += r.status == ROW_FAIL;
        print_row(&r);
        if (rows) json_array_append_new(rows, row_json(&r));
        if (ob_device_faulted()) break;
    }
    ob_model_free(cm.m);
    return n_fail;
}

/* A Hugging Face folder (config.json inside) is converted to a temporary F32 GGUF. */
static int census_entry(const census_opts *o, const char *path, const char *device, json_t *rows) {
    char cfg[4096];
    struct stat sb;
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    if (stat(cfg, &sb)) return census_file(o, path, path, device, rows);
    const char *tmp = getenv("TMPDIR");
    char gguf[4096];
    snprintf(gguf, sizeof gguf, "%s/1bit-census-XXXXXX.gguf", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemps(gguf, 5);
    if (fd < 0) {
        fprintf(stderr, "1bit census: cannot make a temporary file for %s\n", path);
        return 1;
    }
    close(fd);
    char err[512];
    ob_convert_opts co = {OB_TYPE_F32, NULL};
    int n_fail;
    if (ob_convert_hf(path, gguf, &co, err, sizeof err)) {
        census_row r = {0};
        r.device = device;
        r.off_device = r.splits = r.answered = -1;
        snprintf(r.arch, sizeof r.arch, "?");
        const char *b = strrchr(path, '/');
        snprintf(r.file, sizeof r.file, "%s", b ? b + 1 : path);
        n_fail = MODE_COUNT;
        for (int mode = 0; mode < MODE_COUNT; mode++) {
            r.mode = mode;
            r.note[0] = 0;
            row_set(&r, ROW_FAIL, "convert: %s", err);
            print_row(&r);
            if (rows) json_array_append_new(rows, row_json(&r));
        }
    } else {
        n_fail = census_file(o, gguf, path, device, rows);
    }
    unlink(gguf);
    return n_fail;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* An entry of --models: a GGUF, a Hugging Face folder, or a folder whose *.gguf files are
 * taken in name order. */
static int census_item(const census_opts *o, const char *item, const char *device, json_t *rows) {
    struct stat sb;
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", item);
    if (stat(item, &sb) || !S_ISDIR(sb.st_mode) || !stat(cfg, &sb)) return census_entry(o, item, device, rows);
    DIR *d = opendir(item);
    if (!d) return census_entry(o, item, device, rows);
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".gguf")) continue;
        if (n == cap) {
            char **nn = realloc(names, sizeof(char *) * (cap = cap ? 2 * cap : 16));
            if (!nn) break;
            names = nn;
        }
        size_t pl = strlen(item) + len + 2;
        if (!(names[n] = malloc(pl))) break;
        snprintf(names[n++], pl, "%s/%s", item, e->d_name);
    }
    closedir(d);
    int n_fail = 0;
    if (n) {
        qsort(names, n, sizeof(char *), cmp_str);
    } else {
        fprintf(stderr, "1bit census: no .gguf file in %s\n", item);
        n_fail = 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!ob_device_faulted()) n_fail += census_entry(o, names[i], device, rows);
        free(names[i]);
    }
    free(names);
    return n_fail;
}

int ob_cmd_census(int argc, char **argv) {
    census_opts o = {.mp = ob_model_default_params(), .n_long = 8192, .n_gen = 32, .draft_p_min = ob_spec_default_params().p_min};
    const char *models = NULL, *json_path = NULL, *device = "cpu";
    o.mp.device = OB_DEVICE_CPU;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: 1bit census [--device D] [--models LIST] [--json FILE] [--draft FILE|self] [options]\n"
                   "Runs every (model, mode) pair and prints one row each; exits 1 if any row fails.\n"
                   "modes: chat, long (a prompt of --long tokens), kv-q8_0, k-q8_0, parallel-4 (through the\n"
                   "server's scheduler), speculative, embeddings, rerank; one a model cannot do is n/a with why.\n"
                   "  --device D     cpu (default), vulkan[:N], cuda[:N]\n"
                   "  --models LIST  comma list of GGUF files, folders (their *.gguf) and Hugging Face\n"
                   "                 folders (converted to a temporary F32 GGUF); default: the default model\n"
                   "  -m FILE        the same as --models FILE\n"
                   "  --json FILE    the rows as a JSON list\n"
                   "  --draft F      the speculative mode's draft model (same vocabulary); self: each model\n"
                   "                 drafts for itself\n"
                   "  --draft-p-min P  stop drafting below this draft probability (default: the server's)\n"
                   "  --long N       prompt tokens of the long mode (default 8192; clamped to a model's context)\n"
                   "  -n N           tokens generated per request (default 32)\n"
                   "  -t N           CPU threads\n");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "1bit census: unknown option or missing value '%s'\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--device") || !strcmp(a, "-dev")) {
            if (!ob_parse_device(v, &o.mp.device, &o.mp.device_index)) {
                fprintf(stderr, "1bit census: unknown device '%s'\n", v);
                return 2;
            }
            device = v;
        } else if (!strcmp(a, "--models")) models = v;
        else if (!strcmp(a, "-m")) models = v; /* one file is a list of one */
        else if (!strcmp(a, "--json")) json_path = v;
        else if (!strcmp(a, "--draft")) o.draft = v;
        else if (!strcmp(a, "--draft-p-min")) o.draft_p_min = (float)atof(v);
        else if (!strcmp(a, "--long")) o.n_long = atoi(v);
        else if (!strcmp(a, "-n")) o.n_gen = atoi(v);
        else if (!strcmp(a, "-t")) o.mp.n_threads = atoi(v);
        else {
            fprintf(stderr, "1bit census: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (o.n_long < 64 || o.n_long > 1 << 20 || o.n_gen < 1 || o.n_gen > 4096 || o.mp.n_threads < 0 ||
        !(o.draft_p_min >= 0 && o.draft_p_min <= 1)) {
        fprintf(stderr, "1bit census: bad sizes (--long 64.., -n 1..4096, --draft-p-min 0..1)\n");
        return 2;
    }
    /* nodes without a kernel are counted, not refused: each such row fails naming them */
    o.mp.strict_device = false;
    char *dflt = NULL;
    if (!models) {
        char err[512];
        if (!(dflt = ob_default_model_path(err, sizeof err))) {
            fprintf(stderr, "1bit census: %s\n", err);
            return 1;
        }
        models = dflt;
    }
    json_t *rows = json_path ? json_array() : NULL;
    print_header();
    int n_fail = 0;
    char *list = strdup(models);
    for (char *save = NULL, *it = strtok_r(list, ",", &save); it; it = strtok_r(NULL, ",", &save))
        if (*it && !ob_device_faulted()) n_fail += census_item(&o, it, device, rows);
    free(list);
    free(dflt);
    int rc = n_fail ? 1 : 0;
    if (rows && json_dump_file(rows, json_path, JSON_INDENT(1)) != 0) {
        fprintf(stderr, "1bit census: cannot write %s\n", json_path);
        rc = 1;
    }
    json_decref(rows);
    if (n_fail) fprintf(stderr, "1bit census: %d row%s failed\n", n_fail, n_fail > 1 ? "s" : "");
    return rc;
}
