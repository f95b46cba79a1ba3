/* The Hugging Face hub cache on disk: see hf_cache.h for the layout. */
#include "app/hf_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"

/* A snapshot deeper or wider than this is not one we or huggingface_hub wrote. */
#define OB_HF_LIST_DEPTH 8
#define OB_HF_LIST_MAX 100000

void ob_hf_listing_free(ob_hf_listing *l) {
    for (int i = 0; i < l->n; i++) {
        free(l->files[i].path);
        free(l->files[i].oid);
        free(l->files[i].sha256);
    }
    free(l->files);
    memset(l, 0, sizeof *l);
}

ob_status ob_hf_listing_add(ob_hf_listing *l, const char *path, const char *oid, const char *sha256, int64_t size) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 64;
        ob_hf_file *f = realloc(l->files, (size_t)cap * sizeof *f);
        if (!f) return OB_ERR_NOMEM;
        l->files = f;
        l->cap = cap;
    }
    ob_hf_file *f = &l->files[l->n];
    f->path = strdup(path);
    f->oid = oid ? strdup(oid) : NULL;
    f->sha256 = sha256 ? strdup(sha256) : NULL;
    f->size = size;
    if (!f->path || (oid && !f->oid) || (sha256 && !f->sha256)) {
        free(f->path);
        free(f->oid);
        free(f->sha256);
        return OB_ERR_NOMEM;
    }
    l->n++;
    return OB_OK;
}

static bool name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
           ch == '_' || ch == '.';
}

static bool repo_part_valid(const char *s, size_t n) {
    if (n == 0 || n > 96 || s[0] == '.' || s[0] == '-' || s[n - 1] == '.' || s[n - 1] == '-') return false;
    for (size_t i = 0; i < n; i++) {
        if (!name_char(s[i])) return false;
        if (i > 0 && (s[i] == '-' || s[i] == '.') && s[i - 1] == s[i]) return false;
    }
    return true;
}

bool ob_hf_repo_valid(const char *repo) {
    const char *slash = strchr(repo, '/');
    if (!slash || strchr(slash + 1, '/')) return false;
    return repo_part_valid(repo, (size_t)(slash - repo)) && repo_part_valid(slash + 1, strlen(slash + 1));
}

bool ob_hf_file_valid(const char *path) {
    size_t n = strlen(path);
    if (n == 0 || n > 1024 || path[0] == '/') return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f || path[i] == '\\') return false;
    for (const char *p = path; *p;) {
        size_t k = strcspn(p, "/");
        if (k == 0 || (k == 1 && p[0] == '.') || (k == 2 && p[0] == '.' && p[1] == '.')) return false;
        p += k;
        if (*p == '/') p++;
        if (*p == 0 && p[-1] == '/') return false;
    }
    return true;
}

bool ob_hf_oid_valid(const char *oid) {
    size_t n = strlen(oid);
    if (n == 0 || n > 128) return false;
    for (size_t i = 0; i < n; i++) {
        char ch = oid[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_'))
            return false;
    }
    return true;
}

static ob_status fit(int w, size_t cap, char *err, size_t err_len, const char *what) {
    if (w < 0 || (size_t)w >= cap) return ob_fail(err, err_len, OB_ERR_ARG, "path too long: %s", what);
    return OB_OK;
}

/* A variable's value with a leading "~/" taken as $HOME, as huggingface_hub expands it. */
static ob_status env_path(const char *v, char *out, size_t cap, char *err, size_t err_len) {
    const char *home = getenv("HOME");
    int w = v[0] == '~' && (v[1] == '/' || !v[1]) && home ? snprintf(out, cap, "%s%s", home, v + 1)
                                                         : snprintf(out, cap, "%s", v);
    return fit(w, cap, err, err_len, v);
}

ob_status ob_hf_cache_init(ob_hf_cache *c, const char *repo, char *err, size_t err_len) {
    memset(c, 0, sizeof *c);
    if (!ob_hf_repo_valid(repo))
        return ob_fail(err, err_len, OB_ERR_ARG, "'%s' is not a Hugging Face repo id (org/name)", repo);
    const char *v;
    char base[OB_HF_PATH_MAX];
    ob_status st;
    if ((v = getenv("HF_HUB_CACHE")) && *v) st = env_path(v, c->root, sizeof c->root, err, err_len);
    else if ((v = getenv("HUGGINGFACE_HUB_CACHE")) && *v) st = env_path(v, c->root, sizeof c->root, err, err_len);
    else {
        if ((v = getenv("HF_HOME")) && *v) st = env_path(v, base, sizeof base, err, err_len);
        else if ((v = getenv("XDG_CACHE_HOME")) && *v) {
            st = env_path(v, base, sizeof base, err, err_len);
            if (!st) st = fit((int)strlen(base) + 12, sizeof base, err, err_len, v);
            if (!st) strcat(base, "/huggingface");
        } else {
            const char *home = getenv("HOME");
            if (!home || !*home)
                return ob_fail(err, err_len, OB_ERR_IO, "no HOME, HF_HOME or HF_HUB_CACHE to find the cache");
            st = fit(snprintf(base, sizeof base, "%s/.cache/huggingface", home), sizeof base, err, err_len, home);
        }
        if (!st) st = fit(snprintf(c->root, sizeof c->root, "%s/hub", base), sizeof c->root, err, err_len, base);
    }
    if (st) return st;
    const char *slash = strchr(repo, '/');
    snprintf(c->name, sizeof c->name, "models--%.*s--%s", (int)(slash - repo), repo, slash + 1);
    return fit(snprintf(c->repo, sizeof c->repo, "%s/%s", c->root, c->name), sizeof c->repo, err, err_len, c->root);
}

ob_status ob_hf_blob_path(const ob_hf_cache *c, const char *etag, const char *suffix, char *out, size_t cap,
                          char *err, size_t err_len) {
    if (!ob_hf_oid_valid(etag)) return ob_fail(err, err_len, OB_ERR_FORMAT, "the Hub sent an unusable etag");
    return fit(snprintf(out, cap, "%s/blobs/%s%s", c->repo, etag, suffix), cap, err, err_len, c->repo);
}

ob_status ob_hf_snapshot_path(const ob_hf_cache *c, const char *commit, const char *file, char *out, size_t cap,
                              char *err, size_t err_len) {
    if (!ob_hf_oid_valid(commit)) return ob_fail(err, err_len, OB_ERR_FORMAT, "the Hub sent an unusable commit id");
    if (!ob_hf_file_valid(file)) return ob_fail(err, err_len, OB_ERR_FORMAT, "unusable file name in the repo");
    return fit(snprintf(out, cap, "%s/snapshots/%s/%s", c->repo, commit, file), cap, err, err_len, c->repo);
}

ob_status ob_hf_mkdirs(const char *path, char *err, size_t err_len) {
    char p[OB_HF_PATH_MAX];
    if (fit(snprintf(p, sizeof p, "%s", path), sizeof p, err, err_len, path)) return OB_ERR_ARG;
    char *end = strrchr(p, '/');
    if (!end || end == p) return OB_OK;
    *end = 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char keep = *s;
        *s = 0;
        if (mkdir(p, 0755) && errno != EEXIST)
            return ob_fail(err, err_len, OB_ERR_IO, "cannot create %s: %s", p, strerror(errno));
        if (!keep) break;
        *s = keep;
    }
    return OB_OK;
}

bool ob_hf_cache_has(const ob_hf_cache *c, const char *commit, const char *file, const char *etag) {
    char p[OB_HF_PATH_MAX], target[OB_HF_PATH_MAX];
    if (ob_hf_snapshot_path(c, commit, file, p, sizeof p, NULL, 0)) return false;
    struct stat st;
    if (lstat(p, &st)) return false;
    if (S_ISLNK(st.st_mode) && etag) {
        ssize_t n = readlink(p, target, sizeof target - 1);
        if (n <= 0) return false;
        target[n] = 0;
        const char *base = strrchr(target, '/');
        if (strcmp(base ? base + 1 : target, etag)) return false;
    }
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

ob_status ob_hf_cache_link(const ob_hf_cache *c, const char *commit, const char *file, const char *etag,
                           char *err, size_t err_len) {
    char p[OB_HF_PATH_MAX], tmp[OB_HF_PATH_MAX + 32], target[OB_HF_PATH_MAX];
    ob_status st = ob_hf_snapshot_path(c, commit, file, p, sizeof p, err, err_len);
    if (st || (st = ob_hf_mkdirs(p, err, err_len))) return st;
    if (!ob_hf_oid_valid(etag)) return ob_fail(err, err_len, OB_ERR_FORMAT, "the Hub sent an unusable etag");
    /* from snapshots/<commit>/<dirs...>/ back up to the repo folder */
    size_t w = 0;
    target[0] = 0;
    for (const char *s = file; (s = strchr(s, '/')) != NULL; s++)
        w += (size_t)snprintf(target + w, sizeof target - w, "../");
    if (fit(snprintf(target + w, sizeof target - w, "../../blobs/%s", etag), sizeof target - w, err, err_len, file))
        return OB_ERR_ARG;
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", p, (long)getpid());
    unlink(tmp);
    if (symlink(target, tmp))
        return ob_fail(err, err_len, OB_ERR_IO, "cannot create the link %s: %s", tmp, strerror(errno));
    if (rename(tmp, p)) {
        int e = errno;
        unlink(tmp);
        return ob_fail(err, err_len, OB_ERR_IO, "cannot create %s: %s", p, strerror(e));
    }
    return OB_OK;
}

ob_status ob_hf_cache_set_ref(const ob_hf_cache *c, const char *ref, const char *commit, char *err, size_t err_len) {
    char p[OB_HF_PATH_MAX], tmp[OB_HF_PATH_MAX + 32];
    if (!ob_hf_oid_valid(ref) || !ob_hf_oid_valid(commit)) return ob_fail(err, err_len, OB_ERR_ARG, "bad ref or commit");
    ob_status st = fit(snprintf(p, sizeof p, "%s/refs/%s", c->repo, ref), sizeof p, err, err_len, c->repo);
    if (st || (st = ob_hf_mkdirs(p, err, err_len))) return st;
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", p, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    /* no newline: huggingface_hub reads the file whole as the commit */
    bool ok = f && fputs(commit, f) >= 0;
    if (f && fclose(f)) ok = false;
    if (!ok || rename(tmp, p)) {
        int e = errno;
        unlink(tmp);
        return ob_fail(err, err_len, OB_ERR_IO, "cannot write %s: %s", p, strerror(e));
    }
    return OB_OK;
}

bool ob_hf_cache_get_ref(const ob_hf_cache *c, const char *ref, char *commit, size_t cap) {
    char p[OB_HF_PATH_MAX];
    if (!ob_hf_oid_valid(ref) || snprintf(p, sizeof p, "%s/refs/%s", c->repo, ref) >= (int)sizeof p) return false;
    FILE *f = fopen(p, "rb");
    if (!f) return false;
    size_t n = fread(commit, 1, cap - 1, f);
    fclose(f);
    commit[n] = 0;
    commit[strcspn(commit, "\r\n \t")] = 0;
    return ob_hf_oid_valid(commit);
}

typedef struct list_walk {
    char root[OB_HF_PATH_MAX]; /* snapshots/<commit>/ */
    size_t root_len;
    ob_hf_listing *out;
} list_walk;

static ob_status walk(list_walk *w, const char *dir, int depth, char *err, size_t err_len) {
    DIR *d = opendir(dir);
    if (!d) return OB_OK;
    ob_status st = OB_OK;
    for (struct dirent *e; !st && (e = readdir(d)) != NULL;) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[OB_HF_PATH_MAX], target[OB_HF_PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p) continue;
        struct stat ls, fs;
        if (lstat(p, &ls) || stat(p, &fs)) continue; /* a link to a missing blob is no file */
        if (S_ISDIR(fs.st_mode)) {
            if (!S_ISLNK(ls.st_mode) && depth < OB_HF_LIST_DEPTH) st = walk(w, p, depth + 1, err, err_len);
            continue;
        }
        size_t nl = strlen(e->d_name);
        /* our links being made (<file>.<pid>.tmp) are not files of the snapshot */
        if (!S_ISREG(fs.st_mode) || (nl > 4 && !strcmp(e->d_name + nl - 4, ".tmp"))) continue;
        if (w->out->n >= OB_HF_LIST_MAX) break;
        const char *etag = NULL;
        if (S_ISLNK(ls.st_mode)) {
            ssize_t n = readlink(p, target, sizeof target - 1);
            if (n > 0) {
                target[n] = 0;
                const char *b = strrchr(target, '/');
                etag = b ? b + 1 : target;
            }
        }
        bool sha = etag && strlen(etag) == 64;
        st = ob_hf_listing_add(w->out, p + w->root_len, sha ? NULL : etag, sha ? etag : NULL, (int64_t)fs.st_size);
        if (st) ob_fail(err, err_len, st, "out of memory");
    }
    closedir(d);
    return st;
}

static int by_path(const void *a, const void *b) {
    return strcmp(((const ob_hf_file *)a)->path, ((const ob_hf_file *)b)->path);
}

ob_status ob_hf_cache_list(const ob_hf_cache *c, const char *commit, ob_hf_listing *out, char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    if (!ob_hf_oid_valid(commit)) return ob_fail(err, err_len, OB_ERR_ARG, "bad commit id");
    list_walk w = {.out = out};
    ob_status st = fit(snprintf(w.root, sizeof w.root, "%s/snapshots/%s", c->repo, commit), sizeof w.root, err,
                       err_len, c->repo);
    if (st) return st;
    w.root_len = strlen(w.root) + 1;
    snprintf(out->commit, sizeof out->commit, "%s", commit);
    st = walk(&w, w.root, 0, err, err_len);
    if (st) ob_hf_listing_free(out);
    else if (out->n > 1) qsort(out->files, (size_t)out->n, sizeof *out->files, by_path);
    return st;
}

int ob_hf_cache_lock(const ob_hf_cache *c, const char *etag, char *err, size_t err_len) {
    char p[OB_HF_PATH_MAX];
    if (!ob_hf_oid_valid(etag)) {
        ob_fail(err, err_len, OB_ERR_FORMAT, "the Hub sent an unusable etag");
        return -1;
    }
    if (fit(snprintf(p, sizeof p, "%s/.locks/%s/%s.lock", c->root, c->name, etag), sizeof p, err, err_len, c->root) ||
        ob_hf_mkdirs(p, err, err_len))
        return -1;
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0664);
    if (fd < 0) {
        ob_fail(err, err_len, OB_ERR_IO, "cannot open the lock %s: %s", p, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno == EWOULDBLOCK) {
        fprintf(stderr, "1bit: another download of this file is under way; waiting for it (%s)\n", p);
        if (flock(fd, LOCK_EX) == 0) return fd;
    }
    /* a file system without flock: go on unlocked, as huggingface_hub's soft lock would */
    if (errno == ENOLCK || errno == EOPNOTSUPP || errno == ENOSYS) return fd;
    ob_fail(err, err_len, OB_ERR_IO, "cannot lock %s: %s", p, strerror(errno));
    close(fd);
    return -1;
}
