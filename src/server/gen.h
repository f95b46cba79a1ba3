/* Generation requests shared by the route families: reading sampling fields from a
 * request, prompts and chat templates into tokens, running a task to completion (with a
 * disconnect check) or as a stream of SSE bytes. */
#ifndef OB_SERVER_GEN_H
#define OB_SERVER_GEN_H

#include "chat/toolcall.h"
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
    int id_slot;                         /* llama-server's slot pinning; -1: any */
    bool logprobs, stream, include_usage, ignore_eos, echo;
    bool post_sampling_probs;            /* llama-server: probabilities after the sampling chain */
    bool return_tokens, timings_per_token, verbose;
    int reasoning_format;                /* OB_RFMT_*: the request's, else the server's */
    bool think_open;                     /* the prompt opened a thought (ob_chat_out) */
    bool seed_given;                     /* the request or the server fixed the seed */
    ob_dry_breaker_text dry_breakers;    /* DRY's (borrowed: the request's or --dry-sequence-breaker's),
                                          * made into tokens at submit when DRY is on */
    json_t *response_fields;             /* llama-server: array of field paths to keep (borrowed) */
    const char *grammar;                 /* GBNF the output follows (borrowed from the body's "grammar",
                                          * where a JSON schema's conversion is put, or tcg's), or NULL */
    /* tool calls (gen_tools.c): how the reply is read, and the grammar that holds calls */
    int tc_format;                       /* ob_tc_format; OB_TC_NONE: the reply is not read for calls */
    json_t *tools;                       /* the request's tools, OpenAI shape (a reference), or NULL */
    bool parallel_tools;                 /* several calls in one reply (parallel_tool_calls) */
    ob_tc_grammar tcg;                   /* the tool-call grammar, when one holds */
} ob_gen_req;

/* Frees what ob_gen_parse and ob_gen_tools_setup gave g (g zeroed or parsed). */
void ob_gen_req_clear(ob_gen_req *g);

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

/* ---- gen_sampling.c: llama-server's other samplers (issue #31) ------------------------- */

/* Reads mirostat, mirostat_tau, mirostat_eta, typical_p, dry_multiplier, dry_base,
 * dry_allowed_length, dry_penalty_last_n, dry_sequence_breakers, xtc_probability,
 * xtc_threshold and repeat_last_n into g (defaults: the server's flags); false with r
 * filled (400) on a bad value. A -1 window becomes the slot's context, as llama-server's. */
bool ob_gen_parse_samplers(ob_server_state *s, json_t *o, ob_gen_req *g, ob_resp *r);
/* Their values into a generation_settings object. */
void ob_gen_samplers_json(const ob_gen_req *g, json_t *j);

/* How a request wants its chat rendered (fields of an OpenAI-shaped body; borrowed). */
enum { OB_TOOLS_AUTO = 0, OB_TOOLS_NONE, OB_TOOLS_REQUIRED, OB_TOOLS_NAMED };
typedef struct ob_chat_opts {
    json_t *tools;              /* non-empty array, or NULL: the template sees no tools */
    int tool_choice;            /* OB_TOOLS_*: none drops the tools (and reading calls) */
    const char *tool_name;      /* OB_TOOLS_NAMED: the function (borrowed) */
    bool parallel;              /* parallel_tool_calls (default true, as OpenAI's) */
    json_t *kwargs;             /* chat_template_kwargs: more template variables, or NULL */
    bool add_generation_prompt; /* default true */
    bool continue_final;        /* continue_final_message */
    int enable_thinking;        /* -1: --reasoning (and kwargs) decide; 0 reasoning_effort "none" */
} ob_chat_opts;
typedef struct ob_chat_out {
    bool think_open;            /* the prompt ends inside <think>: the reply starts in a thought */
    int tc_format;              /* ob_tc_format the template's model writes calls in */
    int think;                  /* 0: no <think> in the template (or thinking off); 1: the reply
                                 * may open one; 2: the prompt opened it */
} ob_chat_out;

/* Reads add_generation_prompt, continue_final_message, tools, tool_choice (OpenAI's string
 * or {"type":"function","function":{"name"}}, and the Responses API's {"type":"function",
 * "name"}), parallel_tool_calls, chat_template_kwargs and reasoning_effort; false with r
 * filled (400) on a wrong type or a contradiction. */
bool ob_gen_chat_opts(ob_server_state *s, json_t *body, ob_chat_opts *o, ob_resp *r);
/* Checks a tool_choice against the tools (a named one must be among them, required needs
 * tools); false with r filled. */
bool ob_gen_tool_choice_check(const ob_chat_opts *o, ob_resp *r);
/* Renders messages (OpenAI shape: role, content string or parts, tool_calls, ...)
 * through the chat template (--chat-template or the model's), with today's date_string,
 * tools, the thinking switch and a final assistant message as a prefill. Returns
 * malloc'd text or NULL with r filled. co may be NULL. */
char *ob_gen_render_chat(ob_server_state *s, json_t *messages, const ob_chat_opts *o, ob_chat_out *co, ob_resp *r);
/* ---- gen_tools.c: tool calls in requests and replies --------------------------------- */

/* After the prompt is rendered: the format calls are read in (the template's), and the
 * grammar that holds them (lazy from a trigger for auto, from the first token for
 * required or a named tool; none when the request brings its own grammar or schema, which
 * required then refuses). A tool schema the grammar cannot hold leaves auto unconstrained
 * and is a 400 for required. gpt-oss replies are read (channels) even without tools. */
bool ob_gen_tools_setup(ob_server_state *s, const ob_chat_opts *co, const ob_chat_out *out, ob_gen_req *g, ob_resp *r);

/* A chat reply routed as it comes: a leading <think>...</think> (or gpt-oss's analysis
 * channel) to reasoning, tool calls out of the content (each given an id), the rest
 * content. Events are chat/toolcall.h's, with .id the call's id. */
typedef struct ob_reply {
    int think;                  /* 0 undecided, 1 inside a leading thought, 2 after it (or none) */
    bool reasoning_as_content;  /* reasoning_format none */
    char *hold; size_t hold_len;
    ob_tc_stream *tc;           /* NULL: the content is not read for calls */
    json_t *tools;              /* a reference the stream borrows */
    bool parallel;
    int tc_format;
    int n_calls;
    char ids[OB_TC_MAX_CALLS][40];
    ob_tc_event_fn fn;
    void *ud;
    bool oom;
} ob_reply;
void ob_reply_init(ob_reply *rp, const ob_gen_req *g);
void ob_reply_feed(ob_reply *rp, const char *text, size_t len, bool final, ob_tc_event_fn fn, void *ud);
void ob_reply_free(ob_reply *rp);

/* A whole reply, read the same way. */
typedef struct ob_reply_call { char *name, *args; size_t args_len; char id[40]; } ob_reply_call;
typedef struct ob_reply_all {
    char *content, *reasoning;  /* never NULL after ob_reply_whole; reasoning "" when none */
    size_t content_len, reasoning_len;
    ob_reply_call calls[OB_TC_MAX_CALLS];
    int n_calls;
} ob_reply_all;
void ob_reply_whole(const ob_gen_req *g, const char *text, size_t len, ob_reply_all *out);
void ob_reply_all_free(ob_reply_all *a);

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
    ob_reply rp;        /* chat replies: reasoning, content and tool calls as they come */
    int blk_index, blk_kind; /* the open content block (Anthropic) or output item (Responses) */
    bool blk_any;            /* one was opened */
    json_t *items;           /* the Responses API's finished output items (owned), or NULL */
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
