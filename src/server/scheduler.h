/* Slots and continuous batching. One thread owns the context: every step it gathers the
 * next token of each generating slot and prompt chunks of slots still reading, runs them
 * through the model in one ob_decode, samples, and hands text to the waiting requests.
 *
 * KV budget: n_slots sequences of n_ctx_slot cells each (the context's n_ctx per
 * sequence), so one slot can never take another's cells. */
#ifndef OB_SERVER_SCHEDULER_H
#define OB_SERVER_SCHEDULER_H

#include <pthread.h>
#include "onebit.h"

#define OB_SRV_MAX_TOP 20

typedef struct ob_tok_rec {
    int32_t id;
    float logprob;                     /* log softmax of the raw logits; with post_sampling the
                                        * probabilities (here and in top_lp) after the chain */
    int n_top;
    int32_t top_id[OB_SRV_MAX_TOP];    /* most likely first */
    float top_lp[OB_SRV_MAX_TOP];
} ob_tok_rec;

typedef enum ob_finish {
    OB_FINISH_NONE = 0, OB_FINISH_STOP, OB_FINISH_LENGTH, OB_FINISH_ERROR,
} ob_finish;

typedef struct ob_task ob_task;

/* What a request asks for. The scheduler copies everything it needs at submit. */
typedef struct ob_task_params {
    const int32_t *prompt;
    int n_prompt;
    int n_predict;                     /* < 0: until the context or an end token */
    ob_sampler_params sp;              /* logit bias arrays copied */
    const ob_dry_breaker_text *dry_breakers; /* made into tokens at submit when sp turns DRY on;
                                        * NULL: llama-server's defaults */
    const char *const *stop;
    int n_stop;
    int n_probs;                       /* top alternatives per token (0..20) */
    bool logprobs;                     /* record per-token logprobs */
    bool post_sampling;                /* ... as probabilities after the sampling chain instead */
    bool ignore_eos;
    const char *grammar;               /* GBNF the output must follow (compiled at submit), or NULL */
    /* A lazy grammar (tool calls, chat/toolcall.h): the output is free until a trigger
     * appears in it (outside a leading <think>...</think>): one of words anywhere, or one of
     * starts at the reply's start (whitespace aside). The grammar then holds from the
     * trigger's first byte on. The words are copied at submit. */
    bool grammar_lazy;
    const char *const *grammar_words;
    int n_grammar_words;
    const char *const *grammar_starts;
    int n_grammar_starts;
    bool grammar_special;              /* control tokens may match the grammar by their text */
    bool think_open;                   /* the reply starts inside a thought */
    bool pin_slot;                     /* the request's id_slot: only that slot runs it */
    int id_slot;
} ob_task_params;

/* Where a reader has got to in a task's output. */
typedef struct ob_task_cursor { size_t text; int toks; } ob_task_cursor;

/* A snapshot handed to a reader: new text and token records since its cursor. */
typedef struct ob_task_out {
    char *text; size_t text_len;       /* malloc'd */
    ob_tok_rec *toks; int n_toks;      /* malloc'd */
    bool done;
    ob_finish finish;
    int err_status;                    /* http status when finish == ERROR */
    char err[256];
    const char *stop_word;             /* the stop string matched, or NULL (task-owned: valid
                                        * while the reader holds the task; ob_gen_result copies it) */
    bool stopped_eos;
    bool truncated;                    /* ended because the slot's context was full */
    int n_prompt, n_cached, n_gen, slot;
    double t_prompt_ms, t_gen_ms;
    bool speculative;                  /* a draft model proposes tokens */
    int draft_n, draft_n_accepted;     /* proposals made and accepted for this task */
} ob_task_out;

typedef struct ob_sched ob_sched;

typedef struct ob_sched_stats {
    uint64_t prompt_tokens, gen_tokens, requests_done;
    double prompt_s, gen_s;
    int processing, deferred, n_slots, n_ctx_slot;
    long kv_used, kv_total;
    uint64_t n_decode_calls, n_decode_tokens;
    uint64_t n_drafted, n_draft_accepted;   /* speculative decoding, all requests */
    /* the last finished request, for Lemonade's /api/v1/stats */
    int last_prompt_tokens, last_gen_tokens;
    double last_ttft_s, last_tps;
} ob_sched_stats;

/* spec (may be NULL): a draft whose sequences mirror the slots (n_seq = n_slots, same
 * n_ctx); it stays owned by the caller and must outlive the scheduler. Each step then
 * drafts for every generating slot and the target verifies all proposals of all slots
 * in the same single ob_decode (engine/spec.h says why outputs are unchanged). */
typedef struct ob_spec ob_spec;
ob_status ob_sched_new(ob_model *m, ob_context *ctx, ob_spec *spec, int n_slots, int n_batch,
                       ob_sched **out, char *err, size_t err_len);
/* Stops the thread and fails anything queued or running; submits are refused after. */
void ob_sched_stop(ob_sched *s);
/* Stops (if not yet) and frees; no reader may still use s. */
void ob_sched_free(ob_sched *s);
int ob_sched_n_ctx_slot(const ob_sched *s);
int ob_sched_n_slots(const ob_sched *s);
/* True once ob_decode reported a device fault; the server must then exit non-zero. */
bool ob_sched_failed(ob_sched *s);

/* Queues a request. Returns NULL with a status/err when it can never run (prompt longer
 * than a slot's context: OB_ERR_CONTEXT). The caller owns one reference. */
ob_task *ob_sched_submit(ob_sched *s, const ob_task_params *p, ob_status *st,
                         char *err, size_t err_len);
/* Waits up to ms for output past cur, copies it out and advances cur. Free out with
 * ob_task_out_clear. */
void ob_sched_poll(ob_sched *s, ob_task *t, ob_task_cursor *cur, int ms, ob_task_out *out);
void ob_task_out_clear(ob_task_out *o);
/* Drops the caller's reference; an unfinished task is cancelled and its slot freed. */
void ob_sched_release(ob_sched *s, ob_task *t);

void ob_sched_get_stats(ob_sched *s, ob_sched_stats *st);
/* One line per slot for /slots: JSON array (new reference). */
struct json_t;
struct json_t *ob_sched_slots_json(ob_sched *s);

/* llama-server's /slots/{id}?action=: a slot's cache and tokens to a file (SAVE), back from
 * one (RESTORE: the slot then reuses them as a cached prefix), or forgotten (ERASE). Waits
 * up to wait_ms for the slot to be idle between steps. Returns an HTTP status: 200, 400 (no
 * such slot, a file that is not a saved slot of this model), 500 (I/O), 501, 503 (busy
 * past wait_ms, shutting down), with err. */
typedef enum ob_slot_action { OB_SLOT_SAVE, OB_SLOT_RESTORE, OB_SLOT_ERASE } ob_slot_action;
typedef struct ob_slot_result {
    int n_tokens;                      /* saved, restored or erased */
    size_t n_bytes;                    /* the file's */
    double ms;
} ob_slot_result;
int ob_sched_slot_action(ob_sched *s, int id, ob_slot_action a, const char *path, int wait_ms, ob_slot_result *res,
                         char *err, size_t err_len);

#endif
