/* The retrieval index: one SQLite file.
 *   meta(key TEXT PRIMARY KEY, value TEXT): embed_model, dim, max_words, version
 *   chunks(id INTEGER PRIMARY KEY, path TEXT, line INTEGER, text TEXT, vec BLOB)
 * vec is dim little-endian float32, L2-normalised, so cosine is a dot product. Search is
 * a full scan: fine for the tens of thousands of chunks a local folder gives. */
#include "rag/rag.h"
#include <dirent.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#define OB_RAG_MAX_FILE (64u << 20)
#define OB_RAG_MAX_FILES 100000
#define OB_RAG_MAX_DEPTH 32
#define OB_RAG_BATCH 64

typedef struct file_list { char **p; int n, cap; } file_list;

static bool has_text_ext(const char *name) {
    const char *d = strrchr(name, '.');
    return d && (!strcasecmp(d, ".txt") || !strcasecmp(d, ".md") || !strcasecmp(d, ".markdown"));
}

static ob_status walk(const char *dir, int depth, file_list *fl, char *err, size_t err_len) {
    if (depth > OB_RAG_MAX_DEPTH) return OB_OK;
    DIR *d = opendir(dir);
    if (!d) return ob_fail(err, err_len, OB_ERR_IO, "rag: cannot open folder %s", dir);
    struct dirent *e;
    ob_status st = OB_OK;
    while (!st && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue; /* ., .., hidden files and folders (.git) */
        char path[4096];
        if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path)) continue;
        struct stat sb;
        if (stat(path, &sb)) continue;
        if (S_ISDIR(sb.st_mode)) st = walk(path, depth + 1, fl, err, err_len);
        else if (S_ISREG(sb.st_mode) && has_text_ext(e->d_name)) {
            if (fl->n >= OB_RAG_MAX_FILES) { st = ob_fail(err, err_len, OB_ERR_ARG, "rag: more than %d files", OB_RAG_MAX_FILES); break; }
            if (fl->n == fl->cap) {
                int cap = fl->cap ? fl->cap * 2 : 64;
                char **p = realloc(fl->p, sizeof(char *) * (size_t)cap);
                if (!p) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "rag: out of memory"); break; }
                fl->p = p; fl->cap = cap;
            }
            if (!(fl->p[fl->n] = strdup(path))) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "rag: out of memory"); break; }
            fl->n++;
        }
    }
    closedir(d);
    return st;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static char *read_file(const char *path, size_t *len, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) { ob_fail(err, err_len, OB_ERR_IO, "rag: cannot read %s", path); return NULL; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || (unsigned long)n > OB_RAG_MAX_FILE) {
        fclose(f);
        ob_fail(err, err_len, OB_ERR_ARG, "rag: %s is over %u MiB", path, OB_RAG_MAX_FILE >> 20);
        return NULL;
    }
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    if (!b) { ob_fail(err, err_len, OB_ERR_IO, "rag: cannot read %s", path); return NULL; }
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

/* Invalid UTF-8 (a Latin-1 file, binary junk) becomes U+FFFD, so stored chunks are text
 * that JSON and terminals take. Takes ownership of s; returns s or a new buffer. */
static char *utf8_clean(char *s, size_t n, size_t *out_len) {
    size_t bad = 0;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (l > 0) i += (size_t)l; else { bad++; i++; }
    }
    if (!bad) { *out_len = n; return s; }
    char *o = malloc(n + 2 * bad + 1);
    if (!o) { free(s); return NULL; }
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (l > 0) { memcpy(o + k, s + i, (size_t)l); k += (size_t)l; i += (size_t)l; }
        else { memcpy(o + k, "\xEF\xBF\xBD", 3); k += 3; i++; }
    }
    o[k] = 0;
    free(s);
    *out_len = k;
    return o;
}

static ob_status sql_fail(sqlite3 *db, const char *what, char *err, size_t err_len) {
    return ob_fail(err, err_len, OB_ERR_IO, "rag: %s: %s", what, db ? sqlite3_errmsg(db) : "cannot open");
}

/* Embeds pending chunks and inserts them. */
static ob_status flush(ob_embedder *e, sqlite3_stmt *ins, const char *rel, ob_rag_chunk *ch, int n, float *vec,
                       char *err, size_t err_len) {
    if (!n) return OB_OK;
    const char **texts = malloc(sizeof(char *) * (size_t)n);
    if (!texts) return ob_fail(err, err_len, OB_ERR_NOMEM, "rag: out of memory");
    for (int i = 0; i < n; i++) texts[i] = ch[i].text;
    ob_status st = ob_embedder_embed(e, n, texts, vec, err, err_len);
    free(texts);
    int dim = ob_embedder_dim(e);
    for (int i = 0; i < n && !st; i++) {
        sqlite3_reset(ins);
        sqlite3_bind_text(ins, 1, rel, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(ins, 2, ch[i].line);
        sqlite3_bind_text(ins, 3, ch[i].text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_blob(ins, 4, vec + (size_t)i * (size_t)dim, (int)(sizeof(float) * (size_t)dim), SQLITE_TRANSIENT);
        if (sqlite3_step(ins) != SQLITE_DONE) st = sql_fail(sqlite3_db_handle(ins), "insert", err, err_len);
    }
    return st;
}

ob_status ob_rag_index_build(const char *dir, ob_embedder *e, const char *embed_name, const char *out_path,
                             const ob_rag_index_opts *o, int *n_chunks, char *err, size_t err_len) {
    ob_rag_index_opts opts = o ? *o : (ob_rag_index_opts){0};
    if (opts.max_words <= 0) opts.max_words = 120;
    *n_chunks = 0;
    file_list fl = {0};
    ob_status st = walk(dir, 0, &fl, err, err_len);
    if (!st && fl.n == 0) st = ob_fail(err, err_len, OB_ERR_ARG, "rag: no .txt or .md files under %s", dir);
    if (st) goto free_list;
    qsort(fl.p, (size_t)fl.n, sizeof(char *), cmp_str);

    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", out_path);
    unlink(tmp);
    sqlite3 *db = NULL;
    sqlite3_stmt *ins = NULL;
    float *vec = malloc(sizeof(float) * OB_RAG_BATCH * (size_t)ob_embedder_dim(e));
    if (!vec) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "rag: out of memory"); goto free_list; }
    if (sqlite3_open(tmp, &db) != SQLITE_OK) { st = sql_fail(db, tmp, err, err_len); goto close; }
    const char *schema =
        "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;"
        "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
        "CREATE TABLE chunks(id INTEGER PRIMARY KEY, path TEXT NOT NULL, line INTEGER, text TEXT NOT NULL, vec BLOB NOT NULL);"
        "BEGIN;";
    if (sqlite3_exec(db, schema, NULL, NULL, NULL) != SQLITE_OK) { st = sql_fail(db, "schema", err, err_len); goto close; }
    char meta[512];
    snprintf(meta, sizeof(meta), "INSERT INTO meta VALUES('version','1'),('dim','%d'),('max_words','%d');",
             ob_embedder_dim(e), opts.max_words);
    if (sqlite3_exec(db, meta, NULL, NULL, NULL) != SQLITE_OK) { st = sql_fail(db, "meta", err, err_len); goto close; }
    sqlite3_stmt *m = NULL;
    if (sqlite3_prepare_v2(db, "INSERT INTO meta VALUES('embed_model', ?)", -1, &m, NULL) != SQLITE_OK) { st = sql_fail(db, "meta", err, err_len); goto close; }
    sqlite3_bind_text(m, 1, embed_name, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(m);
    sqlite3_finalize(m);
    if (rc != SQLITE_DONE) { st = sql_fail(db, "meta", err, err_len); goto close; }
    if (sqlite3_prepare_v2(db, "INSERT INTO chunks(path, line, text, vec) VALUES(?, ?, ?, ?)", -1, &ins, NULL) != SQLITE_OK) {
        st = sql_fail(db, "prepare", err, err_len);
        goto close;
    }
    size_t dl = strlen(dir);
    for (int f = 0; f < fl.n && !st; f++) {
        size_t len = 0;
        char *text = read_file(fl.p[f], &len, err, err_len);
        if (!text) { st = OB_ERR_IO; break; }
        if (!(text = utf8_clean(text, len, &len))) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "rag: out of memory"); break; }
        ob_rag_chunk *ch = NULL;
        int n = 0;
        st = ob_rag_chunk_text(text, len, opts.max_words, &ch, &n, err, err_len);
        free(text);
        const char *rel = fl.p[f] + dl + (fl.p[f][dl] == '/');
        for (int i = 0; i < n && !st; i += OB_RAG_BATCH)
            st = flush(e, ins, rel, ch + i, OB_MIN(OB_RAG_BATCH, n - i), vec, err, err_len);
        if (!st) *n_chunks += n;
        if (!st && opts.verbose) fprintf(stderr, "rag: %s: %d chunks\n", rel, n);
        ob_rag_chunks_free(ch, n);
    }
    if (!st && *n_chunks == 0) st = ob_fail(err, err_len, OB_ERR_ARG, "rag: the files under %s hold no text", dir);
    if (!st && sqlite3_exec(db, "COMMIT;", NULL, NULL, NULL) != SQLITE_OK) st = sql_fail(db, "commit", err, err_len);
close:
    sqlite3_finalize(ins);
    if (db && sqlite3_close(db) != SQLITE_OK && !st) st = ob_fail(err, err_len, OB_ERR_IO, "rag: closing %s failed", tmp);
    free(vec);
    if (!st && rename(tmp, out_path)) st = ob_fail(err, err_len, OB_ERR_IO, "rag: cannot write %s", out_path);
    if (st) unlink(tmp);
free_list:
    for (int i = 0; i < fl.n; i++) free(fl.p[i]);
    free(fl.p);
    return st;
}

void ob_rag_hits_free(ob_rag_hit *h, int n) {
    if (!h) return;
    for (int i = 0; i < n; i++) { free(h[i].path); free(h[i].text); }
    free(h);
}

ob_status ob_rag_search(const char *index_path, const float *q, int dim, int k, ob_rag_hit **hits, int *n_hits,
                        char *err, size_t err_len) {
    *hits = NULL;
    *n_hits = 0;
    if (k <= 0 || k > 10000) return ob_fail(err, err_len, OB_ERR_ARG, "rag: top-k %d out of range", k);
    if (access(index_path, R_OK)) return ob_fail(err, err_len, OB_ERR_IO, "rag: cannot read index %s", index_path);
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    ob_status st = OB_OK;
    if (sqlite3_open_v2(index_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) { st = sql_fail(db, index_path, err, err_len); goto done; }
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='dim'", -1, &s, NULL) != SQLITE_OK || sqlite3_step(s) != SQLITE_ROW) {
        st = ob_fail(err, err_len, OB_ERR_FORMAT, "rag: %s is not an index made by `1bit rag index`", index_path);
        goto done;
    }
    int idim = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    s = NULL;
    if (idim != dim) {
        st = ob_fail(err, err_len, OB_ERR_ARG, "rag: the index holds %d-dimensional vectors, the embed model gives %d "
                     "(use the model the index was built with)", idim, dim);
        goto done;
    }
    ob_rag_hit *h = calloc((size_t)k, sizeof(ob_rag_hit));
    if (!h) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "rag: out of memory"); goto done; }
    *hits = h;
    if (sqlite3_prepare_v2(db, "SELECT id, path, line, text, vec FROM chunks", -1, &s, NULL) != SQLITE_OK) {
        st = sql_fail(db, "select", err, err_len);
        goto done;
    }
    int n = 0, rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const void *v = sqlite3_column_blob(s, 4);
        if (!v || sqlite3_column_bytes(s, 4) != (int)(sizeof(float) * (size_t)dim)) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "rag: chunk %lld has a malformed vector", (long long)sqlite3_column_int64(s, 0));
            break;
        }
        float score = 0;
        for (int i = 0; i < dim; i++) { float x; memcpy(&x, (const char *)v + 4 * i, 4); score += x * q[i]; }
        if (n == k && score <= h[n - 1].score) continue;
        /* Insert into the sorted top-k (k is small). */
        int at = n < k ? n : k - 1;
        if (n == k) { free(h[at].path); free(h[at].text); } else n++;
        while (at > 0 && h[at - 1].score < score) { h[at] = h[at - 1]; at--; }
        h[at].id = sqlite3_column_int64(s, 0);
        h[at].path = strdup((const char *)sqlite3_column_text(s, 1));
        h[at].line = sqlite3_column_int(s, 2);
        h[at].text = strdup((const char *)sqlite3_column_text(s, 3));
        h[at].score = score;
        if (!h[at].path || !h[at].text) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "rag: out of memory"); break; }
    }
    if (!st && rc != SQLITE_DONE) st = sql_fail(db, "select", err, err_len);
    *n_hits = n;
done:
    sqlite3_finalize(s);
    sqlite3_close(db);
    if (st) { ob_rag_hits_free(*hits, *n_hits); *hits = NULL; *n_hits = 0; }
    return st;
}
