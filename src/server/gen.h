/* Generation requests shared by the route families: reading sampling fields from a
 * request, prompts and chat templates into tokens, running a task to completion (with a
 * disconnect check) or as a stream of SSE bytes. */
#ifndef OB_SERVER_GEN_H
#define OB_SERVER_GEN_H

#include "server/server.h"
#include "server/scheduler.h"

#define OB_GEN_MAX_STOP 16
#define OB_GEN_MAX_BIAS 1024
#define OB_GEN_MAX_N 16

typedef enum ob_gen_flavor { OB_GEN_OPENAI_CHAT, OB_GEN_OPENAI_COMPL, OB_GEN_LLAMA, OB_GEN_ANTHROPIC } ob_gen_flavor;

typedef struct ob_gen_req {
    ob_sampler_params sp;
    int32_t bias_tok[OB_GEN_MAX_BIAS];
    float bias_val[OB_GEN_MAX_BIAS];
    const char *stop[OB_GEN_MAX_STOP];   /* borrowed from the request JSON */
    int n_stop;
    int n_predict;                       /* -1: no limit */
    int n;                               /* choices */
    int n_probs;
    bool logprobs, stream, include_usage, ignore_eos, echo;
} ob_gen_req;

/* Reads max_tokens, temperature, top_p, ... in the flavor's spelling. */
bool ob_gen_parse(ob_server_state *s, json_t *body, ob_gen_flavor fl, ob_gen_req *g, ob_resp *r);

/* Tokenizes text; parse_special lets template markers become special tokens. Returns
 * malloc'd ids, or NULL with r filled. */
int32_t *ob_gen_tokenize(ob_server_state *s, const char *text, size_t len, bool add_special,
                         bool parse_special, int *n_out, ob_resp *r);
/* A prompt given as a string, an array of token ids, or a mix (llama-server style). */
int32_t *ob_gen_prompt_tokens(ob_server_state *s, json_t *prompt, int *n_out, ob_resp *r);

/* Renders messages (OpenAI shape: role + content string or parts) through the model's
 * chat template. Returns malloc'd text or NULL with r filled. */
char *ob_gen_render_chat(ob_server_state *s, json_t *messages, bool add_generation_prompt, ob_resp *r);

ob_task_params ob_gen_task_params(const ob_gen_req *g, const int32_t *prompt, int n_prompt, int choice);

/* Ready and generating (not embedding mode); else fills r (503, or llama-server's 501). */
bool ob_gen_ready(ob_server_state *s, ob_resp *r);

/* Submits; on failure fills r with the right status (400 exceed_context_size_error, 503). */
ob_task *ob_gen_submit(ob_server_state *s, const ob_task_params *p, ob_resp *r);

/* Result of a finished task (non-streaming). */
typedef struct ob_gen_result {
    char *text; size_t text_len;
    ob_tok_rec *toks; int n_toks;
    ob_task_out last;   /* finish reason, counts, timings */
} ob_gen_result;

/* Runs tasks to completion, all at once; returns false with r filled on error or a
 * client that went away (then r's status is 0: nothing is sent). */
bool ob_gen_wait(ob_server_state *s, const ob_req *rq, ob_task **tasks, int n, ob_gen_result *res, ob_resp *r);
void ob_gen_result_clear(ob_gen_result *res);

const char *ob_gen_finish_str(const ob_task_out *o);  /* "stop" / "length" */
json_t *ob_gen_timings(const ob_task_out *o);         /* llama-server "timings" object */

/* A stream of one task: fmt turns each snapshot into SSE bytes. */
typedef struct ob_gen_stream ob_gen_stream;
typedef void (*ob_gen_fmt)(ob_gen_stream *gs, const ob_task_out *o, char **buf, size_t *len);
struct ob_gen_stream {
    ob_stream base;
    ob_server_state *s;
    ob_task *task;
    ob_task_cursor cur;
    ob_gen_fmt fmt;
    bool started, ended;
    /* per-family state */
    char id[48];
    long created;
    int n_sent;
    int think;          /* 0 unknown, 1 inside <think>, 2 after or none */
    char *hold; size_t hold_len;
    bool logprobs, include_usage;
};
ob_resp ob_gen_stream_start(ob_server_state *s, const ob_req *rq, ob_task *t, ob_gen_fmt fmt,
                            const ob_gen_req *g, ob_gen_stream **out);

/* Client socket of a request; true if the peer has closed it. */
int ob_srv_conn_fd(const ob_req *rq);
bool ob_srv_client_gone(int fd);

/* Splits <think>...</think> off the start of a reply: *reasoning gets the inside. */
void ob_gen_split_think(const char *text, size_t len, char **content, char **reasoning);

/* Random id suffix for "chatcmpl-..." and "msg_..." ids. */
void ob_gen_id(char *out, size_t n, const char *prefix);

#endif
