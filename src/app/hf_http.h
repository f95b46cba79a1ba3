/* HTTP for `1bit pull` (libcurl): the Hub's API into memory, a file's headers, and a file
 * into the cache with resume (Range), retries with backoff on 429 / 5xx (Retry-After
 * honoured), a rate limit, SHA-256 verification and a progress bar on a terminal.
 * Built without libcurl or libcrypto, every call says so (OB_ERR_UNSUPPORTED). */
#ifndef OB_APP_HF_HTTP_H
#define OB_APP_HF_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "onebit.h"

typedef struct ob_hf_http {
    void *curl;        /* CURL easy handle, reused for keep-alive */
    const char *token; /* sent as "Authorization: Bearer", only to the first host of a
                          request (not to a CDN it redirects to); never printed */
    int64_t max_recv;  /* bytes/s, 0: no limit (--limit-rate) */
    int max_tries;     /* attempts per request before giving up (default 6) */
    double max_wait_s; /* longest Retry-After honoured (default 120) */
    bool progress;     /* a progress bar on stderr (stderr is a terminal) */
    /* the caller's progress report (the router's download events): a file's bytes so far,
     * at most 10 times a second and at its end; NULL: none */
    void (*on_progress)(void *ud, const char *label, int64_t have, int64_t size);
    void *progress_ud;
    const volatile int *cancel; /* once set, requests and waits give up ("cancelled") */
} ob_hf_http;

/* What a request answered. */
typedef struct ob_hf_resp {
    long status;           /* final HTTP status; 0: no answer */
    bool unreachable;      /* the host could not be resolved or connected to */
    char *body;            /* GET: the body, NUL-terminated (malloc'd) */
    size_t body_len;
    char etag[160];        /* ETag, normalised (no W/, no quotes) */
    char linked_etag[160]; /* X-Linked-Etag: an LFS file's sha256 */
    char commit[80];       /* X-Repo-Commit */
    char location[2048];   /* Location of a redirect */
    char error_code[64];   /* X-Error-Code (RepoNotFound, EntryNotFound, GatedRepo, ...) */
    char error_msg[256];   /* X-Error-Message */
    int64_t length;        /* Content-Length, -1 if none */
    int64_t linked_size;   /* X-Linked-Size, -1 if none */
} ob_hf_resp;

/* A file to fetch into part (its .incomplete), appending from part's current size; on
 * success part is renamed to final. */
typedef struct ob_hf_download {
    const char *url;
    const char *part;   /* blobs/<etag>.incomplete */
    const char *final;  /* blobs/<etag> */
    const char *label;  /* name shown in messages and the progress bar */
    const char *sha256; /* expected SHA-256 (hex), or NULL */
    int64_t size;       /* expected bytes, or -1 */
} ob_hf_download;

ob_status ob_hf_http_init(ob_hf_http *h, char *err, size_t err_len);
void ob_hf_http_free(ob_hf_http *h);
void ob_hf_resp_free(ob_hf_resp *r);

/* GET url into r->body (refused past max bytes). Retries 429 / 5xx and dropped
 * connections; any other status is returned in r->status with OB_OK. */
ob_status ob_hf_http_get(ob_hf_http *h, const char *url, size_t max, ob_hf_resp *r, char *err, size_t err_len);
/* HEAD url without following redirects to another host (the Hub's redirect carries the
 * file's headers); relative redirects (a renamed repo) are followed. */
ob_status ob_hf_http_head(ob_hf_http *h, const char *url, ob_hf_resp *r, char *err, size_t err_len);
/* Downloads d->url to d->part and renames it to d->final once its size and SHA-256 are
 * right. A checksum mismatch removes the part. A partial part stays for the next try. */
ob_status ob_hf_http_download(ob_hf_http *h, const ob_hf_download *d, char *err, size_t err_len);
/* The SHA-256 of a file in hex (65 bytes). */
ob_status ob_hf_sha256_file(const char *path, char hex[65], char *err, size_t err_len);
/* "1.5 MiB": a byte count for messages. */
void ob_hf_fmt_bytes(double bytes, char *out, size_t cap);
/* Percent-encodes each part of a repo path, keeping the slashes. */
ob_status ob_hf_url_path(const char *path, char *out, size_t cap);

#endif
