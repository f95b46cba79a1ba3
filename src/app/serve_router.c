/* The router's hooks (serve_router.h): the Hugging Face cache as llama-server's router
 * lists it, removal, downloads, and the check of a child's command line.
 *
 * A cached model is a repo's GGUF of refs/main's snapshot, named "org/name:TAG" where TAG
 * is the quantization that ends the file name (after '-' or '.', upper-cased: Q4_K_M,
 * F16); a split model is listed once, by its first part; projectors (mmproj), importance
 * matrices and speculative heads (mtp-, eagle3-, dflash-, dspark-) are not models, and a
 * file with no tag is not listed (llama-server's rules). */
#include "app/serve_router.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "app/hf_cache.h"
#include "core/common.h"

/* "dir/x-Q4_K_M-00001-of-00002.gguf": the part (1, or 1 for a file in one piece) and the
 * tag ("Q4_K_M", upper-cased; "" when the name has none). False: not a model GGUF. */
static bool gguf_tag(const char *path, int *part, char *tag, size_t cap) {
    size_t n = strlen(path);
    if (n < 5 || strcasecmp(path + n - 5, ".gguf")) return false;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    static const char *const not_models[] = {"mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"};
    for (size_t i = 0; i < OB_ARRAY_LEN(not_models); i++)
        if (strcasestr(base, not_models[i])) return false;
    n -= 5;
    *part = 1;
    static const size_t tail = sizeof("-00001-of-00005") - 1;
    if (n > tail && path[n - tail] == '-' && !strncmp(path + n - tail + 6, "-of-", 4)) {
        bool digits = true;
        for (int i = 0; i < 5; i++)
            digits &= isdigit((unsigned char)path[n - tail + 1 + i]) && isdigit((unsigned char)path[n - tail + 10 + i]);
        if (digits) {
            *part = atoi(path + n - tail + 1);
            n -= tail;
        }
    }
    size_t k = n;
    while (k > 0 && (isalnum((unsigned char)path[k - 1]) || path[k - 1] == '_')) k--;
    tag[0] = 0;
    if (k == n || k == 0 || (path[k - 1] != '-' && path[k - 1] != '.') || n - k >= cap) return true;
    for (size_t i = k; i < n; i++) tag[i - k] = (char)toupper((unsigned char)path[i]);
    tag[n - k] = 0;
    return true;
}

/* A cache folder's name, models--org--name, as the repo id org/name. */
static bool folder_repo(const char *dir, char *repo, size_t cap) {
    if (strncmp(dir, "models--", 8)) return false;
    const char *org = dir + 8, *sep = strstr(org, "--");
    if (!sep || snprintf(repo, cap, "%.*s/%s", (int)(sep - org), org, sep + 2) >= (int)cap) return false;
    return ob_hf_repo_valid(repo);
}

static json_t *cache_list(void *ud, char *err, size_t err_len) {
    ob_hf_cache c;
    if (ob_hf_cache_init(&c, "x/x", err, err_len)) return NULL;
    json_t *out = json_array();
    DIR *d = opendir(c.root);
    if (!d) return out; /* no cache yet */
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char repo[256], commit[72];
        ob_hf_cache rc;
        ob_hf_listing l;
        if (!folder_repo(e->d_name, repo, sizeof repo) || ob_hf_cache_init(&rc, repo, NULL, 0) ||
            !ob_hf_cache_get_ref(&rc, "main", commit, sizeof commit) || ob_hf_cache_list(&rc, commit, &l, NULL, 0))
            continue;
        for (int i = 0; i < l.n; i++) {
            char tag[64], id[512], p[OB_HF_PATH_MAX];
            int part;
            if (!gguf_tag(l.files[i].path, &part, tag, sizeof tag) || part != 1 || !tag[0]) continue;
            snprintf(id, sizeof id, "%s:%s", repo, tag);
            bool seen = false;
            size_t k;
            json_t *m;
            json_array_foreach(out, k, m) seen |= !strcmp(json_string_value(json_object_get(m, "id")), id);
            if (seen || ob_hf_snapshot_path(&rc, commit, l.files[i].path, p, sizeof p, NULL, 0)) continue;
            json_array_append_new(out, json_pack("{s:s, s:s}", "id", id, "path", p));
        }
        ob_hf_listing_free(&l);
    }
    closedir(d);
    return out;
}

/* Is blobs/<etag> linked from any snapshot of the repo? */
static bool blob_linked(const ob_hf_cache *c, const char *etag) {
    char snaps[OB_HF_PATH_MAX + 16];
    snprintf(snaps, sizeof snaps, "%s/snapshots", c->repo);
    DIR *d = opendir(snaps);
    bool linked = false;
    for (struct dirent *e; d && !linked && (e = readdir(d)) != NULL;) {
        ob_hf_listing l;
        if (e->d_name[0] == '.' || ob_hf_cache_list(c, e->d_name, &l, NULL, 0)) continue;
        for (int i = 0; i < l.n && !linked; i++)
            linked = (l.files[i].oid && !strcmp(l.files[i].oid, etag)) ||
                     (l.files[i].sha256 && !strcmp(l.files[i].sha256, etag));
        ob_hf_listing_free(&l);
    }
    if (d) closedir(d);
    return linked;
}

static ob_status cache_remove(void *ud, const char *id, char *err, size_t err_len) {
    const char *colon = strrchr(id, ':');
    char repo[256], want[64], commit[72];
    if (!colon || snprintf(repo, sizeof repo, "%.*s", (int)(colon - id), id) >= (int)sizeof repo ||
        snprintf(want, sizeof want, "%s", colon + 1) >= (int)sizeof want)
        return ob_fail(err, err_len, OB_ERR_ARG, "'%s' is not org/name:TAG", id);
    for (char *p = want; *p; p++) *p = (char)toupper((unsigned char)*p);
    ob_hf_cache c;
    ob_hf_listing l;
    ob_status st = ob_hf_cache_init(&c, repo, err, err_len);
    if (st) return st;
    if (!ob_hf_cache_get_ref(&c, "main", commit, sizeof commit))
        return ob_fail(err, err_len, OB_ERR_IO, "%s is not in the cache", repo);
    if ((st = ob_hf_cache_list(&c, commit, &l, err, err_len))) return st;
    /* the model's files (every part) leave the snapshot, then the blobs nothing links to */
    int removed = 0;
    char **blobs = calloc((size_t)l.n + 1, sizeof *blobs);
    for (int i = 0; blobs && i < l.n; i++) {
        char tag[64], p[OB_HF_PATH_MAX];
        int part;
        if (!gguf_tag(l.files[i].path, &part, tag, sizeof tag) || strcmp(tag, want) ||
            ob_hf_snapshot_path(&c, commit, l.files[i].path, p, sizeof p, NULL, 0))
            continue;
        if (unlink(p)) {
            st = ob_fail(err, err_len, OB_ERR_IO, "cannot remove %s", p);
            break;
        }
        removed++;
        const char *etag = l.files[i].sha256 ? l.files[i].sha256 : l.files[i].oid;
        if (etag) blobs[i] = strdup(etag);
    }
    for (int i = 0; blobs && i < l.n; i++) {
        char b[OB_HF_PATH_MAX];
        if (blobs[i] && !blob_linked(&c, blobs[i]) && !ob_hf_blob_path(&c, blobs[i], "", b, sizeof b, NULL, 0))
            unlink(b);
        free(blobs[i]);
    }
    free(blobs);
    ob_hf_listing_free(&l);
    if (!st && !removed) st = ob_fail(err, err_len, OB_ERR_IO, "%s has no files in the cache", id);
    return st;
}

static ob_status pull(void *ud, const char *spec, void (*progress)(void *pud, const char *file, int64_t have,
                                                                  int64_t size),
                      void *pud, const volatile int *cancel, char *err, size_t err_len) {
    const ob_serve_router_ud *u = ud;
    ob_hf_opts o = {.spec = spec, .token = u->token, .offline = u->offline, .on_progress = progress,
                    .progress_ud = pud, .cancel = cancel};
    char *path = NULL;
    int n = 0;
    ob_status st = ob_hf_pull(&o, &path, &n, err, err_len);
    free(path);
    return st;
}

static ob_status check_args(int argc, char **argv, char *err, size_t err_len) {
    /* as ob_cmd_serve reads them: the -hf flags first, then the rest */
    char **copy = calloc((size_t)argc + 1, sizeof *copy);
    if (!copy) return ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    memcpy(copy, argv, (size_t)argc * sizeof *copy);
    int n = argc;
    ob_hf_flags hf = {0};
    ob_srv_config cfg;
    ob_srv_config_default(&cfg);
    bool help = false;
    ob_status st = ob_hf_take_flags(&n, copy, &hf, err, err_len) ? OB_ERR_ARG
                                                                 : ob_srv_parse_args(n, copy, &cfg, &help, err, err_len);
    if (!st && hf.repo && cfg.model_path) st = ob_fail(err, err_len, OB_ERR_ARG, "both a model file and -hf");
    if (!st && cfg.router_flag) st = ob_fail(err, err_len, OB_ERR_ARG, "%s is the router's own flag", cfg.router_flag);
    if (!st && help) st = ob_fail(err, err_len, OB_ERR_ARG, "--help is no flag for a model");
    free(copy);
    return st;
}

void ob_serve_router_hooks(ob_router_hooks *h, ob_serve_router_ud *ud, const ob_hf_flags *f) {
    ud->token = f->token;
    ud->offline = f->offline;
    *h = (ob_router_hooks){.ud = ud, .cache_list = cache_list, .cache_remove = cache_remove, .pull = pull,
                           .check_args = check_args};
}

static void *watch_stdin(void *arg) {
    /* the signal must wait for the serve loop's sigtimedwait, not hit this thread */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    char buf[256];
    for (;;) {
        ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
        if (n > 0 || (n < 0 && errno == EINTR)) continue;
        break;
    }
    kill(getpid(), SIGTERM);
    return NULL;
}

ob_status ob_serve_watch_stdin(void) {
    pthread_t th;
    if (pthread_create(&th, NULL, watch_stdin, NULL)) return OB_ERR_IO;
    pthread_detach(th);
    return OB_OK;
}
