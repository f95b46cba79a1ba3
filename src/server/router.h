/* Router mode (llama-server's "using multiple models"): a server started with no model
 * lists models from --models-dir, --models-preset and the Hugging Face cache, and serves
 * each one by running a child `1bit serve` for it on 127.0.0.1 and a port of its own,
 * relaying requests to the child the request's "model" names (docs/server.md).
 *
 * router.c: the state, the model list (its three sources, reloaded on demand) and the
 * lifecycle; router_children.c: the monitor thread that starts, watches and stops the
 * children; router_routes.c: the HTTP routes (/models..., relayed requests, /props).
 *
 * Threads: requests run on their connection's thread (http.c) and only ask for loads and
 * unloads; one monitor thread spawns, health-checks, stops and reaps every child and
 * relays its output to our stderr. Everything below `mu` is shared: a request holds the
 * lock only to read or flag a model, never across a wait on the network or a child. */
#ifndef OB_SERVER_ROUTER_H
#define OB_SERVER_ROUTER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "server/agent.h"
#include "server/server.h"

/* What the router needs from the app layer (src/app/serve_router.c fills it): the Hub's
 * cache (listing, removal, download) and the check of a child's command line. */
struct ob_router_hooks {
    void *ud;
    /* The cached models, as llama-server lists its cache: an array of {"id": "org/name:TAG",
     * "path": the file of part 1} (new reference), or NULL with err. */
    json_t *(*cache_list)(void *ud, char *err, size_t err_len);
    /* Removes a cached model ("org/name:TAG"): its snapshot files and the blobs no other
     * file links to. */
    ob_status (*cache_remove)(void *ud, const char *id, char *err, size_t err_len);
    /* Downloads "org/name[:TAG]" into the cache (as `1bit pull`), reporting each file's
     * bytes; gives up once *cancel is set. */
    ob_status (*pull)(void *ud, const char *spec, void (*progress)(void *pud, const char *file, int64_t have,
                                                                   int64_t size),
                      void *pud, const volatile int *cancel, char *err, size_t err_len);
    /* Would `serve` accept these flags (argv[0] is a command name)? */
    ob_status (*check_args)(int argc, char **argv, char *err, size_t err_len);
};

typedef enum {
    OB_RT_UNLOADED = 0,
    OB_RT_LOADING,     /* asked for: waiting for room, or the child is starting */
    OB_RT_LOADED,      /* the child answers /health */
    OB_RT_DOWNLOADING, /* POST /models: being fetched into the cache (no child) */
} ob_rt_status;

typedef enum { OB_RT_SRC_PRESET = 0, OB_RT_SRC_DIR, OB_RT_SRC_CACHE } ob_rt_source;

/* A list of owned strings (a command line, a model's flags). */
typedef struct ob_rt_strv {
    char **v;
    int n, cap;
} ob_rt_strv;

bool ob_rt_strv_add(ob_rt_strv *s, const char *x);
void ob_rt_strv_free(ob_rt_strv *s);

/* One model of the list, and its child while it runs. */
typedef struct ob_rt_model {
    char *id;                 /* the name requests use */
    json_t *aliases, *tags;   /* arrays of strings (the preset's alias / tags) */
    ob_rt_source source;
    char *path;               /* the GGUF (models dir, cache), or NULL */
    char *preset_ini;         /* the model's preset as INI text, or NULL */
    ob_rt_strv opts;          /* its flags for the child: the model, then the preset's options */
    bool load_on_startup;
    int stop_timeout_s;       /* after an unload, SIGKILL this long after asking it to exit */
    /* the instance */
    ob_rt_status status;
    bool want_load;           /* LOADING with no child yet: the monitor starts it once there is room */
    bool stopping;            /* asked to exit; killed at stop_deadline */
    bool gone;                /* no longer in any source: dropped once unloaded */
    bool restart;             /* a reload unloads it (gone, or new flags) and waits for that */
    bool failed;              /* the last child ended on its own, or did not start */
    int exit_code;
    double stop_deadline, next_health, last_used;
    ob_subproc proc;          /* pid > 0 while the child lives */
    int port;                 /* the child's, 0 when none */
    ob_rt_strv args;          /* the child's command line, as last started (for the listing) */
    json_t *info;             /* the child's own /v1/models entry, once loaded */
    char line[2048];          /* the child's output: the line being assembled */
    size_t line_len;
    /* a download (POST /models) */
    volatile int cancel;
} ob_rt_model;

typedef struct ob_rt_sub ob_rt_sub;   /* a GET /models/sse client */
typedef struct ob_rt_download ob_rt_download;

struct ob_router {
    const ob_srv_config *cfg;
    const ob_router_hooks *hooks;     /* NULL: no Hub cache (and no downloads) */
    char exe[4096];                   /* this binary, for the children */
    ob_rt_strv base;                  /* the router's flags the children get (its own left out) */
    bool curl;                        /* libcurl started (ob_srv_proxy_init) */
    bool listed;                      /* the sources were read once (later reads are reloads) */
    pthread_mutex_t mu;
    pthread_cond_t cv;                /* a model changed state, or an event was queued */
    ob_rt_model **models;             /* sorted by id */
    int n_models, cap_models;
    ob_rt_sub *subs;
    ob_rt_download *downloads;
    volatile int stop;                /* the server is stopping: requests and streams give up */
    int wake[2];                      /* a byte here: the monitor looks again now */
    pthread_t monitor;
    bool monitor_started;
};

/* ---- router.c ---------------------------------------------------------------------- */

/* Reads the sources and starts the monitor (and the load-on-startup models). A preset
 * that does not read, or a model whose flags `serve` would refuse, is an error. */
ob_status ob_router_new(const ob_srv_config *cfg, ob_router **out, char *err, size_t err_len);
/* Waits in requests and streams give up (before the HTTP server is stopped). */
void ob_router_stop(ob_router *rt);
/* Stops every child (asked to exit, killed after its stop timeout), joins the threads. */
void ob_router_free(ob_router *rt);
/* Reads the sources again: models gone from them are dropped (unloaded first when
 * running), running models whose flags changed are unloaded, new ones are added. */
ob_status ob_router_reload(ob_router *rt, char *err, size_t err_len);

/* Locked: the model named id (or one of its aliases), or NULL. */
ob_rt_model *ob_rt_find(ob_router *rt, const char *id);
/* Locked: appends a model (kept sorted); false when out of memory. */
bool ob_rt_add(ob_router *rt, ob_rt_model *m);
/* Locked: takes m out of the list and frees it (it has no child). */
void ob_rt_remove(ob_router *rt, ob_rt_model *m);
void ob_rt_model_free(ob_rt_model *m);
/* Locked: queues the event {"model", "event", "data"} for every /models/sse client
 * (data is taken; may be NULL). */
void ob_rt_event(ob_router *rt, const char *event, const char *model, json_t *data);
/* Locked: the child's command line for m on port (0 for the listing). */
bool ob_rt_child_args(ob_router *rt, const ob_rt_model *m, int port, ob_rt_strv *out);
const char *ob_rt_status_name(ob_rt_status s);

/* ---- router_children.c ---------------------------------------------------------------- */

void *ob_rt_monitor_main(void *rt);
/* Wakes the monitor (after a model was flagged). */
void ob_rt_wake(ob_router *rt);
/* Locked: asks for m to be loaded (LOADING until the child answers). */
void ob_rt_request_load(ob_router *rt, ob_rt_model *m);
/* Locked: asks m's child to exit (a download is cancelled). */
void ob_rt_request_unload(ob_router *rt, ob_rt_model *m);
/* Is a child running (or starting, or asked for) for m? */
bool ob_rt_running(const ob_rt_model *m);

/* ---- router_routes.c ---------------------------------------------------------------- */

/* Frees the /models/sse clients' queues and waits for running downloads (at free). */
void ob_rt_routes_free(ob_router *rt);

#endif
