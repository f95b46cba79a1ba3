/* Growable text for the grammar writers (schema.c, pattern.c), and UTF-8 encoding. */
#include "grammar/grammar_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ob_utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

void ob_gtext_add(ob_gtext *t, const char *s, size_t n) {
    if (t->oom) return;
    if (t->n + n + 1 > t->cap) {
        size_t c = t->cap ? t->cap : 256;
        while (c < t->n + n + 1) c *= 2;
        char *p = realloc(t->s, c);
        if (!p) {
            t->oom = true;
            return;
        }
        t->s = p;
        t->cap = c;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = 0;
}

void ob_gtext_puts(ob_gtext *t, const char *s) { ob_gtext_add(t, s, strlen(s)); }

void ob_gtext_printf(ob_gtext *t, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (k < 0) { t->oom = true; return; }
    if ((size_t)k < sizeof buf) { ob_gtext_add(t, buf, (size_t)k); return; }
    char *big = malloc((size_t)k + 1);
    if (!big) { t->oom = true; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    ob_gtext_add(t, big, (size_t)k);
    free(big);
}

void ob_gtext_literal(ob_gtext *t, const char *s, size_t n) {
    ob_gtext_add(t, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            ob_gtext_add(t, e, 2);
        } else if (c < 0x20 || c == 0x7F) {
            ob_gtext_printf(t, "\\x%02X", c);
        } else {
            ob_gtext_add(t, (const char *)&c, 1); /* UTF-8 passes through: the parser reads it */
        }
    }
    ob_gtext_add(t, "\"", 1);
}
