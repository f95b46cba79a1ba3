/* The file tools: read_file, write_file, edit_file, and how a tool's path is resolved.
 * Limits: read_file returns at most 16 KiB (a bigger file needs a line range), edit_file
 * edits files of up to 16 MiB; write_file is bounded by the request body limit. */
#include "server/agent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"

#define READ_MAX (16 * 1024)         /* llama-server's read_file limit */
#define EDIT_MAX (16u << 20)
#define PATH_MAX_LEN 4096

/* ---- paths ------------------------------------------------------------------------- */

char *ob_tool_path(const ob_tool_ctx *c, const char *path) {
    char cwd[PATH_MAX_LEN];
    const char *home = NULL, *rest = path;
    if (path[0] == '~' && (path[1] == 0 || path[1] == '/') && c->home && c->home[0]) {
        home = c->home;
        rest = path + 1;
    }
    const char *base = "";
    if (!home && path[0] != '/') {
        if (c->cwd && c->cwd[0] == '/') base = c->cwd;
        else if (!getcwd(cwd, sizeof cwd)) return NULL;
        else if (c->cwd) {
            /* a relative cwd is below ours */
            size_t l = strlen(cwd);
            if (l + 1 + strlen(c->cwd) + 1 > sizeof cwd) return NULL;
            cwd[l] = '/';
            strcpy(cwd + l + 1, c->cwd);
            base = cwd;
        } else base = cwd;
    }
    size_t n = strlen(home ? home : base) + 1 + strlen(rest) + 1;
    if (n > PATH_MAX_LEN) return NULL;
    char *joined = malloc(n), *out = malloc(n + 1);
    if (!joined || !out) {
        free(joined);
        free(out);
        return NULL;
    }
    size_t hl = strlen(home ? home : base);
    memcpy(joined, home ? home : base, hl);
    joined[hl] = '/';
    memcpy(joined + hl + 1, rest, strlen(rest) + 1);
    /* lexical: "." dropped, ".." removes the component before it (never above "/") */
    size_t o = 0;
    for (const char *s = joined; *s;) {
        while (*s == '/') s++;
        size_t l = strcspn(s, "/");
        if (l == 0) break;
        if (l == 1 && s[0] == '.') {
        } else if (l == 2 && s[0] == '.' && s[1] == '.') {
            while (o > 0 && out[o - 1] != '/') o--;
            if (o > 0) o--;
        } else {
            out[o++] = '/';
            memcpy(out + o, s, l);
            o += l;
        }
        s += l;
    }
    if (o == 0) out[o++] = '/';
    out[o] = 0;
    free(joined);
    return out;
}

/* ---- read_file --------------------------------------------------------------------- */

/* Lines of a file, each kept up to `cap` bytes (the rest is skipped): memory stays
 * bounded whatever the file holds. */
typedef struct line_reader {
    FILE *f;
    char buf[65536];
    size_t pos, len;
} line_reader;

/* False at the end of the file. A last line without '\n' is a line; a final '\n' does
 * not start one. */
static bool next_line(line_reader *lr, char *out, size_t cap, size_t *n_out) {
    size_t n = 0;
    bool any = false;
    for (;;) {
        if (lr->pos == lr->len) {
            lr->len = fread(lr->buf, 1, sizeof lr->buf, lr->f);
            lr->pos = 0;
            if (lr->len == 0) break;
        }
        any = true;
        char *nl = memchr(lr->buf + lr->pos, '\n', lr->len - lr->pos);
        size_t take = nl ? (size_t)(nl - (lr->buf + lr->pos)) : lr->len - lr->pos;
        size_t keep = OB_MIN(take, cap - n);
        memcpy(out + n, lr->buf + lr->pos, keep);
        n += keep;
        lr->pos += take;
        if (nl) {
            lr->pos++;
            break;
        }
    }
    *n_out = n;
    return any;
}

json_t *ob_tool_read_file(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len) {
    const char *path = NULL;
    long long start = 1, end = -1;
    bool loc = false;
    if (!ob_tool_str(p, "path", true, &path, bad, bad_len) || !ob_tool_int(p, "start_line", &start, bad, bad_len) ||
        !ob_tool_int(p, "end_line", &end, bad, bad_len) || !ob_tool_bool(p, "append_loc", &loc, bad, bad_len))
        return NULL;
    char *full = ob_tool_path(c, path);
    if (!full) return ob_tool_error("path too long: %s", path);
    struct stat sb;
    json_t *res = NULL;
    FILE *f = NULL;
    line_reader *lr = NULL;
    char *line = NULL, *text = NULL;
    if (stat(full, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        res = ob_tool_error("cannot stat file: %s", path);
        goto out;
    }
    if (sb.st_size > READ_MAX && end == -1) {
        res = ob_tool_error("file too large (%lld bytes, max %d). Use start_line/end_line to read a portion.",
                            (long long)sb.st_size, READ_MAX);
        goto out;
    }
    f = fopen(full, "rb");
    lr = calloc(1, sizeof *lr);
    line = malloc(READ_MAX + 1);
    text = malloc(READ_MAX + 64);
    if (!f || !lr || !line || !text) {
        res = ob_tool_error("failed to open file: %s", path);
        goto out;
    }
    lr->f = f;
    size_t tl = 0, ll;
    for (long long no = 1; (end == -1 || no <= end) && next_line(lr, line, READ_MAX + 1, &ll); no++) {
        if (no < start) continue;
        char pre[32] = "";
        if (loc) snprintf(pre, sizeof pre, "%lld\u2192", no);
        size_t pl = strlen(pre);
        if (tl + pl + ll + 1 > READ_MAX) {
            memcpy(text + tl, "[output truncated]", 18);
            tl += 18;
            break;
        }
        memcpy(text + tl, pre, pl);
        memcpy(text + tl + pl, line, ll);
        tl += pl + ll;
        text[tl++] = '\n';
    }
    res = json_object();
    json_object_set_new(res, "plain_text_response", ob_srv_jstr(text, tl));
out:
    if (f) fclose(f);
    free(lr);
    free(line);
    free(text);
    free(full);
    return res;
}

/* ---- write_file -------------------------------------------------------------------- */

/* mkdir -p of the directory that holds `full` (an absolute path). */
static bool make_parents(char *full) {
    for (char *s = full + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        int rc = mkdir(full, 0777);
        struct stat sb;
        bool ok = rc == 0 || (errno == EEXIST && stat(full, &sb) == 0 && S_ISDIR(sb.st_mode));
        *s = '/';
        if (!ok) return false;
    }
    return true;
}

static bool write_all(const char *full, const char *data, size_t n) {
    FILE *f = fopen(full, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

json_t *ob_tool_write_file(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len) {
    const char *path = NULL, *content = NULL;
    if (!ob_tool_str(p, "path", true, &path, bad, bad_len) || !ob_tool_str(p, "content", true, &content, bad, bad_len))
        return NULL;
    size_t n = json_string_length(json_object_get(p, "content"));
    char *full = ob_tool_path(c, path);
    if (!full) return ob_tool_error("path too long: %s", path);
    bool ok = make_parents(full) && write_all(full, content, n);
    free(full);
    if (!ok) return ob_tool_error("failed to write file: %s", path);
    return json_pack("{s:s,s:s,s:I}", "result", "file written successfully", "path", path, "bytes", (json_int_t)n);
}

/* ---- edit_file --------------------------------------------------------------------- */

/* What a model gets wrong when it copies text: spaces at line ends, typographic quotes,
 * dashes and spaces. Each is mapped to ASCII, line by line; the line count stays. */
static const struct { const char *from; char to; } g_fold[] = {
    {"\xe2\x80\x98", '\''}, {"\xe2\x80\x99", '\''}, {"\xe2\x80\x9a", '\''}, {"\xe2\x80\x9b", '\''},
    {"\xe2\x80\x9c", '"'},  {"\xe2\x80\x9d", '"'},  {"\xe2\x80\x9e", '"'},  {"\xe2\x80\x9f", '"'},
    {"\xe2\x80\x90", '-'},  {"\xe2\x80\x91", '-'},  {"\xe2\x80\x92", '-'},  {"\xe2\x80\x93", '-'},
    {"\xe2\x80\x94", '-'},  {"\xe2\x80\x95", '-'},  {"\xe2\x88\x92", '-'},  {"\xc2\xa0", ' '},
    {"\xe2\x80\x82", ' '},  {"\xe2\x80\x83", ' '},  {"\xe2\x80\x84", ' '},  {"\xe2\x80\x85", ' '},
    {"\xe2\x80\x86", ' '},  {"\xe2\x80\x87", ' '},  {"\xe2\x80\x88", ' '},  {"\xe2\x80\x89", ' '},
    {"\xe2\x80\x8a", ' '},  {"\xe2\x80\xaf", ' '},  {"\xe2\x81\x9f", ' '},  {"\xe3\x80\x80", ' '},
};

static char *fold(const char *s, size_t n, size_t *out_n) {
    char *o = malloc(n + 1);
    if (!o) return NULL;
    size_t k = 0, line = 0; /* line: where the current output line starts */
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '\n') {
            while (k > line && (o[k - 1] == ' ' || o[k - 1] == '\t' || o[k - 1] == '\r')) k--;
            if (i == n) break;
            o[k++] = '\n';
            line = k;
            continue;
        }
        bool mapped = false;
        for (size_t j = 0; (unsigned char)s[i] >= 0xc2 && j < OB_ARRAY_LEN(g_fold) && !mapped; j++) {
            size_t fl = strlen(g_fold[j].from);
            if (fl <= n - i && !memcmp(s + i, g_fold[j].from, fl)) {
                o[k++] = g_fold[j].to;
                i += fl - 1;
                mapped = true;
            }
        }
        if (!mapped) o[k++] = s[i];
    }
    o[k] = 0;
    *out_n = k;
    return o;
}

static size_t count_in(const char *h, size_t hn, const char *nd, size_t nn) {
    size_t c = 0;
    for (const char *p = h; nn && (p = memmem(p, hn - (size_t)(p - h), nd, nn)) != NULL; p += nn) c++;
    return c;
}

typedef struct edit {
    const char *old, *new_;
    size_t old_n, new_n;
    char *needle;     /* folded old text when the file is matched folded */
    size_t at, len;   /* where it matches in the base text */
    int index;        /* its place in the request */
} edit;

static int by_at(const void *a, const void *b) {
    const edit *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* base[lo, hi) with the edits that fall inside it applied. */
static void splice(char **out, size_t *on, const char *base, size_t lo, size_t hi, const edit *e, int n) {
    size_t pos = lo;
    for (int i = 0; i < n; i++) {
        if (e[i].at < lo || e[i].at >= hi) continue;
        ob_srv_buf_add(out, on, base + pos, e[i].at - pos);
        ob_srv_buf_add(out, on, e[i].new_, e[i].new_n);
        pos = e[i].at + e[i].len;
    }
    ob_srv_buf_add(out, on, base + pos, hi - pos);
}

/* Offsets where each line starts; n_lines + 1 entries (the last is the text's length). */
static size_t *line_starts(const char *s, size_t n, size_t *n_lines) {
    size_t k = 1;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    size_t *ls = malloc((k + 1) * sizeof *ls);
    if (!ls) return NULL;
    size_t j = 0;
    ls[j++] = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\n') ls[j++] = i + 1;
    ls[k] = n;
    *n_lines = k;
    return ls;
}

static size_t line_of(const size_t *ls, size_t n_lines, size_t off) {
    size_t lo = 0, hi = n_lines; /* the last line whose start is <= off */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (ls[mid] <= off) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* Folded matches are replaced in the folded text, but only on the lines they touch:
 * every other line comes from the file as it was, byte for byte. */
static char *apply_folded(const char *orig, size_t on, const char *base, size_t bn, edit *e, int n, size_t *out_n) {
    size_t nl_o, nl_b;
    size_t *lo = line_starts(orig, on, &nl_o), *lb = line_starts(base, bn, &nl_b);
    char *out = NULL;
    size_t len = 0;
    if (lo && lb && nl_o == nl_b) {
        out = malloc(1);
        if (out) out[0] = 0;
        size_t next = 0; /* the first line of the original not yet copied */
        for (int i = 0; i < n && out;) {
            size_t first = line_of(lb, nl_b, e[i].at);
            size_t last = line_of(lb, nl_b, e[i].at + (e[i].len ? e[i].len - 1 : 0));
            int j = i + 1;
            while (j < n && line_of(lb, nl_b, e[j].at) <= last) {
                last = OB_MAX(last, line_of(lb, nl_b, e[j].at + (e[j].len ? e[j].len - 1 : 0)));
                j++;
            }
            ob_srv_buf_add(&out, &len, orig + lo[next], lo[first] - lo[next]);
            splice(&out, &len, base, lb[first], lb[last + 1], e + i, j - i);
            next = last + 1;
            i = j;
        }
        if (out) ob_srv_buf_add(&out, &len, orig + lo[next], on - lo[next]);
    }
    free(lo);
    free(lb);
    *out_n = len;
    return out;
}

static char *read_whole(const char *full, size_t max, size_t *n, bool *too_big) {
    *too_big = false;
    FILE *f = fopen(full, "rb");
    if (!f) return NULL;
    struct stat sb;
    char *buf = NULL;
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode)) {
        if ((size_t)sb.st_size > max) *too_big = true;
        else if ((buf = malloc((size_t)sb.st_size + 1)) != NULL) {
            *n = fread(buf, 1, (size_t)sb.st_size, f);
            buf[*n] = 0;
        }
    }
    fclose(f);
    return buf;
}

json_t *ob_tool_edit_file(json_t *p, const ob_tool_ctx *c, char *bad, size_t bad_len) {
    const char *path = NULL;
    if (!ob_tool_str(p, "path", true, &path, bad, bad_len)) return NULL;
    json_t *ej = json_object_get(p, "edits");
    if (!ej) {
        snprintf(bad, bad_len, "missing parameter 'edits'");
        return NULL;
    }
    if (!json_is_array(ej) || json_array_size(ej) == 0) return ob_tool_error("\"edits\" must be a non-empty array");
    if (json_array_size(ej) > 1000) return ob_tool_error("too many edits (%zu, at most 1000)", json_array_size(ej));
    int n = (int)json_array_size(ej);
    edit *e = calloc((size_t)n, sizeof *e);
    if (!e) return ob_tool_error("out of memory");
    json_t *res = NULL;
    char *full = NULL, *orig = NULL, *folded = NULL, *out = NULL;
    size_t on = 0, fn = 0, outn = 0;
    for (int i = 0; i < n; i++) {
        json_t *it = json_array_get(ej, (size_t)i);
        json_t *o = json_object_get(it, "old_text"), *w = json_object_get(it, "new_text");
        if (!json_is_string(o) || !json_is_string(w)) {
            snprintf(bad, bad_len, "edits[%d] needs string 'old_text' and 'new_text'", i);
            goto out;
        }
        e[i] = (edit){.old = json_string_value(o), .old_n = json_string_length(o), .new_ = json_string_value(w),
                      .new_n = json_string_length(w), .index = i};
        if (!e[i].old_n) {
            res = ob_tool_error("edits[%d].old_text must not be empty", i);
            goto out;
        }
    }
    full = ob_tool_path(c, path);
    bool too_big = false;
    orig = full ? read_whole(full, EDIT_MAX, &on, &too_big) : NULL;
    if (!orig) {
        res = full && too_big ? ob_tool_error("file too large to edit: %s (at most %u bytes)", path, EDIT_MAX)
                              : ob_tool_error("failed to open file: %s", path);
        goto out;
    }
    folded = fold(orig, on, &fn);
    if (!folded) {
        res = ob_tool_error("out of memory");
        goto out;
    }
    /* exact matches when every old_text is in the file as given; else all are matched folded */
    bool any_folded = false;
    for (int i = 0; i < n; i++) {
        size_t nn;
        e[i].needle = fold(e[i].old, e[i].old_n, &nn);
        if (!e[i].needle) {
            res = ob_tool_error("out of memory");
            goto out;
        }
        if (memmem(orig, on, e[i].old, e[i].old_n)) continue;
        if (!nn || !memmem(folded, fn, e[i].needle, nn)) {
            res = ob_tool_error("edits[%d].old_text was not found in %s: it must match the file's current text", i, path);
            goto out;
        }
        any_folded = true;
    }
    const char *base = any_folded ? folded : orig;
    size_t bn = any_folded ? fn : on;
    for (int i = 0; i < n; i++) {
        size_t nn = strlen(e[i].needle);
        if (any_folded && !nn) {
            res = ob_tool_error("edits[%d].old_text was not found in %s: it must match the file's current text", i, path);
            goto out;
        }
        /* uniqueness is judged folded: two copies that differ only in spacing are two */
        size_t k = count_in(folded, fn, e[i].needle, nn);
        if (k > 1) {
            res = ob_tool_error("edits[%d].old_text occurs %zu times in %s: it must be unique (add lines around it)",
                                i, k, path);
            goto out;
        }
        const char *nd = any_folded ? e[i].needle : e[i].old;
        e[i].len = any_folded ? nn : e[i].old_n;
        const char *at = memmem(base, bn, nd, e[i].len);
        if (!at) { /* folded it is there but exactly it is not, with another edit folded */
            res = ob_tool_error("edits[%d].old_text was not found in %s: it must match the file's current text", i, path);
            goto out;
        }
        e[i].at = (size_t)(at - base);
    }
    qsort(e, (size_t)n, sizeof *e, by_at);
    for (int i = 1; i < n; i++)
        if (e[i - 1].at + e[i - 1].len > e[i].at) {
            res = ob_tool_error("edits[%d] and edits[%d] overlap in %s: merge them into one edit", e[i - 1].index,
                                e[i].index, path);
            goto out;
        }
    if (any_folded) {
        out = apply_folded(orig, on, folded, fn, e, n, &outn);
    } else {
        out = malloc(1);
        if (out) {
            out[0] = 0;
            splice(&out, &outn, orig, 0, on, e, n);
        }
    }
    if (!out) res = ob_tool_error("out of memory");
    else if (outn == on && !memcmp(out, orig, on)) res = ob_tool_error("no changes made: the edits leave the file as it is");
    else if (!write_all(full, out, outn)) res = ob_tool_error("failed to write file: %s", path);
    else res = json_pack("{s:s,s:s,s:i}", "result", "file edited successfully", "path", path, "edits_applied", n);
out:
    for (int i = 0; i < n; i++) free(e[i].needle);
    free(e);
    free(full);
    free(orig);
    free(folded);
    free(out);
    return res;
}
