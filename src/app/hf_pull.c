/* Models from the Hugging Face Hub: the spec, the repo's listing, the choice of file
 * (quantization tag, default, split parts) and the cache. See hf_pull.h and docs/pull.md.
 *
 * The Hub's routes used, as huggingface_hub uses them:
 *   GET  {endpoint}/api/models/{repo}?blobs=true        -> {"sha": commit, "siblings":
 *        [{"rfilename", "blobId", "size", "lfs": {"sha256", "size"}}]}
 *   HEAD {endpoint}/{repo}/resolve/{commit}/{file}      -> X-Repo-Commit, X-Linked-Etag (an
 *        LFS file's sha256) or ETag, X-Linked-Size; an LFS file's answer is a redirect to a
 *        CDN, which the GET of the same URL follows (the token is not sent there). */
#include "app/hf_pull.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "app/hf_cache.h"
#include "app/hf_http.h"
#include "core/common.h"

#define OB_HF_DEFAULT_ENDPOINT "https://huggingface.co"
/* a repo's listing: the largest ones (thousands of files) are a few MiB */
#define OB_HF_LISTING_MAX (64u << 20)
/* the quantizations tried, in order, when the spec names none (llama.cpp's -hf choice) */
static const char *const g_default_tags[] = {"Q4_K_M", "Q8_0"};

typedef struct hf_spec {
    char repo[200];  /* org/name */
    char tag[64];    /* quantization, or "" */
    char file[1100]; /* a file of the repo, or "" */
} hf_spec;

static ob_status parse_spec(const ob_hf_opts *o, hf_spec *s, char *err, size_t err_len) {
    memset(s, 0, sizeof *s);
    const char *spec = o->spec ? o->spec : "";
    const char *slash = strchr(spec, '/');
    size_t end = slash ? (size_t)(slash - spec) + 1 + strcspn(slash + 1, "/:") : 0;
    if (!slash || end >= sizeof s->repo)
        return ob_fail(err, err_len, OB_ERR_ARG,
                       "'%s' is not a Hugging Face model (org/name[:QUANT] or org/name/file.gguf)", spec);
    memcpy(s->repo, spec, end);
    if (!ob_hf_repo_valid(s->repo))
        return ob_fail(err, err_len, OB_ERR_ARG, "'%s' is not a Hugging Face repo id (org/name)", s->repo);
    const char *rest = spec + end;
    if (*rest == ':') {
        size_t n = strlen(rest + 1);
        static const char tag_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-";
        if (n == 0 || n >= sizeof s->tag || strspn(rest + 1, tag_chars) != n)
            return ob_fail(err, err_len, OB_ERR_ARG, "'%s' is not a quantization tag (such as Q4_K_M)", rest + 1);
        memcpy(s->tag, rest + 1, n + 1);
    } else if (*rest == '/') {
        snprintf(s->file, sizeof s->file, "%s", rest + 1);
    }
    if (o->file && *o->file) snprintf(s->file, sizeof s->file, "%s", o->file);
    if (s->file[0] && !ob_hf_file_valid(s->file))
        return ob_fail(err, err_len, OB_ERR_ARG, "'%s' is not a file path in a repo", s->file);
    return OB_OK;
}

static bool env_true(const char *name) {
    const char *v = getenv(name);
    return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"));
}

/* The token: -hft, $HF_TOKEN, $HUGGING_FACE_HUB_TOKEN, then huggingface_hub's token file
 * ($HF_TOKEN_PATH, else $HF_HOME/token, else ~/.cache/huggingface/token). */
static char *find_token(const char *given) {
    const char *v = given && *given ? given : getenv("HF_TOKEN");
    if (!v || !*v) v = getenv("HUGGING_FACE_HUB_TOKEN");
    if (v && *v) return strdup(v);
    char p[OB_HF_PATH_MAX];
    const char *tp = getenv("HF_TOKEN_PATH"), *home = getenv("HF_HOME"), *uh = getenv("HOME");
    if (tp && *tp) snprintf(p, sizeof p, "%s", tp);
    else if (home && *home) snprintf(p, sizeof p, "%s/token", home);
    else if (uh && *uh) snprintf(p, sizeof p, "%s/.cache/huggingface/token", uh);
    else return NULL;
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    char buf[512];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *s = buf;
    while (*s && isspace((unsigned char)*s)) s++;
    s[strcspn(s, " \t\r\n")] = 0;
    return *s ? strdup(s) : NULL;
}

static ob_status parse_listing(const char *body, ob_hf_listing *l, char *err, size_t err_len) {
    json_error_t je;
    json_t *root = json_loads(body, 0, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        return ob_fail(err, err_len, OB_ERR_FORMAT, "the Hub's file listing is not JSON (line %d: %s)", je.line, je.text);
    }
    const char *sha = json_string_value(json_object_get(root, "sha"));
    if (sha && ob_hf_oid_valid(sha)) snprintf(l->commit, sizeof l->commit, "%s", sha);
    json_t *sib = json_object_get(root, "siblings");
    ob_status st = json_is_array(sib) ? OB_OK
                                      : ob_fail(err, err_len, OB_ERR_FORMAT, "the Hub's file listing has no siblings");
    size_t i;
    json_t *e;
    json_array_foreach(sib, i, e) {
        if (st) break;
        const char *name = json_string_value(json_object_get(e, "rfilename"));
        if (!name || !ob_hf_file_valid(name)) continue; /* nothing we could store */
        const char *oid = json_string_value(json_object_get(e, "blobId"));
        json_t *lfs = json_object_get(e, "lfs");
        const char *sha256 = json_string_value(json_object_get(lfs, "sha256"));
        json_t *size = json_object_get(lfs, "size");
        if (!json_is_integer(size)) size = json_object_get(e, "size");
        if (oid && !ob_hf_oid_valid(oid)) oid = NULL;
        if (sha256 && (strlen(sha256) != 64 || !ob_hf_oid_valid(sha256))) sha256 = NULL;
        int64_t sz = json_is_integer(size) && json_integer_value(size) >= 0 ? (int64_t)json_integer_value(size) : -1;
        if ((st = ob_hf_listing_add(l, name, oid, sha256, sz))) ob_fail(err, err_len, st, "out of memory");
    }
    json_decref(root);
    return st;
}

/* ---- choosing the files ---- */

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static bool ends_with_ci(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcasecmp(s + n - k, suffix);
}

static bool contains_ci(const char *s, const char *what) {
    for (size_t k = strlen(what); *s; s++)
        if (!strncasecmp(s, what, k)) return true;
    return false;
}

/* A model's GGUF: not a vision projector or an importance matrix. */
static bool is_model_gguf(const char *path) {
    const char *b = base_name(path);
    return ends_with_ci(b, ".gguf") && !contains_ci(b, "mmproj") && !contains_ci(b, "imatrix");
}

/* "name-00002-of-00005.gguf": the part (2) and count (5); the stem before "-00002" is
 * path[0..*stem). False for a file in one piece. */
static bool split_of(const char *path, size_t *stem, int *index, int *count) {
    size_t n = strlen(path);
    static const size_t tail = sizeof("-00001-of-00005.gguf") - 1;
    if (n < tail + 1 || !ends_with_ci(path, ".gguf")) return false;
    const char *t = path + n - tail;
    if (t[0] != '-' || strncmp(t + 6, "-of-", 4)) return false;
    for (int i = 0; i < 5; i++)
        if (!isdigit((unsigned char)t[1 + i]) || !isdigit((unsigned char)t[10 + i])) return false;
    *index = atoi(t + 1);
    *count = atoi(t + 10);
    *stem = (size_t)(t - path);
    return *index >= 1 && *count >= 1 && *index <= *count;
}

/* The tag in the path as a word of a GGUF name: after the start, '/', '-', '.' or '_'
 * and before '.', '-' or '/' (Q4_K_M matches x-Q4_K_M.gguf, not x-IQ4_K_M.gguf). */
static bool tag_matches(const char *path, const char *tag) {
    size_t k = strlen(tag);
    for (const char *s = path; *s; s++) {
        if (strncasecmp(s, tag, k)) continue;
        bool before = s == path || strchr("/-._", s[-1]);
        bool after = s[k] && strchr(".-/", s[k]);
        if (before && after) return true;
    }
    return false;
}

/* The index of the first model GGUF matching tag (NULL: any), a split's first part only. */
static int find_model(const ob_hf_listing *l, const char *tag) {
    for (int i = 0; i < l->n; i++) {
        const char *p = l->files[i].path;
        size_t stem;
        int idx, cnt;
        if (!is_model_gguf(p) || (tag && !tag_matches(p, tag))) continue;
        if (split_of(p, &stem, &idx, &cnt) && idx != 1) continue;
        return i;
    }
    return -1;
}

/* "Q4_K_M, Q8_0, F16": the quantizations the repo's GGUF names show, for an error. */
static void list_tags(const ob_hf_listing *l, char *out, size_t cap) {
    size_t w = 0;
    out[0] = 0;
    for (int i = 0; i < l->n; i++) {
        const char *p = l->files[i].path;
        if (!is_model_gguf(p)) continue;
        char name[256];
        size_t stem;
        int idx, cnt;
        size_t n = split_of(p, &stem, &idx, &cnt) ? stem : strlen(p) - 5;
        const char *b = base_name(p);
        size_t off = (size_t)(b - p);
        if (n <= off) continue;
        snprintf(name, sizeof name, "%.*s", (int)(n - off), b);
        char *t = name + strlen(name);
        while (t > name && t[-1] != '-' && t[-1] != '.') t--;
        if (!*t || !strpbrk(t, "0123456789")) continue;
        for (char *c = t; *c; c++) *c = (char)toupper((unsigned char)*c);
        char word[72];
        snprintf(word, sizeof word, "%s%s", w ? ", " : "", t);
        if (strstr(out, t) || w + strlen(word) + 5 >= cap) continue;
        w += (size_t)snprintf(out + w, cap - w, "%s", word);
    }
    if (!w) snprintf(out, cap, "none");
}

/* The GGUF names of the repo, for an error: "a.gguf, b.gguf, ..." */
static void list_ggufs(const ob_hf_listing *l, char *out, size_t cap) {
    size_t w = 0;
    out[0] = 0;
    for (int i = 0; i < l->n && w + 8 < cap; i++) {
        if (!ends_with_ci(l->files[i].path, ".gguf")) continue;
        int k = snprintf(out + w, cap - w, "%s%s", w ? ", " : "", l->files[i].path);
        if (k < 0 || (size_t)k >= cap - w) {
            snprintf(out + w, cap - w, ", ...");
            return;
        }
        w += (size_t)k;
    }
    if (!w) snprintf(out, cap, "none");
}

/* The files to fetch, primary first (a split's parts in order) into parts[*n]
 * (malloc'd). */
static ob_status pick(const ob_hf_listing *l, const hf_spec *s, bool cached, int **parts, int *n, char *err,
                      size_t err_len) {
    const char *where = cached ? " (cached)" : "";
    char names[400];
    int at = -1;
    if (s->file[0]) {
        for (int i = 0; i < l->n && at < 0; i++)
            if (!strcmp(l->files[i].path, s->file)) at = i;
        for (int i = 0; i < l->n && at < 0; i++)
            if (!strcasecmp(l->files[i].path, s->file)) at = i;
        if (at < 0) {
            list_ggufs(l, names, sizeof names);
            return ob_fail(err, err_len, OB_ERR_IO, "no file '%s' in %s%s (GGUF files: %s)", s->file, s->repo, where,
                           names);
        }
    } else if (s->tag[0]) {
        if ((at = find_model(l, s->tag)) < 0) {
            list_tags(l, names, sizeof names);
            return ob_fail(err, err_len, OB_ERR_IO, "no GGUF for '%s' in %s%s (quantizations: %s)", s->tag, s->repo,
                           where, names);
        }
    } else {
        for (size_t k = 0; k < OB_ARRAY_LEN(g_default_tags) && at < 0; k++) at = find_model(l, g_default_tags[k]);
        if (at < 0) at = find_model(l, NULL);
        if (at < 0) return ob_fail(err, err_len, OB_ERR_IO, "no GGUF model file in %s%s", s->repo, where);
    }
    size_t stem;
    int idx, cnt;
    if (!split_of(l->files[at].path, &stem, &idx, &cnt)) {
        *parts = malloc(sizeof **parts);
        if (!*parts) return ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
        (*parts)[0] = at;
        *n = 1;
        return OB_OK;
    }
    /* every part of the split, by its number */
    int *p = malloc((size_t)cnt * sizeof *p);
    if (!p) return ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    for (int k = 0; k < cnt; k++) p[k] = -1;
    const char *first = l->files[at].path;
    for (int i = 0; i < l->n; i++) {
        size_t st2;
        int i2, c2;
        const char *q = l->files[i].path;
        if (split_of(q, &st2, &i2, &c2) && c2 == cnt && st2 == stem && !strncmp(q, first, stem)) p[i2 - 1] = i;
    }
    for (int k = 0; k < cnt; k++) {
        if (p[k] < 0) {
            free(p);
            return ob_fail(err, err_len, OB_ERR_IO, "%s: part %d of the %d of %.*s is missing%s", s->repo, k + 1, cnt,
                           (int)stem, first, cached ? " from the cache" : " from the repo");
        }
    }
    *parts = p;
    *n = cnt;
    return OB_OK;
}

/* ---- the Hub's answers ---- */

static ob_status hub_error(const ob_hf_resp *r, const char *endpoint, const hf_spec *s, const char *file, bool token,
                           char *err, size_t err_len) {
    const char *code = r->error_code;
    if (r->status == 401 && token && !code[0])
        return ob_fail(err, err_len, OB_ERR_IO, "%s: HTTP 401 from %s%s%s: check the token (HF_TOKEN, -hft)", s->repo,
                       endpoint, r->error_msg[0] ? ": " : "", r->error_msg);
    if (!strcmp(code, "GatedRepo"))
        return ob_fail(err, err_len, OB_ERR_IO, "%s is gated (HTTP %ld): accept its terms at %s/%s and set HF_TOKEN",
                       s->repo, r->status, endpoint, s->repo);
    if (!strcmp(code, "RepoNotFound") || (!file && (r->status == 404 || r->status == 401)))
        return ob_fail(err, err_len, OB_ERR_IO, "repository %s not found on %s (HTTP %ld; a private one needs HF_TOKEN)",
                       s->repo, endpoint, r->status);
    if (!strcmp(code, "EntryNotFound") || (file && r->status == 404))
        return ob_fail(err, err_len, OB_ERR_IO, "no file '%s' in %s (HTTP %ld)", file, s->repo, r->status);
    if (r->status == 401 || r->status == 403)
        return ob_fail(err, err_len, OB_ERR_IO, "%s: access denied (HTTP %ld)%s", s->repo, r->status,
                       token ? ": check the token (HF_TOKEN, -hft)" : ": set HF_TOKEN");
    return ob_fail(err, err_len, OB_ERR_IO, "%s%s%s: HTTP %ld from %s%s%s", s->repo, file ? "/" : "", file ? file : "",
                   r->status, endpoint, r->error_msg[0] ? ": " : "", r->error_msg);
}

/* Space in the cache for `need` more bytes. */
static ob_status check_space(const char *dir, int64_t need, char *err, size_t err_len) {
    struct statvfs vs;
    if (need <= 0 || statvfs(dir, &vs)) return OB_OK;
    double avail = (double)vs.f_bavail * (double)vs.f_frsize;
    if ((double)need <= avail) return OB_OK;
    return ob_fail(err, err_len, OB_ERR_IO, "not enough disk space in %s: the download needs %.1f MiB, %.1f MiB are free",
                   dir, (double)need / 1048576.0, avail / 1048576.0);
}

static int64_t file_size(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1;
}

/* One file into the cache: its headers, then the blob unless a copy is already there,
 * then the snapshot's link. */
static ob_status fetch_file(ob_hf_http *h, const ob_hf_cache *c, const char *endpoint, const hf_spec *s,
                            ob_hf_listing *l, const ob_hf_file *f, char *err, size_t err_len) {
    char path_enc[3300], url[4096 + 3300], blob[OB_HF_PATH_MAX], part[OB_HF_PATH_MAX];
    if (ob_hf_url_path(f->path, path_enc, sizeof path_enc))
        return ob_fail(err, err_len, OB_ERR_ARG, "file name too long: %s", f->path);
    snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", endpoint, s->repo, l->commit[0] ? l->commit : "main", path_enc);
    ob_hf_resp r = {0};
    ob_status st = ob_hf_http_head(h, url, &r, err, err_len);
    if (st) return st;
    if (r.status >= 400) return hub_error(&r, endpoint, s, f->path, h->token != NULL, err, err_len);
    if (!l->commit[0]) {
        if (!ob_hf_oid_valid(r.commit) || strlen(r.commit) >= sizeof l->commit)
            return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: the Hub sent no commit id", s->repo);
        memcpy(l->commit, r.commit, strlen(r.commit) + 1);
    }
    const char *etag = r.linked_etag[0] ? r.linked_etag : r.etag[0] ? r.etag : f->sha256 ? f->sha256 : f->oid;
    if (!etag || !ob_hf_oid_valid(etag))
        return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: the Hub sent no usable etag", f->path);
    int64_t size = f->size >= 0 ? f->size : r.linked_size >= 0 ? r.linked_size : r.status == 200 ? r.length : -1;
    /* an LFS file's etag is its sha256: checked even when the listing has none */
    const char *sha = f->sha256 ? f->sha256 : strlen(etag) == 64 && r.linked_etag[0] ? etag : NULL;
    if ((st = ob_hf_blob_path(c, etag, "", blob, sizeof blob, err, err_len)) ||
        (st = ob_hf_blob_path(c, etag, ".incomplete", part, sizeof part, err, err_len)) ||
        (st = ob_hf_mkdirs(blob, err, err_len)))
        return st;
    if (file_size(blob) < 0 || (size >= 0 && file_size(blob) != size)) {
        int lock = ob_hf_cache_lock(c, etag, err, err_len);
        if (lock < 0) return OB_ERR_IO;
        /* another process may have finished it while we waited */
        if (file_size(blob) < 0 || (size >= 0 && file_size(blob) != size)) {
            int64_t have = file_size(part);
            char dir[OB_HF_PATH_MAX + 8];
            snprintf(dir, sizeof dir, "%s/blobs", c->repo);
            st = check_space(dir, size >= 0 ? size - (have > 0 ? have : 0) : 0, err, err_len);
            char shown[40] = "";
            if (size >= 0) {
                shown[0] = ' ', shown[1] = '(';
                ob_hf_fmt_bytes((double)size, shown + 2, sizeof shown - 3);
                strcat(shown, ")");
            }
            if (!st) fprintf(stderr, "1bit: downloading %s/%s%s\n", s->repo, f->path, shown);
            ob_hf_download d = {.url = url, .part = part, .final = blob, .label = base_name(f->path), .sha256 = sha,
                                .size = size};
            if (!st) st = ob_hf_http_download(h, &d, err, err_len);
        }
        close(lock);
        if (st) return st;
    }
    return ob_hf_cache_link(c, l->commit, f->path, etag, err, err_len);
}

static ob_status result_path(const ob_hf_cache *c, const ob_hf_listing *l, int at, char **path, char *err, size_t err_len) {
    char p[OB_HF_PATH_MAX];
    ob_status st = ob_hf_snapshot_path(c, l->commit, l->files[at].path, p, sizeof p, err, err_len);
    if (st) return st;
    *path = strdup(p);
    return *path ? OB_OK : ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
}

ob_status ob_hf_pull(const ob_hf_opts *o, char **path, int *n_files, char *err, size_t err_len) {
    *path = NULL;
    if (n_files) *n_files = 0;
    hf_spec s;
    ob_hf_cache c;
    ob_status st = parse_spec(o, &s, err, err_len);
    if (st || (st = ob_hf_cache_init(&c, s.repo, err, err_len))) return st;
    char endpoint[1024];
    const char *ep = getenv("HF_ENDPOINT");
    snprintf(endpoint, sizeof endpoint, "%s", ep && *ep ? ep : OB_HF_DEFAULT_ENDPOINT);
    for (size_t n = strlen(endpoint); n > 0 && endpoint[n - 1] == '/';) endpoint[--n] = 0;
    if (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8))
        return ob_fail(err, err_len, OB_ERR_ARG, "HF_ENDPOINT '%s' is not an http(s) URL", endpoint);

    bool offline = o->offline || env_true("HF_HUB_OFFLINE");
    char why[1200] = "";
    ob_hf_http h = {0};
    ob_hf_listing l = {0};
    char *token = NULL;
    int *parts = NULL, n_parts = 0;
    if (!offline && (st = ob_hf_http_init(&h, why, sizeof why)) != OB_OK) {
        if (st != OB_ERR_UNSUPPORTED) return ob_fail(err, err_len, st, "%s", why);
        offline = true; /* no libcurl: the cache can still serve */
    } else if (offline) {
        snprintf(why, sizeof why, "offline (--offline or HF_HUB_OFFLINE)");
    }
    char commit[72];
    bool have_ref = ob_hf_cache_get_ref(&c, "main", commit, sizeof commit);
    bool cached = offline;
    if (!offline) {
        token = find_token(o->token);
        h.token = token;
        h.max_recv = o->limit_rate;
        h.progress = isatty(STDERR_FILENO);
        h.on_progress = o->on_progress;
        h.progress_ud = o->progress_ud;
        h.cancel = o->cancel;
        char url[1400];
        snprintf(url, sizeof url, "%s/api/models/%s?blobs=true", endpoint, s.repo);
        ob_hf_resp r = {0};
        /* with a cached copy to fall back on, a failing Hub is not waited for long */
        if (have_ref) h.max_tries = 3;
        st = ob_hf_http_get(&h, url, OB_HF_LISTING_MAX, &r, why, sizeof why);
        h.max_tries = 6;
        if ((st && r.unreachable) || (!st && (r.status == 429 || r.status >= 500))) {
            /* the Hub is out of reach: a cached copy will do */
            if (!st) snprintf(why, sizeof why, "%s answers HTTP %ld", endpoint, r.status);
            cached = true;
            st = OB_OK;
        } else if (!st && r.status != 200) {
            st = hub_error(&r, endpoint, &s, NULL, token != NULL, err, err_len);
        } else if (!st) {
            st = parse_listing(r.body ? r.body : "", &l, err, err_len);
        } else {
            ob_fail(err, err_len, st, "%s", why);
        }
        ob_hf_resp_free(&r);
    }
    if (!st && cached) {
        char e2[800] = "";
        if (!have_ref) st = ob_fail(e2, sizeof e2, OB_ERR_IO, "%s is not in the cache (%s)", s.repo, c.root);
        else if (!(st = ob_hf_cache_list(&c, commit, &l, e2, sizeof e2)))
            st = pick(&l, &s, true, &parts, &n_parts, e2, sizeof e2);
        if (!st) st = result_path(&c, &l, parts[0], path, e2, sizeof e2);
        if (st) ob_fail(err, err_len, st, "%s; %s", why, e2);
        else fprintf(stderr, "1bit: %s; using the cached %s (commit %.12s)\n", why, s.repo, l.commit);
    } else if (!st && !(st = pick(&l, &s, false, &parts, &n_parts, err, err_len))) {
        /* the listing's etag of each file: a snapshot link to it means the file is here */
        int64_t need = 0;
        for (int k = 0; k < n_parts; k++) {
            const ob_hf_file *f = &l.files[parts[k]];
            const char *etag = f->sha256 ? f->sha256 : f->oid;
            if (l.commit[0] && etag && ob_hf_cache_has(&c, l.commit, f->path, etag)) continue;
            char part[OB_HF_PATH_MAX];
            bool named = etag && !ob_hf_blob_path(&c, etag, ".incomplete", part, sizeof part, NULL, 0);
            int64_t have = named ? file_size(part) : -1;
            if (f->size > 0) need += f->size - (have > 0 ? have : 0);
        }
        char dir[OB_HF_PATH_MAX + 16];
        snprintf(dir, sizeof dir, "%s/blobs/x", c.repo);
        if (need > 0 && !(st = ob_hf_mkdirs(dir, err, err_len))) {
            dir[strlen(dir) - 2] = 0;
            st = check_space(dir, need, err, err_len);
        }
        for (int k = 0; k < n_parts && !st; k++) {
            const ob_hf_file *f = &l.files[parts[k]];
            const char *etag = f->sha256 ? f->sha256 : f->oid;
            if (l.commit[0] && etag && ob_hf_cache_has(&c, l.commit, f->path, etag)) continue;
            st = fetch_file(&h, &c, endpoint, &s, &l, f, err, err_len);
        }
        if (!st) st = ob_hf_cache_set_ref(&c, "main", l.commit, err, err_len);
        if (!st) st = result_path(&c, &l, parts[0], path, err, err_len);
    }
    if (!st && n_files) *n_files = n_parts;
    free(parts);
    ob_hf_listing_free(&l);
    ob_hf_http_free(&h);
    if (token) {
        memset(token, 0, strlen(token));
        free(token);
    }
    return st;
}

/* ---- the -hf flags ---- */

static bool flag_is(const char *a, const char *const *names) {
    char an[64];
    /* llama-server reads '_' in a long flag as '-' (--hf_repo) */
    if (!strncmp(a, "--", 2) && strlen(a) < sizeof an) {
        size_t k = 0;
        for (; a[k]; k++) an[k] = a[k] == '_' ? '-' : a[k];
        an[k] = 0;
        a = an;
    }
    for (; *names; names++)
        if (!strcmp(a, *names)) return true;
    return false;
}

int ob_hf_parse_flag(const char *a, const char *v, ob_hf_flags *f, char *err, size_t err_len) {
    static const char *const repo[] = {"-hf", "-hfr", "--hf-repo", NULL};
    static const char *const file[] = {"-hff", "--hf-file", NULL};
    static const char *const token[] = {"-hft", "--hf-token", NULL};
    static const char *const draft[] = {"-hfd", "-hfrd", "--hf-repo-draft", NULL};
    static const char *const offline[] = {"--offline", NULL};
    if (flag_is(a, offline)) {
        f->offline = true;
        return 1;
    }
    const char **dst = flag_is(a, repo) ? &f->repo : flag_is(a, file) ? &f->file : flag_is(a, token) ? &f->token
                     : flag_is(a, draft) ? &f->draft_repo : NULL;
    if (!dst) return 0;
    if (!v) {
        ob_fail(err, err_len, OB_ERR_ARG, "%s needs a value", a);
        return -1;
    }
    *dst = v;
    return 2;
}

int ob_hf_take_flags(int *argc, char **argv, ob_hf_flags *f, char *err, size_t err_len) {
    int w = 1;
    for (int i = 1; i < *argc; i++) {
        int r = ob_hf_parse_flag(argv[i], i + 1 < *argc ? argv[i + 1] : NULL, f, err, err_len);
        if (r < 0) return -1;
        if (r == 2) {
            i++;
            continue;
        }
        argv[w++] = argv[i];
    }
    for (int i = w; i < *argc; i++) argv[i] = NULL;
    *argc = w;
    return 0;
}

ob_status ob_hf_resolve(const ob_hf_flags *f, bool draft, char **path, char *err, size_t err_len) {
    ob_hf_opts o = {.spec = draft ? f->draft_repo : f->repo, .file = draft ? NULL : f->file, .token = f->token,
                    .offline = f->offline};
    int n = 0;
    /* a split model: *path is its first part, which the GGUF reader follows to the rest */
    return ob_hf_pull(&o, path, &n, err, err_len);
}
