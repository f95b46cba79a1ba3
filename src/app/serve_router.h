/* `serve` in router mode: what the router (src/server/router.h) needs from the app layer,
 * filled by serve_router.c: the Hugging Face cache as llama-server lists it, removing a
 * model from it, downloads through the pull code (hf_pull.h), and the check of a child's
 * flags with serve's own parser. */
#ifndef OB_APP_SERVE_ROUTER_H
#define OB_APP_SERVE_ROUTER_H

#include "app/hf_pull.h"
#include "server/router.h"

/* What the hooks read (the -hf flags' token and --offline); owned by the caller. */
typedef struct ob_serve_router_ud {
    const char *token;
    bool offline;
} ob_serve_router_ud;

/* Fills h (its ud is ud); both must outlive the server. */
void ob_serve_router_hooks(ob_router_hooks *h, ob_serve_router_ud *ud, const ob_hf_flags *f);

/* --exit-with-stdin (a router's child): a thread that sends us SIGTERM once stdin reaches
 * its end, so the server shuts down as on a signal when the router closes the pipe or dies. */
ob_status ob_serve_watch_stdin(void);

#endif
