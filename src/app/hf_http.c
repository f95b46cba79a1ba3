/* HTTP for `1bit pull`: see hf_http.h. One easy handle, reset before each request, so a
 * connection to the Hub or its CDN is reused across requests and files. */
#include "app/hf_http.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/common.h"

ob_status ob_hf_url_path(const char *path, char *out, size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    size_t w = 0;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        bool keep = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
                    *p == '.' || *p == '_' || *p == '~' || *p == '/';
        if (w + 4 > cap) return OB_ERR_ARG;
        if (keep) out[w++] = (char)*p;
        else {
            out[w++] = '%';
            out[w++] = hex[*p >> 4];
            out[w++] = hex[*p & 15];
        }
    }
    if (w >= cap) return OB_ERR_ARG;
    out[w] = 0;
    return OB_OK;
}

void ob_hf_fmt_bytes(double b, char *out, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) b /= 1024, i++;
    snprintf(out, cap, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

void ob_hf_resp_free(ob_hf_resp *r) {
    free(r->body);
    r->body = NULL;
    r->body_len = 0;
}

#if defined(ONEBIT_HAVE_CURL) && defined(ONEBIT_HAVE_CRYPTO)
#include <curl/curl.h>
#include <openssl/evp.h>

#define OB_HF_UA "onebit-1bit/pull"

/* State of one request: where its body goes, and what its headers said. */
typedef struct sink {
    CURL *curl;
    ob_hf_resp *r;
    double retry_after;   /* Retry-After in seconds, -1 if none */
    int64_t range_start;  /* Content-Range's first byte, -1 if none */
    /* GET into memory */
    size_t max;
    bool over;
    /* a file */
    int fd;
    int64_t have, size;
    EVP_MD_CTX *md;
    bool started, discard, restarted, too_long, bad_range;
    int write_errno;
    /* the progress bar, and the caller's report */
    const char *label;
    bool progress;
    double t_last, rate;
    int64_t have_last;
    ob_hf_http *h;
    double t_report;
} sink;

static bool cancelled(const ob_hf_http *h) { return h->cancel && *h->cancel; }

/* The caller's progress callback, at most 10 times a second (always when final). */
static void report(sink *s, bool final) {
    if (!s->h || !s->h->on_progress) return;
    double now = ob_time_s();
    if (!final && now - s->t_report < 0.1) return;
    s->t_report = now;
    s->h->on_progress(s->h->progress_ud, s->label, s->have, s->size);
}

/* curl's transfer callback: a cancelled pull stops its transfer at once. */
static int on_xfer(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return cancelled(ud) ? 1 : 0;
}

ob_status ob_hf_http_init(ob_hf_http *h, char *err, size_t err_len) {
    memset(h, 0, sizeof *h);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "libcurl did not start");
    h->curl = curl_easy_init();
    if (!h->curl) {
        curl_global_cleanup();
        return ob_fail(err, err_len, OB_ERR_NOMEM, "libcurl did not start");
    }
    h->max_tries = 6;
    h->max_wait_s = 120;
    return OB_OK;
}

void ob_hf_http_free(ob_hf_http *h) {
    if (!h->curl) return;
    curl_easy_cleanup(h->curl);
    curl_global_cleanup();
    h->curl = NULL;
}

/* A URL as messages show it: no query (a CDN's signed URL carries its credentials there). */
static void url_shown(const char *url, char *out, size_t cap) {
    snprintf(out, cap, "%.*s", (int)strcspn(url, "?#"), url);
}

static void copy_value(char *dst, size_t cap, const char *v, size_t n) {
    while (n && (*v == ' ' || *v == '\t')) v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
    if (n >= cap) n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

/* ETag: W/"abc" or "abc" -> abc (huggingface_hub's normalisation). */
static void normalise_etag(char *e) {
    char *s = e;
    if (!strncmp(s, "W/", 2)) s += 2;
    size_t n = strlen(s);
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') s++, n -= 2;
    memmove(e, s, n);
    e[n] = 0;
}

static int64_t parse_i64(const char *v) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    return end == v || errno || x < 0 ? -1 : (int64_t)x;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
    sink *s = ud;
    ob_hf_resp *r = s->r;
    size_t n = sz * nm;
    if (n >= 5 && !strncmp(p, "HTTP/", 5)) {
        /* a new response (after a redirect or a 100): its headers replace the last ones'
         * except the Hub's own, which only its redirect carries */
        r->etag[0] = r->location[0] = r->error_code[0] = r->error_msg[0] = 0;
        r->length = -1;
        s->retry_after = -1;
        s->range_start = -1;
        return n;
    }
    const char *colon = memchr(p, ':', n);
    if (!colon) return n;
    size_t k = (size_t)(colon - p), vn = n - k - 1;
    const char *v = colon + 1;
    char tmp[64];
#define IS(name) (k == sizeof(name) - 1 && !strncasecmp(p, name, k))
    if (IS("etag")) { copy_value(r->etag, sizeof r->etag, v, vn); normalise_etag(r->etag); }
    else if (IS("x-linked-etag")) {
        copy_value(r->linked_etag, sizeof r->linked_etag, v, vn);
        normalise_etag(r->linked_etag);
    }
    else if (IS("x-repo-commit")) copy_value(r->commit, sizeof r->commit, v, vn);
    else if (IS("location")) copy_value(r->location, sizeof r->location, v, vn);
    else if (IS("x-error-code")) copy_value(r->error_code, sizeof r->error_code, v, vn);
    else if (IS("x-error-message")) copy_value(r->error_msg, sizeof r->error_msg, v, vn);
    else if (IS("content-length")) { copy_value(tmp, sizeof tmp, v, vn); r->length = parse_i64(tmp); }
    else if (IS("x-linked-size")) { copy_value(tmp, sizeof tmp, v, vn); r->linked_size = parse_i64(tmp); }
    else if (IS("retry-after")) {
        /* seconds, or an HTTP date */
        copy_value(tmp, sizeof tmp, v, vn);
        int64_t secs = parse_i64(tmp);
        if (secs >= 0) s->retry_after = (double)secs;
        else {
            time_t t = curl_getdate(tmp, NULL);
            if (t > 0) s->retry_after = t > time(NULL) ? (double)(t - time(NULL)) : 0;
        }
    } else if (IS("content-range")) {
        /* bytes A-B/T */
        copy_value(tmp, sizeof tmp, v, vn);
        if (!strncasecmp(tmp, "bytes ", 6)) s->range_start = parse_i64(tmp + 6);
    }
#undef IS
    return n;
}

static size_t on_memory(char *p, size_t sz, size_t nm, void *ud) {
    sink *s = ud;
    ob_hf_resp *r = s->r;
    size_t n = sz * nm;
    if (r->body_len + n > s->max) {
        s->over = true;
        return 0;
    }
    char *b = realloc(r->body, r->body_len + n + 1);
    if (!b) return 0;
    memcpy(b + r->body_len, p, n);
    r->body = b;
    r->body_len += n;
    b[r->body_len] = 0;
    return n;
}


static void fmt_time(double s, char *out, size_t cap) {
    if (!(s >= 0) || s > 359999) { snprintf(out, cap, "--:--"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(out, cap, "%ld:%02ld", t / 60, t % 60);
}

/* One line, redrawn at most 5 times a second: name, percent, bar, bytes, rate, ETA. */
static void draw(sink *s, bool force) {
    double now = ob_time_s(), dt = now - s->t_last;
    if (!s->progress || (!force && dt < 0.2)) return;
    if (dt > 0) {
        double inst = (double)(s->have - s->have_last) / dt;
        s->rate = s->rate > 0 ? 0.7 * s->rate + 0.3 * inst : inst;
    }
    s->t_last = now;
    s->have_last = s->have;
    char have[32], total[32], rate[32], eta[32];
    ob_hf_fmt_bytes((double)s->have, have, sizeof have);
    ob_hf_fmt_bytes(s->rate, rate, sizeof rate);
    if (s->size > 0) {
        char bar[21];
        int pct = (int)(100.0 * (double)s->have / (double)s->size), fill = pct / 5;
        for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
        bar[20] = 0;
        ob_hf_fmt_bytes((double)s->size, total, sizeof total);
        fmt_time(s->rate > 0 ? (double)(s->size - s->have) / s->rate : -1, eta, sizeof eta);
        fprintf(stderr, "\r%-32.32s %3d%% [%s] %s / %s  %s/s  ETA %s\033[K", s->label, pct, bar, have, total, rate, eta);
    } else {
        fprintf(stderr, "\r%-32.32s %s  %s/s\033[K", s->label, have, rate);
    }
    fflush(stderr);
}

static size_t on_file(char *p, size_t sz, size_t nm, void *ud) {
    sink *s = ud;
    size_t n = sz * nm;
    if (!s->started) {
        long code = 0;
        curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
        if (code >= 300 && code < 400) return n; /* a redirect's body */
        s->started = true;
        if (code == 206) {
            if (s->range_start != s->have) {
                s->bad_range = true;
                return 0;
            }
        } else if (code == 200) {
            if (s->have > 0) {
                /* the server ignored Range: the body is the whole file, so start over */
                if (ftruncate(s->fd, 0) || lseek(s->fd, 0, SEEK_SET) < 0) {
                    s->write_errno = errno;
                    return 0;
                }
                EVP_DigestInit_ex(s->md, EVP_sha256(), NULL);
                s->have = s->have_last = 0;
                s->restarted = true;
            }
        } else {
            s->discard = true; /* an error's body */
        }
    }
    if (s->discard) return n;
    if (s->size >= 0 && s->have + (int64_t)n > s->size) {
        s->too_long = true;
        return 0;
    }
    for (size_t off = 0; off < n;) {
        ssize_t w = write(s->fd, p + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            s->write_errno = w < 0 ? errno : EIO;
            /* what was written is a correct prefix: count it, so a later run resumes there */
            EVP_DigestUpdate(s->md, p, off);
            s->have += (int64_t)off;
            return 0;
        }
        off += (size_t)w;
    }
    EVP_DigestUpdate(s->md, p, n);
    s->have += (int64_t)n;
    draw(s, false);
    report(s, false);
    return n;
}

typedef enum { REQ_GET, REQ_HEAD, REQ_FILE } req_kind;

static CURLcode run_once(ob_hf_http *h, req_kind kind, const char *url, sink *s, char *cerr) {
    CURL *c = h->curl;
    curl_easy_reset(c);
    ob_hf_resp *r = s->r;
    free(r->body);
    memset(r, 0, sizeof *r);
    r->length = r->linked_size = -1;
    s->retry_after = -1;
    s->range_start = -1;
    s->started = s->discard = s->over = false;
    s->curl = c;
    cerr[0] = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_USERAGENT, OB_HF_UA);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 20L);
    /* a transfer with no byte for a minute is dead: retried from where it stopped */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, kind == REQ_HEAD ? 0L : 1L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, kind == REQ_FILE ? on_file : on_memory);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
    if (h->cancel) {
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xfer);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, h);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    }
    if (h->token && *h->token) {
        /* curl sends it to the URL's host only, never to the host of a redirect (the CDN) */
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, h->token);
    }
    struct curl_slist *hdrs = NULL;
    char range[64];
    if (kind != REQ_GET) hdrs = curl_slist_append(hdrs, "Accept-Encoding: identity");
    if (kind == REQ_HEAD) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    if (kind == REQ_FILE) {
        if (h->max_recv > 0) curl_easy_setopt(c, CURLOPT_MAX_RECV_SPEED_LARGE, (curl_off_t)h->max_recv);
        if (s->have > 0) {
            snprintf(range, sizeof range, "Range: bytes=%lld-", (long long)s->have);
            hdrs = curl_slist_append(hdrs, range);
        }
    }
    if (hdrs) curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    CURLcode cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(hdrs);
    r->unreachable = cc == CURLE_COULDNT_RESOLVE_HOST || cc == CURLE_COULDNT_CONNECT ||
                     cc == CURLE_COULDNT_RESOLVE_PROXY || (cc == CURLE_OPERATION_TIMEDOUT && r->status == 0);
    return cc;
}

static bool status_retryable(long st) {
    return st == 408 || st == 429 || st == 500 || st == 502 || st == 503 || st == 504;
}

static bool curl_retryable(CURLcode cc) {
    return cc == CURLE_PARTIAL_FILE || cc == CURLE_RECV_ERROR || cc == CURLE_SEND_ERROR || cc == CURLE_GOT_NOTHING ||
           cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_HTTP2 || cc == CURLE_HTTP2_STREAM ||
           cc == CURLE_SSL_CONNECT_ERROR;
}

/* Waits before try `attempt` + 1: Retry-After when the server gave one, else 1, 2, 4 ...
 * 30 s. False (err written) if the server asks for longer than we wait. */
static bool back_off(ob_hf_http *h, sink *s, int attempt, const char *why, const char *what, char *err,
                     size_t err_len) {
    double wait = s->retry_after >= 0 ? s->retry_after : (double)(1 << OB_MIN(attempt - 1, 5));
    if (wait > 30 && s->retry_after < 0) wait = 30;
    if (wait > h->max_wait_s) {
        ob_fail(err, err_len, OB_ERR_IO, "%s: %s, and the server asks to wait %.0f s: try again later", what, why, wait);
        return false;
    }
    fprintf(stderr, "%s1bit: %s: %s; retrying in %.0f s (try %d of %d)\n", s->progress ? "\r\033[K" : "", what, why,
            wait, attempt + 1, h->max_tries);
    /* in slices, so that a cancelled pull does not sleep on */
    for (double end = ob_time_s() + wait; ob_time_s() < end;) {
        if (cancelled(h)) {
            ob_fail(err, err_len, OB_ERR_IO, "%s: cancelled", what);
            return false;
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return true;
}

static void describe(CURLcode cc, long status, const char *cerr, char *out, size_t cap) {
    if (cc == CURLE_OK) snprintf(out, cap, "HTTP %ld", status);
    else snprintf(out, cap, "%s", cerr[0] ? cerr : curl_easy_strerror(cc));
}

/* GET or HEAD with retries: 429 / 5xx and dropped connections (not an unreachable host:
 * the caller falls back on the cache at once). */
static ob_status request(ob_hf_http *h, req_kind kind, const char *url, size_t max, ob_hf_resp *r, char *err,
                         size_t err_len) {
    char cerr[CURL_ERROR_SIZE], shown[512], why[CURL_ERROR_SIZE + 32];
    url_shown(url, shown, sizeof shown);
    sink s = {.r = r, .max = max, .fd = -1};
    for (int attempt = 1;; attempt++) {
        CURLcode cc = run_once(h, kind, url, &s, cerr);
        if (cancelled(h)) return ob_fail(err, err_len, OB_ERR_IO, "%s: cancelled", shown);
        if (cc == CURLE_OK && !status_retryable(r->status)) return OB_OK;
        describe(cc, r->status, cerr, why, sizeof why);
        if (s.over) return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: the answer is over %zu bytes", shown, max);
        if (r->unreachable) return ob_fail(err, err_len, OB_ERR_IO, "cannot reach %s: %s", shown, why);
        bool again = cc == CURLE_OK || curl_retryable(cc);
        if (!again) return ob_fail(err, err_len, OB_ERR_IO, "%s: %s", shown, why);
        if (attempt >= h->max_tries) {
            if (cc == CURLE_OK) return OB_OK; /* the caller reports the status */
            return ob_fail(err, err_len, OB_ERR_IO, "%s: %s (after %d tries)", shown, why, attempt);
        }
        if (!back_off(h, &s, attempt, why, shown, err, err_len)) return OB_ERR_IO;
    }
}

ob_status ob_hf_http_get(ob_hf_http *h, const char *url, size_t max, ob_hf_resp *r, char *err, size_t err_len) {
    return request(h, REQ_GET, url, max, r, err, err_len);
}

ob_status ob_hf_http_head(ob_hf_http *h, const char *url, ob_hf_resp *r, char *err, size_t err_len) {
    char cur[4096];
    snprintf(cur, sizeof cur, "%s", url);
    for (int hop = 0;; hop++) {
        ob_status st = request(h, REQ_HEAD, cur, 0, r, err, err_len);
        if (st || r->status < 300 || r->status >= 400 || r->location[0] != '/' || r->location[1] == '/') return st;
        /* a relative redirect stays on the Hub (a renamed repo): follow it, as huggingface_hub does */
        if (hop == 5) return ob_fail(err, err_len, OB_ERR_IO, "too many redirects from %s", url);
        const char *host_end = strstr(cur, "://");
        host_end = host_end ? strchr(host_end + 3, '/') : NULL;
        int base = host_end ? (int)(host_end - cur) : (int)strlen(cur);
        char next[4096];
        if (snprintf(next, sizeof next, "%.*s%s", base, cur, r->location) >= (int)sizeof next)
            return ob_fail(err, err_len, OB_ERR_IO, "redirect too long from %s", url);
        memcpy(cur, next, sizeof cur);
    }
}

/* Hashes the first `have` bytes of fd into md (a resumed download's prefix). */
static bool hash_prefix(int fd, int64_t have, EVP_MD_CTX *md) {
    const size_t cap = 1u << 20;
    char *buf = malloc(cap);
    bool ok = buf != NULL;
    for (int64_t off = 0; ok && off < have;) {
        size_t want = (size_t)OB_MIN((int64_t)cap, have - off);
        ssize_t n = pread(fd, buf, want, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) ok = false;
        else {
            EVP_DigestUpdate(md, buf, (size_t)n);
            off += n;
        }
    }
    free(buf);
    return ok;
}

static void hex_digest(EVP_MD_CTX *md, char hex[65]) {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(md, d, &n);
    for (unsigned int i = 0; i < n && i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    hex[64] = 0;
}

ob_status ob_hf_sha256_file(const char *path, char hex[65], char *err, size_t err_len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ob_fail(err, err_len, OB_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool ok = md && fstat(fd, &st) == 0 && EVP_DigestInit_ex(md, EVP_sha256(), NULL) &&
              hash_prefix(fd, (int64_t)st.st_size, md);
    if (ok) hex_digest(md, hex);
    EVP_MD_CTX_free(md);
    close(fd);
    return ok ? OB_OK : ob_fail(err, err_len, OB_ERR_IO, "cannot read %s", path);
}

/* The end of a download: checks size and checksum, then renames part to final. */
static ob_status finish(const ob_hf_download *d, sink *s, char *err, size_t err_len) {
    char hex[65];
    hex_digest(s->md, hex);
    if (d->size >= 0 && s->have != d->size) {
        unlink(d->part);
        return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: got %lld bytes, the Hub lists %lld; the download was discarded",
                       d->label, (long long)s->have, (long long)d->size);
    }
    if (d->sha256 && strcasecmp(hex, d->sha256)) {
        unlink(d->part);
        return ob_fail(err, err_len, OB_ERR_FORMAT,
                       "%s: checksum mismatch (SHA-256 %s, the Hub lists %s); the download was discarded", d->label,
                       hex, d->sha256);
    }
    if (fsync(s->fd)) return ob_fail(err, err_len, OB_ERR_IO, "cannot write %s: %s", d->part, strerror(errno));
    if (rename(d->part, d->final))
        return ob_fail(err, err_len, OB_ERR_IO, "cannot rename %s: %s", d->part, strerror(errno));
    return OB_OK;
}

ob_status ob_hf_http_download(ob_hf_http *h, const ob_hf_download *d, char *err, size_t err_len) {
    char cerr[CURL_ERROR_SIZE], shown[512], why[CURL_ERROR_SIZE + 32];
    url_shown(d->url, shown, sizeof shown);
    ob_hf_resp r = {0};
    sink s = {.r = &r, .size = d->size, .label = d->label, .progress = h->progress, .h = h};
    s.fd = open(d->part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s.fd < 0) return ob_fail(err, err_len, OB_ERR_IO, "cannot create %s: %s", d->part, strerror(errno));
    s.md = EVP_MD_CTX_new();
    ob_status st = OB_OK;
    struct stat fs;
    if (!s.md || !EVP_DigestInit_ex(s.md, EVP_sha256(), NULL) || fstat(s.fd, &fs)) {
        st = ob_fail(err, err_len, OB_ERR_IO, "cannot start the download of %s", d->label);
        goto done;
    }
    s.have = (int64_t)fs.st_size;
    if (d->size >= 0 && s.have > d->size) {
        /* longer than the file: not a prefix of it */
        if (ftruncate(s.fd, 0)) { st = ob_fail(err, err_len, OB_ERR_IO, "cannot truncate %s", d->part); goto done; }
        s.have = 0;
    }
    if (s.have > 0) {
        if (!hash_prefix(s.fd, s.have, s.md)) {
            st = ob_fail(err, err_len, OB_ERR_IO, "cannot read %s: %s", d->part, strerror(errno));
            goto done;
        }
        if (s.have != d->size) fprintf(stderr, "1bit: resuming %s at %lld bytes\n", d->label, (long long)s.have);
    }
    if (lseek(s.fd, (off_t)s.have, SEEK_SET) < 0) {
        st = ob_fail(err, err_len, OB_ERR_IO, "cannot seek in %s", d->part);
        goto done;
    }
    s.t_last = ob_time_s();
    s.have_last = s.have;
    int64_t start_have = s.have;
    double t0 = s.t_last;
    for (int attempt = 1; s.have != d->size;) {
        int64_t before = s.have;
        s.restarted = s.too_long = s.bad_range = false;
        s.write_errno = 0;
        CURLcode cc = run_once(h, REQ_FILE, d->url, &s, cerr);
        if (cancelled(h)) {
            st = ob_fail(err, err_len, OB_ERR_IO, "%s: cancelled (%lld bytes kept: a later pull resumes)", d->label,
                         (long long)s.have);
            goto done;
        }
        if (s.write_errno) {
            st = ob_fail(err, err_len, OB_ERR_IO, "cannot write %s: %s (%lld bytes kept there: run again to resume)",
                         d->part, strerror(s.write_errno), (long long)s.have);
            goto done;
        }
        if (s.too_long) {
            unlink(d->part);
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: the server sent more than the %lld bytes the Hub lists",
                         d->label, (long long)d->size);
            goto done;
        }
        if (s.restarted) fprintf(stderr, "%s1bit: %s: the server ignored the range; downloading it again from the start\n",
                                 s.progress ? "\r\033[K" : "", d->label);
        bool ok_status = r.status == 200 || r.status == 206;
        if (cc == CURLE_OK && ok_status && (d->size < 0 || s.have == d->size)) break;
        if (s.bad_range || r.status == 416) {
            /* the server's range is not ours, or our part is not a prefix of its file */
            if (ftruncate(s.fd, 0) || lseek(s.fd, 0, SEEK_SET) < 0) {
                st = ob_fail(err, err_len, OB_ERR_IO, "cannot truncate %s", d->part);
                goto done;
            }
            EVP_DigestInit_ex(s.md, EVP_sha256(), NULL);
            s.have = s.have_last = 0;
        }
        describe(cc, r.status, cerr, why, sizeof why);
        if (cc == CURLE_OK && ok_status) snprintf(why, sizeof why, "the connection closed at %lld of %lld bytes",
                                                  (long long)s.have, (long long)d->size);
        bool again = (cc == CURLE_OK && (ok_status || status_retryable(r.status) || r.status == 416)) ||
                     curl_retryable(cc) || s.bad_range || (r.unreachable && before > 0);
        if (!again) {
            if (cc == CURLE_OK) {
                st = OB_ERR_IO;
                ob_fail(err, err_len, st, "%s: HTTP %ld%s%s", d->label, r.status, r.error_msg[0] ? ": " : "", r.error_msg);
            } else {
                st = ob_fail(err, err_len, OB_ERR_IO, "%s: %s", shown, why);
            }
            goto done;
        }
        /* a try that brought bytes starts the count again */
        if (s.have > before) attempt = 1;
        if (attempt >= h->max_tries) {
            st = ob_fail(err, err_len, OB_ERR_IO, "%s: %s (after %d tries; %lld bytes kept: run again to resume)",
                         d->label, why, attempt, (long long)s.have);
            goto done;
        }
        if (!back_off(h, &s, attempt, why, d->label, err, err_len)) {
            st = OB_ERR_IO;
            goto done;
        }
        attempt++;
    }
    if (s.progress && s.have > start_have) {
        s.size = s.size < 0 ? s.have : s.size;
        draw(&s, true);
        double dt = ob_time_s() - t0;
        char got[32], rate[32], took[32];
        ob_hf_fmt_bytes((double)(s.have - start_have), got, sizeof got);
        ob_hf_fmt_bytes(dt > 0 ? (double)(s.have - start_have) / dt : 0, rate, sizeof rate);
        fmt_time(dt, took, sizeof took);
        fprintf(stderr, "\r%-32.32s %s in %s (%s/s)\033[K\n", d->label, got, took, rate);
    }
    st = finish(d, &s, err, err_len);
    if (!st) report(&s, true);
done:
    if (st && s.progress) fprintf(stderr, "\r\033[K");
    EVP_MD_CTX_free(s.md);
    close(s.fd);
    ob_hf_resp_free(&r);
    return st;
}

#else /* built without libcurl or libcrypto */

#define OB_HF_NO_NET "this 1bit was built without libcurl or libcrypto: install libcurl4-openssl-dev and " \
                     "libssl-dev (scripts/setup.sh) and rebuild"

ob_status ob_hf_http_init(ob_hf_http *h, char *err, size_t err_len) {
    memset(h, 0, sizeof *h);
    return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, OB_HF_NO_NET);
}
void ob_hf_http_free(ob_hf_http *h) { (void)h; }
ob_status ob_hf_http_get(ob_hf_http *h, const char *url, size_t max, ob_hf_resp *r, char *err, size_t err_len) {
    return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, OB_HF_NO_NET);
}
ob_status ob_hf_http_head(ob_hf_http *h, const char *url, ob_hf_resp *r, char *err, size_t err_len) {
    return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, OB_HF_NO_NET);
}
ob_status ob_hf_http_download(ob_hf_http *h, const ob_hf_download *d, char *err, size_t err_len) {
    return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, OB_HF_NO_NET);
}
ob_status ob_hf_sha256_file(const char *path, char hex[65], char *err, size_t err_len) {
    return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, OB_HF_NO_NET);
}
#endif
