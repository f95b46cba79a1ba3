/* The HTTP server behind `1bit serve`: configuration, the request/response types the
 * route families share, and their entry points.
 *
 * Threads: libmicrohttpd runs one thread per connection; each route handler runs on the
 * connection's thread and may block on its own request (never on the model). One
 * scheduler thread (scheduler.c) owns the context and runs every decode step. */
#ifndef OB_SERVER_SERVER_H
#define OB_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>
#include "onebit.h"
#include "grammar/grammar.h"

typedef struct ob_sched ob_sched;
typedef struct ob_srv_embd ob_srv_embd;
typedef struct ob_srv_agent ob_srv_agent;
typedef struct ob_router ob_router;
typedef struct ob_router_hooks ob_router_hooks;
typedef struct ob_srv_cloud ob_srv_cloud;

typedef struct ob_srv_config {
    const char *host;          /* bind address; default 127.0.0.1 */
    int port;                  /* default 8080 */
    const char *api_key;       /* --api-key: a comma list of keys, as given */
    const char *api_key_file;  /* --api-key-file: a file of keys, one a line */
    const char *api_keys;      /* every key of both, one a line, set by ob_cmd_serve; NULL: no auth.
                                * Never logged nor shown by a route. */
    const char *cors_origins;  /* comma list ("*" allowed); NULL: same-origin only */
    size_t max_body;           /* request body limit, bytes */
    size_t max_header;         /* per-connection header memory, bytes */
    int timeout_s;             /* idle connection timeout */
    int header_timeout_s;      /* a request's headers must be complete this long after the
                                * connection opens or the previous reply (conn_guard.c) */
    int max_conns;
    int max_conns_per_ip;      /* connections from one address at once */
    int n_slots;               /* -np */
    int n_ctx;                 /* -c: total KV cells, split evenly between slots */
    int n_batch;               /* max tokens per forward */
    ob_kv_type type_k, type_v;
    bool metrics, embeddings, reranking, jinja, flash_attn;
    int n_gpu_layers;          /* accepted for llama-server compatibility */
    const char *model_path, *alias, *draft_path, *spec_type, *chat_template;
    int draft_max, draft_min;  /* speculative decoding with draft_path (llama-server's names) */
    char spec_warning[192];    /* set by ob_srv_parse_args: why a --spec-type kind does not run here */
    float draft_p_min;
    ob_model_params mp;
    /* llama-server's sampling flags: the defaults of every request that does not set them */
    ob_sampler_params sp;
    ob_dry_breaker_text dry_breakers; /* --dry-sequence-breaker (strings in argv) */
    bool seed_set;             /* -s N (N >= 0): requests without a seed use it; else random */
    int n_predict;             /* -n: default token limit (-1: none) */
    bool no_slots;             /* --no-slots: GET /slots answers 501 */
    const char *slot_save_path; /* --slot-save-path: the folder of /slots/{id}?action=save|restore files */
    /* llama-server's server-wide structured output: --grammar / --grammar-file (GBNF) or
     * -j / --json-schema / --json-schema-file (converted at start); the GBNF every request
     * without a grammar or schema of its own follows (grammar: set by ob_cmd_serve) */
    ob_grammar_flags grammar_flags;
    const char *grammar;
    const char *chat_template_file; /* --chat-template-file: read into chat_template by ob_cmd_serve */
    /* --chat-template-kwargs: a JSON object of template variables (text as given; checked
     * by ob_srv_parse_args); template_kwargs: it parsed, set and owned by ob_cmd_serve. A
     * request's chat_template_kwargs are merged over it, the request's keys winning. */
    const char *chat_template_kwargs;
    json_t *template_kwargs;
    int pooling;               /* --pooling: ob_pooling for embeddings; OB_POOLING_DEFAULT = the model's */
    const char *tags;          /* --tags: comma list, informational (/v1/models) */
    int reasoning;             /* --reasoning: OB_REASONING_* (auto: the template decides) */
    int reasoning_format;      /* --reasoning-format: OB_RFMT_* */
    bool kv_unified;           /* --kv-unified: each slot may fill the whole -c (here: -c cells per slot) */
    bool verbose;              /* -v: replies carry "__verbose" (the prompt as tokenized, ...) */
    int sleep_idle_s;          /* --sleep-idle-seconds: free the KV after this long idle; -1 off */
    /* llama-server's agent features (agent.h), off unless given */
    const char *tools;              /* --tools: comma list of built-in tools, or "all" */
    const char *mcp_servers_json;   /* --mcp-servers-json: inline {"mcpServers": ...} */
    const char *mcp_servers_config; /* --mcp-servers-config: a file of the same */
    bool ui_mcp_proxy;              /* --ui-mcp-proxy: /cors-proxy forwards requests */
    /* router mode (router.h): no model here; each model runs in a child `1bit serve` */
    bool router;
    const char *models_dir;         /* --models-dir: GGUF files (or folders of them) */
    const char *models_preset;      /* --models-preset: an INI file, a section per model */
    int models_max;                 /* --models-max: children at once (0: no limit) */
    bool models_autoload;           /* a request naming an unloaded model loads it */
    const char *router_flag;        /* the first router flag given (refused with -m) */
    int router_argc;                /* the router's own flags, passed on to the children */
    char **router_argv;
    const ob_router_hooks *router_hooks; /* the Hub's cache and the flag check (app layer) */
    bool exit_with_stdin;           /* --exit-with-stdin: exit when stdin closes (a child) */
    const char *models_config;      /* --models-config: a JSON file of cloud models (cloud.c) */
} ob_srv_config;

enum { OB_REASONING_AUTO = -1, OB_REASONING_OFF = 0, OB_REASONING_ON = 1 };
/* none: thoughts stay in the content; deepseek (and auto): <think> text goes to
 * reasoning_content; deepseek-legacy: both (the tags stay in the content too) */
enum { OB_RFMT_AUTO = 0, OB_RFMT_NONE, OB_RFMT_DEEPSEEK, OB_RFMT_DEEPSEEK_LEGACY };

void ob_srv_config_default(ob_srv_config *c);
/* Parses serve / llama-server flags; argv[0] is the command name. Strings point into argv.
 * Returns OB_ERR_ARG with a message for an unknown or malformed flag; sets *help when
 * -h/--help was given. */
ob_status ob_srv_parse_args(int argc, char **argv, ob_srv_config *c, bool *help,
                            char *err, size_t err_len);
void ob_srv_print_usage(const char *prog);
/* A llama-server built-in template name (chatml, llama3, ...): its Jinja text, or NULL;
 * *known tells whether llama-server knows the name (NULL then means we lack it). */
const char *ob_srv_named_template(const char *name, bool *known);

typedef struct ob_server ob_server;

/* Starts listening (health answers 503 while loading), loads the model, serves until
 * SIGINT/SIGTERM or a device fault. Returns the process exit code. */
int ob_server_run(const ob_srv_config *cfg);

/* The header deadline (conn_guard.c): MHD's connection notifier plus a watchdog thread. */
#ifdef ONEBIT_HAVE_MHD
struct MHD_Connection;
typedef struct ob_conn_guard ob_conn_guard;
ob_conn_guard *ob_conn_guard_new(double limit_s);
void ob_conn_guard_free(ob_conn_guard *g);
/* headers_done true: stop watching the connection; false: its next request's headers
 * are due by a new deadline. */
void ob_conn_guard_mark(ob_conn_guard *g, struct MHD_Connection *c, bool headers_done);
unsigned long ob_conn_guard_cut(ob_conn_guard *g);
#endif

/* ---- what handlers see ----------------------------------------------------------- */

typedef struct ob_req {
    const char *method, *path;  /* path without query string */
    const char *body;           /* NUL-terminated; may contain NULs before body_len */
    size_t body_len;
    struct MHD_Connection *conn;
} ob_req;

/* A route's answer: a complete body, or a stream that pulls bytes until it ends. */
typedef struct ob_stream ob_stream;
struct ob_stream {
    /* Appends the next bytes to *buf (malloc'd string, *len bytes), blocking until some
     * are ready. Returns 1 while more may follow, 0 at the end (after any final bytes),
     * -1 to abort the connection (the client went away). */
    int (*next)(ob_stream *st, char **buf, size_t *len);
    void (*close)(ob_stream *st);  /* the connection is gone or the stream ended */
    int fd;                        /* client socket, to notice a disconnect while waiting */
};

typedef struct ob_resp {
    int status;
    const char *content_type;   /* default application/json */
    char *body;                 /* malloc'd */
    size_t body_len;
    ob_stream *stream;          /* if set, body is unused and the reply is SSE */
    char *headers;              /* malloc'd "Name: value\n" lines added to the reply, or NULL;
                                 * a Content-Type among them replaces the default */
} ob_resp;

/* Server state handlers need (owned by http.c). */
typedef struct ob_server_state {
    const ob_srv_config *cfg;
    ob_model *model;
    const ob_tokenizer *tok;
    ob_sched *sched;            /* NULL in embedding mode: generation answers 501 */
    ob_srv_embd *embd;          /* embeddings/rerank context, or NULL (not in embedding mode) */
    ob_srv_agent *agent;        /* tools, MCP servers, CORS proxy (agent.h) */
    ob_router *router;          /* router mode: the models and their children (router.h) */
    const ob_srv_cloud *cloud;  /* --models-config: remote models (cloud.c), or NULL */
    const char *model_id;       /* alias or file name */
    const char *chat_template;  /* model's template or NULL */
    volatile int ready;         /* 0 loading, 1 ready, -1 failed */
    volatile int sleeping;      /* --sleep-idle-seconds: sched is NULL until a request wakes it */
    int n_ctx_slot, n_slots;    /* the scheduler's, kept for /props while asleep */
    double t_start;
} ob_server_state;

/* ---- json.c: request parsing and replies ------------------------------------------- */

/* Error body {"error":{"code","message","type"}}; type follows the status unless given. */
void ob_srv_error(ob_resp *r, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Serialises and takes ownership of j (decref'd). */
void ob_srv_json(ob_resp *r, int status, json_t *j);
/* Parses the body as a JSON object; on failure fills r with a 400 and returns NULL. */
json_t *ob_srv_parse_body(const ob_req *rq, ob_resp *r);
/* A JSON string from bytes that may be invalid UTF-8 (bad bytes become U+FFFD). */
json_t *ob_srv_jstr(const char *s, size_t n);
/* Appends "data: <json>\n\n" (or with "event: <name>\n" first) to a growing buffer. */
void ob_srv_sse(char **buf, size_t *len, const char *event, json_t *j);
void ob_srv_buf_add(char **buf, size_t *len, const char *s, size_t n);

/* Typed field readers: return false and fill r with a 400 when the field exists with the
 * wrong type or range. Absent fields leave *out unchanged. */
bool ob_srv_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, ob_resp *r);
bool ob_srv_get_num(json_t *o, const char *key, double lo, double hi, double *out, ob_resp *r);
bool ob_srv_get_bool(json_t *o, const char *key, bool *out, ob_resp *r);
/* The text of a content field, appended to *out: a string, or an array whose items' text
 * is joined by newlines (blocks: Anthropic blocks, each of type "text"; else OpenAI parts
 * with a text field); null or absent adds nothing; any other item is a 400 naming what. */
bool ob_srv_joined_text(json_t *v, const char *what, bool blocks, char **out, size_t *len, ob_resp *r);
/* A content field's items in the other API's shape, appended to out: text items (type
 * "text") as {"type": "text", "text": ...}, items of image_type through image(); a string is
 * one text item, null adds nothing, any other item is a 400 naming what. blocks: the field
 * is Anthropic's (content blocks, to OpenAI parts); else OpenAI's parts, to Anthropic
 * blocks, where empty text is left out (Anthropic refuses it). */
bool ob_srv_convert_parts(json_t *c, const char *what, bool blocks, const char *image_type, json_t *(*image)(json_t *),
                          json_t *out, ob_resp *r);

/* ---- route families ---------------------------------------------------------------- */

/* Answers one request: the route families in turn, else 404 (http.c). */
void ob_srv_dispatch(ob_server_state *s, const ob_req *rq, ob_resp *r);

/* Each returns true if it owns the path (and filled r), false to let the next try. */
bool ob_srv_route_vertex(ob_server_state *s, const ob_req *rq, ob_resp *r);
bool ob_srv_route_openai(ob_server_state *s, const ob_req *rq, ob_resp *r);
bool ob_srv_route_llama(ob_server_state *s, const ob_req *rq, ob_resp *r);
bool ob_srv_route_anthropic(ob_server_state *s, const ob_req *rq, ob_resp *r);
bool ob_srv_route_responses(ob_server_state *s, const ob_req *rq, ob_resp *r);
bool ob_srv_route_lemonade(ob_server_state *s, const ob_req *rq, ob_resp *r);

/* ---- embeddings.c: /v1/embeddings, /embedding, /v1/rerank, /rerank ------------------- */

/* Embedding mode: --embeddings, --reranking, or a model with no LM head (an encoder). */
bool ob_srv_embd_wanted(const ob_srv_config *cfg, const ob_model *m);
/* One embeddings context for every request (behind a mutex). Owns nothing of m. */
ob_status ob_srv_embd_new(ob_model *m, const ob_srv_config *cfg, ob_srv_embd **out, char *err, size_t err_len);
void ob_srv_embd_free(ob_srv_embd *e);
bool ob_srv_embd_ranks(const ob_srv_embd *e);
int ob_srv_embd_n_ctx(const ob_srv_embd *e);  /* longest input, tokens */
const ob_context *ob_srv_embd_context(const ob_srv_embd *e); /* its context (`1bit census`: placement) */
/* True once ob_decode reported a device fault; the server must then exit non-zero. */
bool ob_srv_embd_failed(ob_srv_embd *e);
/* Totals since start, for /metrics and Lemonade's /stats. */
typedef struct ob_srv_embd_stats {
    uint64_t tokens, requests, n_decode;
    double seconds;
    int last_tokens;
    double last_s;
} ob_srv_embd_stats;
void ob_srv_embd_get_stats(ob_srv_embd *e, ob_srv_embd_stats *out);
/* Owns the embedding and rerank paths (answers 501 on them when s->embd is NULL). */
bool ob_srv_route_embeddings(ob_server_state *s, const ob_req *rq, ob_resp *r);

/* ---- agent.c: --tools, MCP servers, --ui-mcp-proxy (/tools, /cors-proxy) ------------- */

/* Reads the flags (an unknown tool or an unreadable MCP config is an error); starts
 * nothing. */
ob_status ob_srv_agent_new(const ob_srv_config *cfg, ob_srv_agent **out, char *err, size_t err_len);
/* The same checks, silently, for the command line (a mistake there is a flag error). */
ob_status ob_srv_agent_check(const ob_srv_config *cfg, char *err, size_t err_len);
/* Starts the MCP servers and lists their tools (before the server reports ready). */
void ob_srv_agent_warmup(ob_srv_agent *a);
/* Calls in flight give up (within ~100 ms); before the HTTP server is stopped. */
void ob_srv_agent_stop(ob_srv_agent *a);
/* Kills and reaps the MCP servers. */
void ob_srv_agent_free(ob_srv_agent *a);
bool ob_srv_route_agent(ob_server_state *s, const ob_req *rq, ob_resp *r);

/* router_routes.c: every route of router mode (/models..., relayed requests, /props). */
bool ob_srv_route_router(ob_server_state *s, const ob_req *rq, ob_resp *r);

/* ---- cloud.c: --models-config, models served by a remote OpenAI or Anthropic API ----- */

/* Reads and checks the file (NULL path: *out NULL); one line in err when it is bad. */
ob_status ob_srv_cloud_new(const char *path, ob_srv_cloud **out, char *err, size_t err_len);
void ob_srv_cloud_free(ob_srv_cloud *c);
/* Appends the remote models to a /v1/models "data" array (c may be NULL). */
void ob_srv_cloud_list(const ob_srv_cloud *c, json_t *data);
/* Owns a POST to a chat, messages or completions route whose "model" is a remote one. */
bool ob_srv_route_cloud(ob_server_state *s, const ob_req *rq, ob_resp *r);

/* vertex.c: the port to listen on (AIP_HTTP_PORT in Vertex AI's prediction mode). */
int ob_srv_vertex_port(int port);

/* metrics.c: Prometheus text of the scheduler's counters. */
char *ob_srv_metrics_text(ob_server_state *s);

#endif
