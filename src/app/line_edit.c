/* The chat's line editor (see line_edit.h). Keys arrive as bytes: control codes, escape
 * sequences (CSI "ESC [ ... final", SS3 "ESC O x") and UTF-8 text; the line is a byte
 * buffer whose cursor always sits on a code point boundary. */
#include "app/line_edit.h"
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>
#include <utf8proc.h>

#define HIST_MAX 200

/* A growing byte buffer. */
typedef struct sbuf { char *p; size_t len, cap; bool oom; } sbuf;

static void sb_insert(sbuf *b, size_t at, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memmove(b->p + at + n, b->p + at, b->len - at);
    memcpy(b->p + at, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_add(sbuf *b, const char *s) { sb_insert(b, b->len, s, strlen(s)); }

static void sb_erase(sbuf *b, size_t at, size_t n) {
    memmove(b->p + at, b->p + at + n, b->len - at - n);
    b->len -= n;
    if (b->p) b->p[b->len] = 0;
}

static void sb_set(sbuf *b, const char *s) {
    b->len = 0;
    if (b->p) b->p[0] = 0;
    sb_insert(b, 0, s, strlen(s));
}

static void write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

int ob_line_edit_usable(int in_fd, int out_fd) {
    const char *term = getenv("TERM");
    return isatty(in_fd) && isatty(out_fd) && !(term && !strcmp(term, "dumb"));
}

void ob_line_edit_init(ob_line_edit *e, int in_fd, int out_fd) {
    memset(e, 0, sizeof(*e));
    e->in_fd = in_fd;
    e->out_fd = out_fd;
}

void ob_line_edit_free(ob_line_edit *e) {
    for (int i = 0; i < e->n_hist; i++) free(e->hist[i]);
    free(e->hist);
    memset(e, 0, sizeof(*e));
}

void ob_line_history_add(ob_line_edit *e, const char *line) {
    if (!line[0] || (e->n_hist && !strcmp(e->hist[e->n_hist - 1], line))) return;
    if (e->n_hist == HIST_MAX) {
        free(e->hist[0]);
        memmove(e->hist, e->hist + 1, sizeof(char *) * (HIST_MAX - 1));
        e->n_hist--;
    }
    char **h = e->n_hist ? e->hist : malloc(sizeof(char *) * HIST_MAX);
    char *s = h ? strdup(line) : NULL;
    if (!s) { if (h != e->hist) free(h); return; }
    e->hist = h;
    e->hist[e->n_hist++] = s;
}

/* The code point at p[0..n): its byte length and screen width, and the bytes to show
 * (a newline from a paste as a return arrow, other control codes and bad bytes as '?'). */
static size_t glyph(const char *p, size_t n, int *width, const char **show, size_t *show_len) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &cp);
    *width = 1;
    *show = p;
    *show_len = k > 0 ? (size_t)k : 1;
    if (k <= 0) { *show = "?"; return 1; }
    if (cp == '\n') { *show = "\xe2\x86\xb5"; *show_len = 3; }
    else if (cp == '\t') { *show = " "; *show_len = 1; }
    else if (cp < 0x20 || cp == 0x7f) { *show = "?"; *show_len = 1; }
    else *width = utf8proc_charwidth(cp);
    return (size_t)k;
}

static size_t prev_boundary(const sbuf *b, size_t pos) {
    if (pos == 0) return 0;
    pos--;
    while (pos > 0 && ((unsigned char)b->p[pos] & 0xC0) == 0x80) pos--;
    return pos;
}

static size_t next_boundary(const sbuf *b, size_t pos) {
    if (pos >= b->len) return b->len;
    int w;
    const char *s;
    size_t sl;
    return pos + glyph(b->p + pos, b->len - pos, &w, &s, &sl);
}

static int glyph_width(const sbuf *b, size_t pos) {
    int w;
    const char *s;
    size_t sl;
    glyph(b->p + pos, b->len - pos, &w, &s, &sl);
    return w;
}

/* Redraws the row: the prompt, then the part of the line around the cursor that fits. */
static void refresh(const ob_line_edit *e, const char *prompt, const sbuf *b, size_t pos) {
    struct winsize ws;
    int cols = ioctl(e->out_fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
    int pw = (int)strlen(prompt);
    int avail = cols - pw - 1 > 1 ? cols - pw - 1 : 1;
    /* the first shown code point: the cursor must be within avail columns of it */
    size_t start = pos;
    int wcur = 0;
    while (start > 0) {
        size_t p = prev_boundary(b, start);
        int w = glyph_width(b, p);
        if (wcur + w > avail) break;
        wcur += w;
        start = p;
    }
    sbuf out = {0};
    sb_add(&out, "\r");
    sb_add(&out, prompt);
    int used = 0;
    for (size_t i = start; i < b->len;) {
        int w;
        const char *s;
        size_t sl;
        size_t k = glyph(b->p + i, b->len - i, &w, &s, &sl);
        if (used + w > avail) break;
        sb_insert(&out, out.len, s, sl);
        used += w;
        i += k;
    }
    sb_add(&out, "\x1b[0K\r");
    if (pw + wcur > 0) {
        char mv[32];
        int n = snprintf(mv, sizeof(mv), "\x1b[%dC", pw + wcur);
        sb_insert(&out, out.len, mv, (size_t)n);
    }
    if (!out.oom) write_all(e->out_fd, out.p, out.len);
    free(out.p);
}

/* Up (dir -1) or down the history; the line being typed is kept in saved meanwhile. */
static void history_move(const ob_line_edit *e, sbuf *b, sbuf *saved, int *hidx, int dir, size_t *pos) {
    int to = *hidx + dir;
    if (to < 0 || to > e->n_hist) return;
    if (*hidx == e->n_hist) sb_set(saved, b->p);
    *hidx = to;
    sb_set(b, to == e->n_hist ? (saved->p ? saved->p : "") : e->hist[to]);
    *pos = b->len;
}

/* Parser state between bytes, which may come split over reads. */
enum { K_TEXT, K_ESC, K_CSI, K_SS3 };

ob_line_result ob_line_read(ob_line_edit *e, const char *prompt, char **line) {
    *line = NULL;
    struct termios orig, raw;
    if (tcgetattr(e->in_fd, &orig) != 0) return OB_LINE_ERROR;
    raw = orig;
    raw.c_iflag &= ~(tcflag_t)(BRKINT | ICRNL | INLCR | INPCK | ISTRIP | IXON);
    raw.c_lflag &= ~(tcflag_t)(ECHO | ICANON | IEXTEN | ISIG);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    /* TCSANOW keeps what was typed ahead during the last reply */
    if (tcsetattr(e->in_fd, TCSANOW, &raw) != 0) return OB_LINE_ERROR;
    write_all(e->out_fd, "\x1b[?2004h", 8);
    sbuf b = {0}, saved = {0};
    sb_set(&b, "");
    size_t pos = 0;
    int hidx = e->n_hist, state = K_TEXT, np = 0;
    bool paste = false;
    char param[16];
    ob_line_result res = OB_LINE_ERROR;
    bool done = false;
    refresh(e, prompt, &b, pos);
    while (!done) {
        if (e->pend_off >= e->n_pend) {
            ssize_t n = read(e->in_fd, e->pend, sizeof(e->pend));
            if (n < 0 && errno == EINTR) { refresh(e, prompt, &b, pos); continue; }
            if (n <= 0) { res = b.len ? OB_LINE_OK : OB_LINE_EOF; break; }
            e->n_pend = (int)n;
            e->pend_off = 0;
        }
        /* bytes after an Enter stay in e->pend for the next line */
        for (; e->pend_off < e->n_pend && !done; e->pend_off++) {
            unsigned char c = e->pend[e->pend_off];
            if (e->skip_lf && c == '\n') { e->skip_lf = 0; continue; }
            e->skip_lf = 0;
            if (state == K_ESC) {
                state = c == '[' ? K_CSI : c == 'O' ? K_SS3 : K_TEXT;
                np = 0;
                continue;
            }
            if (state == K_CSI || state == K_SS3) {
                if (state == K_CSI && c >= 0x20 && c < 0x40) {
                    if (np < (int)sizeof(param) - 1) param[np++] = (char)c;
                    continue;
                }
                param[np] = 0;
                state = K_TEXT;
                int code = atoi(param);
                if (c == '~' && code == 200) { paste = true; continue; }
                if (c == '~' && code == 201) { paste = false; continue; }
                if (c == 'A' || c == 'B') history_move(e, &b, &saved, &hidx, c == 'A' ? -1 : 1, &pos);
                else if (c == 'C') pos = next_boundary(&b, pos);
                else if (c == 'D') pos = prev_boundary(&b, pos);
                else if (c == 'H' || (c == '~' && (code == 1 || code == 7))) pos = 0;
                else if (c == 'F' || (c == '~' && (code == 4 || code == 8))) pos = b.len;
                else if (c == '~' && code == 3 && pos < b.len) sb_erase(&b, pos, next_boundary(&b, pos) - pos);
                continue;
            }
            if (c == 27) { state = K_ESC; continue; }
            if (paste && (c == '\r' || c == '\n' || c == '\t')) {
                /* a pasted newline is part of the line; CR LF and a lone CR become LF */
                sb_insert(&b, pos++, c == '\t' ? "\t" : "\n", 1);
                e->skip_lf = c == '\r';
                continue;
            }
            switch (c) {
            case '\r':
            case '\n':
                e->skip_lf = c == '\r';
                res = OB_LINE_OK;
                done = true;
                break;
            case 3: /* Ctrl-C */
                res = OB_LINE_INTR;
                done = true;
                break;
            case 4: /* Ctrl-D: end of input on an empty line, else delete */
                if (!b.len) { res = OB_LINE_EOF; done = true; }
                else if (pos < b.len) sb_erase(&b, pos, next_boundary(&b, pos) - pos);
                break;
            case 127:
            case 8: /* backspace */
                if (pos) { size_t p = prev_boundary(&b, pos); sb_erase(&b, p, pos - p); pos = p; }
                break;
            case 1: pos = 0; break;                           /* Ctrl-A */
            case 5: pos = b.len; break;                       /* Ctrl-E */
            case 2: pos = prev_boundary(&b, pos); break;      /* Ctrl-B */
            case 6: pos = next_boundary(&b, pos); break;      /* Ctrl-F */
            case 11: sb_erase(&b, pos, b.len - pos); break;   /* Ctrl-K */
            case 21: sb_erase(&b, 0, pos); pos = 0; break;    /* Ctrl-U */
            case 23: { /* Ctrl-W: the word before the cursor */
                size_t p = pos;
                while (p > 0 && b.p[p - 1] == ' ') p--;
                while (p > 0 && b.p[p - 1] != ' ') p--;
                sb_erase(&b, p, pos - p);
                pos = p;
                break;
            }
            case 12: write_all(e->out_fd, "\x1b[H\x1b[2J", 7); break; /* Ctrl-L */
            case 16: history_move(e, &b, &saved, &hidx, -1, &pos); break; /* Ctrl-P */
            case 14: history_move(e, &b, &saved, &hidx, 1, &pos); break;  /* Ctrl-N */
            default:
                if (c >= 32 || c == '\t') sb_insert(&b, pos++, (const char *)&c, 1);
            }
        }
        if (b.oom) { res = OB_LINE_ERROR; done = true; }
        if (!done) refresh(e, prompt, &b, pos);
    }
    if (res == OB_LINE_OK || res == OB_LINE_INTR) {
        refresh(e, prompt, &b, b.len);
        write_all(e->out_fd, res == OB_LINE_INTR ? "^C\r\n" : "\r\n", res == OB_LINE_INTR ? 4 : 2);
        *line = b.p ? b.p : strdup("");
        b.p = NULL;
        if (!*line) res = OB_LINE_ERROR;
    } else if (res == OB_LINE_EOF) {
        write_all(e->out_fd, "\r\n", 2);
    }
    write_all(e->out_fd, "\x1b[?2004l", 8);
    tcsetattr(e->in_fd, TCSANOW, &orig);
    free(b.p);
    free(saved.p);
    return res;
}
