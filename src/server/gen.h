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
    bool post_sampling_probs;            /* llama-server: probabilities after the sampling chain */
    bool return_tokens, timings_per_token, verbose;
    int reasoning_format;                /* OB_RFMT_*: the request's, else the server's */
    bool think_open;                     /* the prompt opened a thought (ob_chat_out) */
    bool seed_given;                     /* the request or the server fixed the seed */
    json_t *response_fields;             /* llama-server: array of field paths to keep (borrowed) */
    const char *grammar;                 /* GBNF the output follows (borrowed from the body's "grammar",
                                          * where a JSON schema's conversion is put), or NULL */
} ob_gen_req;

/* Reads max_tokens, temperature, top_p, ... in the flavor's spelling. */
bool ob_gen_parse(ob_server_state *s, json_t *body, ob_gen_flavor fl, ob_gen_req *g, ob_resp *r);

/* Tokenizes text; parse_special lets template markers become special tokens. Returns
 * malloc'd ids, or NULL with r filled. */
int32_t *ob_gen_tokenize(ob_server_state *s, const char *text, size_t len, bool add_special,
                         bool parse_special, int *n_out, ob_resp *r);
/* A prompt field as llama-server reads it: a string, a sequence of token ids and strings,
 * a {"prompt_string": ...} object, or an array of those (several prompts). */
typedef struct ob_gen_prompts {
    int n;
    int32_t *ids[OB_GEN_MAX_N];
    int len[OB_GEN_MAX_N];
} ob_gen_prompts;
bool ob_gen_prompts_parse(ob_server_state *s, json_t *prompt, ob_gen_prompts *p, ob_resp *r);
void ob_gen_prompts_free(ob_gen_prompts *p);

/* The request's sampling settings in llama-server's generation_settings shape. */
json_t *ob_gen_settings_json(ob_server_state *s, const ob_gen_req *g);

/* How a request wants its chat rendered (fields of an OpenAI-shaped body; borrowed). */
typedef struct ob_chat_opts {
    json_t *tools;              /* non-empty array, or NULL: the template sees no tools */
    json_t *kwargs;             /* chat_template_kwargs: more template variables, or NULL */
    bool add_generation_prompt; /* default true */
    bool continue_final;        /* continue_final_message */
    int enable_thinking;        /* -1: --reasoning (and kwargs) decide; 0 reasoning_effort "none" */
} ob_chat_opts;
typedef struct ob_chat_out {
    bool think_open;            /* the prompt ends inside <think>: the reply starts in a thought */
} ob_chat_out;

/* Reads add_generation_prompt, continue_final_message, tools, chat_template_kwargs and
 * reasoning_effort; false with r filled (400) on a wrong type or a contradiction. */
bool ob_gen_chat_opts(ob_server_state *s, json_t *body, ob_chat_opts *o, ob_resp *r);
/* Renders messages (OpenAI shape: role, content string or parts, tool_calls, ...)
 * through the chat template (--chat-template or the model's), with today's date_string,
 * tools, the thinking switch and a final assistant message as a prefill. Returns
 * malloc'd text or NULL with r filled. co may be NULL. */
char *ob_gen_render_chat(ob_server_state *s, json_t *messages, const ob_chat_opts *o, ob_chat_out *co, ob_resp *r);
/* Prompt ids as text, special tokens written out (llama-server's "prompt" field). */
json_t *ob_gen_prompt_json(ob_server_state *s, const int32_t *ids, int n);

ob_task_params ob_gen_task_params(const ob_gen_req *g, const int32_t *prompt, int n_prompt, int choice);

/* Ready and generating (not embedding mode); else fills r (503, or llama-server's 501). */
bool ob_gen_ready(ob_server_state *s, ob_resp *r);

/* Submits; on failure fills r with the right status (400 exceed_context_size_error, 503). */
ob_task *ob_gen_submit(ob_server_state *s, const ob_task_params *p, ob_resp *r);

/* Result of a finished task (non-streaming). */
typedef struct ob_gen_result {
    char *text; size_t text_len;
    ob_tok_rec *toks; int n_toks;
    ob_task_out last;   /* finish reason, counts, timings; last.stop_word points at stop_word */
    char *stop_word;    /* the matched stop string, copied: the task that owns it is freed
                         * before the reply is written */
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
    bool logprobs, include_usage, timings_per_token, return_tokens, post_sampling_probs;
    json_t *settings;   /* generation_settings for the final event (owned), or NULL */
};
ob_resp ob_gen_stream_start(ob_server_state *s, const ob_req *rq, ob_task *t, ob_gen_fmt fmt,
                            const ob_gen_req *g, ob_gen_stream **out);

/* Client socket of a request; true if the peer has closed it. */
int ob_srv_conn_fd(const ob_req *rq);
bool ob_srv_client_gone(int fd);

/* Splits <think>...</think> off the start of a reply: *reasoning gets the inside.
 * think_open: the prompt already opened the thought. fmt OB_RFMT_NONE leaves the text
 * whole; DEEPSEEK_LEGACY also keeps it whole in *content. */
void ob_gen_split_think(const char *text, size_t len, bool think_open, int fmt, char **content, char **reasoning);

/* Random id suffix for "chatcmpl-..." and "msg_..." ids. */
void ob_gen_id(char *out, size_t n, const char *prefix);

#endif
