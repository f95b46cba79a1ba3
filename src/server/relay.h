/* Relaying one HTTP request to another server and its reply back to our client
 * (proxy.c): the CORS proxy (--ui-mcp-proxy) and the router's children (router.c) use it.
 * libcurl's multi interface on the request's thread, in 100 ms slices. */
#ifndef OB_SERVER_RELAY_H
#define OB_SERVER_RELAY_H

#include <stdbool.h>
#include <stddef.h>

#include "server/server.h"

struct curl_slist;

typedef struct ob_srv_relay_req {
    const char *method;          /* GET, POST, PUT, PATCH, DELETE or HEAD */
    const char *url;             /* http or https */
    const char *body;            /* sent with POST, PUT, PATCH and DELETE */
    size_t body_len;
    struct curl_slist *headers;  /* request headers ("Name: value"); the relay frees them */
    bool follow_redirects;
    const volatile int *stop;    /* once set, the transfer gives up (the server is stopping) */
    int idle_timeout_s;          /* no byte for this long: the transfer fails */
} ob_srv_relay_req;

/* Answers r with the target's status, headers (less hop-by-hop ones, CORS headers, Server
 * and Set-Cookie) and body: whole when it is complete as its headers arrive, else as a
 * stream passed on as it comes. 502 when the target cannot be reached or the transfer
 * fails before the headers; 503 when *stop was set; r->status 0 (no reply) when the
 * client at client_fd left first. A stream stops when the client leaves or *stop is set. */
void ob_srv_relay(const ob_srv_relay_req *q, int client_fd, ob_resp *r);

#endif
