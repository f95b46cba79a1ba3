/* The search tools: file_glob_search and grep_search, over one listing of a directory.
 *
 * Listing: inside a git checkout (and for files only) `git ls-files` gives the files git
 * does not ignore; elsewhere a walk that lists but never enters .git, node_modules,
 * build, dist and the like (they can be enormous) and never follows a link to a
 * directory (it may loop). Both are bounded: 15 s and 200,000 entries, 8 MiB of git
 * output. grep_search skips binary files and files over 32 MiB, stops at 100 matches
 * and after 30 s. Globs: `*` and `?` stay within a path component, `**` crosses them,
 * `**` followed by '/' stands for zero or more whole directories, `[a-z]`/`[!x]` are
 * sets. */
#include "server/agent.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/common.h"

#define LIST_TIME_S 15.0
#define LIST_MAX 200000
#define GIT_MAX_OUT (8u << 20)
#define GLOB_MAX 512
#define SEARCH_MAX 100       /* llama-server's cap on results and matches */
#define GREP_FILE_MAX (32u << 20)
#define GREP_TIME_S 30.0
#define GREP_LINE_MAX 1000   /* bytes of a matched line shown */

/* ---- globs ------------------------------------------------------------------------- */

enum { G_LIT, G_ONE, G_SET, G_STAR, G_ANY, G_DIRS };  /* G_ANY: "**", G_DIRS: "**" + '/' */

typedef struct glob_tok {
    uint8_t kind, c;
    uint8_t set[32];  /* G_SET: bit per byte (negation already applied) */
} glob_tok;

typedef struct glob {
    glob_tok *t;
    int n;
    bool name_only;   /* no '/' in the pattern: it matches the entry's name */
} glob;

static bool glob_compile(const char *pat, glob *g) {
    g->name_only = !strchr(pat, '/');
    char full[GLOB_MAX + 4];
    if (strlen(pat) > GLOB_MAX) return false;
    /* "a/b" matches at any depth; "/a/b" only below the base; "**..." as written */
    if (g->name_only || !strncmp(pat, "**", 2)) snprintf(full, sizeof full, "%s", pat);
    else if (pat[0] == '/') snprintf(full, sizeof full, "%s", pat + 1);
    else snprintf(full, sizeof full, "**/%s", pat);
    g->t = calloc(strlen(full) + 1, sizeof *g->t);
    if (!g->t) return false;
    g->n = 0;
    for (const char *p = full; *p;) {
        glob_tok *t = &g->t[g->n++];
        if (p[0] == '*' && p[1] == '*') {
            t->kind = p[2] == '/' ? G_DIRS : G_ANY;
            p += p[2] == '/' ? 3 : 2;
        } else if (*p == '*') {
            t->kind = G_STAR;
            p++;
        } else if (*p == '?') {
            t->kind = G_ONE;
            p++;
        } else if (*p == '[' && strchr(p + 2, ']')) {
            const char *q = p + 1;
            bool neg = *q == '!' || *q == '^';
            if (neg) q++;
            t->kind = G_SET;
            for (bool first = true; *q && (first || *q != ']'); first = false) {
                unsigned lo = (unsigned char)*q, hi = lo;
                if (q[1] == '-' && q[2] && q[2] != ']') {
                    hi = (unsigned char)q[2];
                    q += 3;
                } else q++;
                for (unsigned c = lo; c <= hi; c++) t->set[c >> 3] |= (uint8_t)(1u << (c & 7));
            }
            if (*q != ']') { /* "[]" with nothing closing it: a literal '[' */
                memset(t, 0, sizeof *t);
                t->kind = G_LIT;
                t->c = '[';
                p++;
                continue;
            }
            if (neg)
                for (int k = 0; k < 32; k++) t->set[k] = (uint8_t)~t->set[k];
            p = q + 1;
        } else {
            if (*p == '\\' && p[1]) p++;
            t->kind = G_LIT;
            t->c = (uint8_t)*p++;
        }
    }
    return true;
}

/* Follows the moves that take no character: a star may match nothing. */
static void glob_close(const glob *g, bool *on) {
    for (int i = 0; i < g->n; i++)
        if (on[i] && g->t[i].kind >= G_STAR) on[i + 1] = true;
}

/* Every position of the pattern at once (no backtracking): O(pattern x string). */
static bool glob_match_str(const glob *g, const char *s, bool *a, bool *b) {
    memset(a, 0, (size_t)(g->n + 1));
    a[0] = true;
    glob_close(g, a);
    for (; *s; s++) {
        uint8_t c = (uint8_t)*s;
        memset(b, 0, (size_t)(g->n + 1));
        bool any = false;
        for (int i = 0; i < g->n; i++) {
            if (!a[i]) continue;
            const glob_tok *t = &g->t[i];
            switch (t->kind) {
            case G_LIT: if (c == t->c) b[i + 1] = true; break;
            case G_ONE: if (c != '/') b[i + 1] = true; break;
            case G_SET: if (c != '/' && (t->set[c >> 3] >> (c & 7) & 1)) b[i + 1] = true; break;
            case G_STAR: if (c != '/') b[i] = true; break;
            case G_ANY: b[i] = true; break;
            default: b[i] = true; if (c == '/') b[i + 1] = true; break;
            }
        }
        glob_close(g, b);
        for (int i = 0; i <= g->n; i++) any |= b[i];
        if (!any) return false;
        bool *tmp = a; a = b; b = tmp;
    }
    return a[g->n];
}

static bool glob_match(const glob *g, const char *rel) {
    bool a[GLOB_MAX + 8], b[GLOB_MAX + 8];
    const char *s = rel;
    if (g->name_only) {
        const char *sl = strrchr(rel, '/');
        if (sl) s = sl + 1;
    }
    return glob_match_str(g, s, a, b);
}

/* ---- listing ----------------------------------------------------------------------- */

enum { KIND_FILES, KIND_DIRS, KIND_ALL };

typedef struct entry {
    char *rel;        /* '/'-separated, below the base */
    bool dir;
} entry;

typedef struct listing {
    entry *e;
    size_t n, cap;
    bool truncated;   /* time or size limit, or a directory that could not be read */
} listing;

static void listing_free(listing *l) {
    for (size_t i = 0; i < l->n; i++) free(l->e[i].rel);
    free(l->e);
}

static bool listing_add(listing *l, const char *rel, size_t len, bool dir) {
    if (l->n == LIST_MAX) {
        l->truncated = true;
        return false;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        entry *e = realloc(l->e, cap * sizeof *e);
        if (!e) return false;
        l->e = e;
        l->cap = cap;
    }
    char *r = strndup(rel, len);
    if (!r) return false;
    l->e[l->n++] = (entry){r, dir};
    return true;
}

static int depth_of(const char *rel, size_t len) {
    int d = 1;
    for (size_t i = 0; i < len; i++) d += rel[i] == '/';
    return d;
}

static bool is_junk(const char *name) {
    static const char *const junk[] = {".git", ".svn", ".hg", "node_modules", "__pycache__", ".venv", "venv", "dist",
                                       "build", "target", ".cache", ".idea", ".vscode"};
    for (size_t i = 0; i < OB_ARRAY_LEN(junk); i++)
        if (!strcmp(name, junk[i])) return true;
    return false;
}

/* Files git does not ignore; false when base is not in a checkout (or git is missing). */
static bool list_git(const char *base, int max_depth, const volatile int *stop, listing *l) {
    char *argv[] = {"git", "-C", (char *)base, "ls-files", "-z", "--cached", "--others", "--exclude-standard", NULL};
    ob_subproc_result r;
    char err[256];
    if (ob_subproc_run(argv, NULL, GIT_MAX_OUT, (int)(LIST_TIME_S * 1000), stop, &r, err, sizeof err) != OB_OK) return false;
    bool ok = r.code == 0 && !r.timed_out && !r.stopped;
    if (ok) {
        size_t bl = strlen(base);
        char *path = malloc(bl + 4096 + 2);
        for (size_t i = 0; path && i < r.len;) {
            size_t len = strnlen(r.out + i, r.len - i);
            /* a tracked file may be gone from the disk; git's own warnings are not paths */
            struct stat sb;
            if (len > 0 && len <= 4096 && (max_depth == 0 || depth_of(r.out + i, len) <= max_depth)) {
                snprintf(path, bl + 4096 + 2, "%s/%.*s", base, (int)len, r.out + i);
                if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && !listing_add(l, r.out + i, len, false)) break;
            }
            i += len + 1;
        }
        free(path);
        l->truncated |= r.truncated;
    }
    free(r.out);
    return ok;
}

typedef struct walk_dir {
    char *abs, *rel;
    int depth;
} walk_dir;

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void list_walk(const char *base, int max_depth, int kind, const volatile int *stop, listing *l) {
    double deadline = ob_time_s() + LIST_TIME_S;
    walk_dir *stack = malloc(sizeof *stack);
    size_t sn = 0, scap = 1;
    if (!stack) return;
    stack[sn++] = (walk_dir){strdup(base), strdup(""), 0};
    while (sn > 0) {
        walk_dir w = stack[--sn];
        DIR *d = (w.abs && w.rel) ? opendir(w.abs) : NULL;
        if (!d && errno != EACCES) l->truncated = true;
        char **names = NULL;
        size_t nn = 0, ncap = 0;
        for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            if (nn == ncap) {
                ncap = ncap ? ncap * 2 : 64;
                char **t = realloc(names, ncap * sizeof *t);
                if (!t) break;
                names = t;
            }
            if ((names[nn] = strdup(de->d_name)) != NULL) nn++;
        }
        if (d) closedir(d);
        if (nn) qsort(names, nn, sizeof *names, by_name);
        size_t first_child = sn;
        for (size_t i = 0; i < nn; i++) {
            if (ob_time_s() > deadline || (stop && *stop) || l->n >= LIST_MAX) {
                l->truncated = true;
                break;
            }
            size_t al = strlen(w.abs) + strlen(names[i]) + 2, rl = strlen(w.rel) + strlen(names[i]) + 2;
            char *abs = malloc(al), *rel = malloc(rl);
            struct stat sb, lsb;
            if (!abs || !rel) {
                free(abs);
                free(rel);
                break;
            }
            snprintf(abs, al, "%s/%s", w.abs, names[i]);
            snprintf(rel, rl, "%s%s%s", w.rel, *w.rel ? "/" : "", names[i]);
            bool keep = false;
            if (stat(abs, &sb) == 0 && S_ISDIR(sb.st_mode)) {
                if (kind != KIND_FILES) listing_add(l, rel, strlen(rel), true);
                bool link = lstat(abs, &lsb) == 0 && S_ISLNK(lsb.st_mode);
                if (!link && !is_junk(names[i]) && (max_depth == 0 || w.depth + 1 < max_depth)) {
                    if (sn == scap) {
                        walk_dir *t = realloc(stack, scap * 2 * sizeof *t);
                        if (t) {
                            stack = t;
                            scap *= 2;
                        }
                    }
                    if (sn < scap) {
                        stack[sn++] = (walk_dir){abs, rel, w.depth + 1};
                        keep = true;
                    }
                }
            } else if (S_ISREG(sb.st_mode) && kind != KIND_DIRS) {
                listing_add(l, rel, strlen(rel), false);
            }
            if (!keep) {
                free(abs);
                free(rel);
            }
        }
        /* the first subdirectory is walked next: reverse what was pushed */
        for (size_t i = first_child, j = sn; j > i + 1; i++, j--) {
            walk_dir t = stack[i];
            stack[i] = stack[j - 1];
            stack[j - 1] = t;
        }
        for (size_t i = 0; i < nn; i++) free(names[i]);
        free(names);
        free(w.abs);
        free(w.rel);
        if (l->truncated && (ob_time_s() > deadline || (stop && *stop) || l->n >= LIST_MAX)) break;
    }
    for (size_t i = 0; i < sn; i++) {
        free(stack[i].abs);
        free(stack[i].rel);
    }
    free(stack);
}

static void list_entries(const char *base, int max_depth, int kind, const volatile int *stop, listing *l) {
    /* git cannot list directories */
    if (kind == KIND_FILES && list_git(base, max_depth, stop, l)) return;
    listing_free(l);
    memset(l, 0, sizeof *l);
    list_walk(base, max_depth, kind, stop, l);
}

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* ---- file_glob_search -------------------------------------------------------------- */

json_t *ob_tool_file_glob_search(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len) {
    const char *path = NULL, *include = "**", *exclude = NULL, *type = "file";
    long long max_depth = 0, limit = SEARCH_MAX;
    if (!ob_tool_str(p, "path", true, &path, bad, bad_len) || !ob_tool_str(p, "include", false, &include, bad, bad_len) ||
        !ob_tool_str(p, "exclude", false, &exclude, bad, bad_len) || !ob_tool_str(p, "type", false, &type, bad, bad_len) ||
        !ob_tool_int(p, "max_depth", &max_depth, bad, bad_len) || !ob_tool_int(p, "limit", &limit, bad, bad_len))
        return NULL;
    if (limit < 1) return ob_tool_error("invalid limit: %lld (expected 1 or more)", limit);
    int kind = !strcmp(type, "file") ? KIND_FILES : !strcmp(type, "dir") ? KIND_DIRS : !strcmp(type, "all") ? KIND_ALL : -1;
    if (kind < 0) return ob_tool_error("invalid type: %s (expected \"file\", \"dir\" or \"all\")", type);
    glob gi = {0}, ge = {0};
    if (!glob_compile(include, &gi) || (exclude && *exclude && !glob_compile(exclude, &ge))) {
        free(gi.t);
        return ob_tool_error("invalid glob (at most %d characters)", GLOB_MAX);
    }
    char *base = ob_tool_path(c, path);
    json_t *res;
    if (!base || !is_dir(base)) {
        res = ob_tool_error("path does not exist or is not a directory: %s", path);
    } else {
        listing l = {0};
        list_entries(base, (int)OB_MAX(0, OB_MIN(max_depth, 1 << 20)), kind, c->stop, &l);
        json_t *entries = json_array();
        char *text = NULL;
        size_t tl = 0, total = 0, shown = (size_t)OB_MIN(limit, SEARCH_MAX);
        ob_srv_buf_add(&text, &tl, "", 0);
        for (size_t i = 0; i < l.n; i++) {
            if (!glob_match(&gi, l.e[i].rel) || (ge.t && glob_match(&ge, l.e[i].rel))) continue;
            if (total++ >= shown) continue;
            ob_srv_buf_add(&text, &tl, l.e[i].rel, strlen(l.e[i].rel));
            ob_srv_buf_add(&text, &tl, l.e[i].dir ? "/\n" : "\n", l.e[i].dir ? 2 : 1);
            json_array_append_new(entries, json_pack("{s:o,s:s}", "path", ob_srv_jstr(l.e[i].rel, strlen(l.e[i].rel)),
                                                     "type", l.e[i].dir ? "dir" : "file"));
        }
        char tail[256];
        snprintf(tail, sizeof tail, "\n---\nTotal matches: %zu\n", total);
        ob_srv_buf_add(&text, &tl, tail, strlen(tail));
        if (total > shown) {
            snprintf(tail, sizeof tail, "[showing the first %zu of %zu matches: narrow the glob to see others]\n", shown, total);
            ob_srv_buf_add(&text, &tl, tail, strlen(tail));
        }
        if (l.truncated) {
            const char *t = "[listing incomplete: time or size limit, or a directory that could not be read]\n";
            ob_srv_buf_add(&text, &tl, t, strlen(t));
        }
        res = json_object();
        json_object_set_new(res, "plain_text_response", ob_srv_jstr(text ? text : "", tl));
        json_object_set_new(res, "entries", entries);
        json_object_set_new(res, "base", ob_srv_jstr(base, strlen(base)));
        free(text);
        listing_free(&l);
    }
    free(base);
    free(gi.t);
    free(ge.t);
    return res;
}

/* ---- grep_search ------------------------------------------------------------------- */

typedef struct grep {
    pcre2_code *re;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    int ctx;
    bool show_num;
    size_t total;
    bool limit_hit, time_hit;
    double deadline;
    char *text;
    size_t tl;
} grep;

static void grep_line(grep *g, const char *display, long no, const char *s, size_t n, bool match) {
    char pre[48];
    if (n && s[n - 1] == '\r') n--;
    ob_srv_buf_add(&g->text, &g->tl, display, strlen(display));
    if (g->show_num) snprintf(pre, sizeof pre, "%c%ld%c", match ? ':' : '-', no, match ? ':' : '-');
    else snprintf(pre, sizeof pre, "%c", match ? ':' : '-');
    ob_srv_buf_add(&g->text, &g->tl, pre, strlen(pre));
    size_t show = n > GREP_LINE_MAX ? ob_utf8_complete(s, GREP_LINE_MAX) : n;
    ob_srv_buf_add(&g->text, &g->tl, s, show);
    if (show < n) ob_srv_buf_add(&g->text, &g->tl, " [...]", 6);
    ob_srv_buf_add(&g->text, &g->tl, "\n", 1);
}

static void grep_file(grep *g, const char *abs, const char *display) {
    FILE *f = fopen(abs, "rb");
    if (!f) return;
    struct stat sb;
    char *buf = NULL;
    size_t n = 0;
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && (size_t)sb.st_size <= GREP_FILE_MAX &&
        (buf = malloc((size_t)sb.st_size + 1)) != NULL)
        n = fread(buf, 1, (size_t)sb.st_size, f);
    fclose(f);
    /* a NUL near the start: binary, as grep judges it */
    if (!buf || memchr(buf, 0, OB_MIN(n, (size_t)8192))) {
        free(buf);
        return;
    }
    size_t nl = n ? 1 : 0;
    for (size_t i = 0; i < n; i++) nl += buf[i] == '\n';
    if (n && buf[n - 1] == '\n') nl--;
    size_t *ls = malloc((nl + 1) * sizeof *ls);
    if (!ls) {
        free(buf);
        return;
    }
    size_t k = 0;
    if (nl) ls[k++] = 0;
    for (size_t i = 0; i < n && k < nl; i++)
        if (buf[i] == '\n') ls[k++] = i + 1;
    ls[nl] = n && buf[n - 1] == '\n' ? n : n + 1; /* where a '\n' after the last line is, or would be */
    for (size_t i = 0; i < nl; i++) {
        if (g->total >= SEARCH_MAX) {
            g->limit_hit = true;
            break;
        }
        if ((i & 1023) == 0 && ob_time_s() > g->deadline) {
            g->time_hit = true;
            break;
        }
        size_t len = OB_MIN(ls[i + 1] - 1, n) - ls[i];
        if (pcre2_match(g->re, (PCRE2_SPTR)(buf + ls[i]), len, 0, 0, g->md, g->mc) < 0) continue;
        size_t lo = g->ctx ? (i > (size_t)g->ctx ? i - (size_t)g->ctx : 0) : i;
        size_t hi = g->ctx ? OB_MIN(nl - 1, i + (size_t)g->ctx) : i;
        for (size_t j = lo; j <= hi; j++)
            grep_line(g, display, (long)j + 1, buf + ls[j], OB_MIN(ls[j + 1] - 1, n) - ls[j], j == i);
        if (g->ctx) ob_srv_buf_add(&g->text, &g->tl, "--\n", 3);
        g->total++;
    }
    free(ls);
    free(buf);
}

json_t *ob_tool_grep_search(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len) {
    const char *path = NULL, *pattern = NULL, *include = "**", *exclude = NULL;
    bool nums = false, literal = false, icase = false;
    long long ctx = 0;
    if (!ob_tool_str(p, "path", true, &path, bad, bad_len) || !ob_tool_str(p, "pattern", true, &pattern, bad, bad_len) ||
        !ob_tool_str(p, "include", false, &include, bad, bad_len) || !ob_tool_str(p, "exclude", false, &exclude, bad, bad_len) ||
        !ob_tool_bool(p, "return_line_numbers", &nums, bad, bad_len) || !ob_tool_bool(p, "literal", &literal, bad, bad_len) ||
        !ob_tool_bool(p, "ignore_case", &icase, bad, bad_len) || !ob_tool_int(p, "context_lines", &ctx, bad, bad_len))
        return NULL;
    grep g = {.ctx = (int)OB_MAX(0, OB_MIN(ctx, 50)), .deadline = ob_time_s() + GREP_TIME_S};
    g.show_num = nums || g.ctx > 0;
    int ec;
    PCRE2_SIZE eo;
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : 0) | (icase ? PCRE2_CASELESS : 0);
    g.re = pcre2_compile((PCRE2_SPTR)pattern, json_string_length(json_object_get(p, "pattern")), opts, &ec, &eo, NULL);
    if (!g.re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return ob_tool_error("invalid regex: %s (at offset %zu)", (char *)msg, (size_t)eo);
    }
    g.md = pcre2_match_data_create_from_pattern(g.re, NULL);
    g.mc = pcre2_match_context_create(NULL);
    if (g.mc) {
        /* a pattern that backtracks without end fails on that line instead of hanging */
        pcre2_set_match_limit(g.mc, 1000000);
        pcre2_set_depth_limit(g.mc, 10000);
    }
    glob gi = {0}, ge = {0};
    char *abs = ob_tool_path(c, path);
    json_t *res = NULL;
    struct stat sb;
    bool found = abs && stat(abs, &sb) == 0;
    if (!g.md || !g.mc || !glob_compile(include, &gi) || (exclude && *exclude && !glob_compile(exclude, &ge))) {
        res = ob_tool_error("invalid glob or out of memory");
    } else if (found && S_ISREG(sb.st_mode)) {
        grep_file(&g, abs, path);
    } else if (found && S_ISDIR(sb.st_mode)) {
        listing l = {0};
        list_entries(abs, 0, KIND_FILES, c->stop, &l);
        size_t al = strlen(abs);
        for (size_t i = 0; i < l.n && !g.limit_hit && !g.time_hit && !(c->stop && *c->stop); i++) {
            if (!glob_match(&gi, l.e[i].rel) || (ge.t && glob_match(&ge, l.e[i].rel))) continue;
            size_t fl = al + strlen(l.e[i].rel) + 2;
            char *full = malloc(fl);
            if (!full) break;
            snprintf(full, fl, "%s/%s", abs, l.e[i].rel);
            grep_file(&g, full, l.e[i].rel);
            free(full);
        }
        listing_free(&l);
    } else {
        res = ob_tool_error("path does not exist: %s", path);
    }
    if (!res) {
        char tail[160];
        snprintf(tail, sizeof tail, "\n---\nTotal matches: %zu\n", g.total);
        ob_srv_buf_add(&g.text, &g.tl, tail, strlen(tail));
        if (g.limit_hit) {
            snprintf(tail, sizeof tail, "[stopped at %d matches: narrow the path, pattern or include to see others]\n", SEARCH_MAX);
            ob_srv_buf_add(&g.text, &g.tl, tail, strlen(tail));
        }
        if (g.time_hit) {
            const char *t = "[stopped at the time limit: narrow the path or include]\n";
            ob_srv_buf_add(&g.text, &g.tl, t, strlen(t));
        }
        res = json_object();
        json_object_set_new(res, "plain_text_response", ob_srv_jstr(g.text ? g.text : "", g.tl));
    }
    free(g.text);
    free(abs);
    free(gi.t);
    free(ge.t);
    pcre2_match_data_free(g.md);
    pcre2_match_context_free(g.mc);
    pcre2_code_free(g.re);
    return res;
}
