/* Character classes as UTF-8 byte automata: a set of code points becomes a few states
 * whose transitions read one byte each, accepting exactly the valid UTF-8 encodings
 * (no overlong forms, no surrogates) of the set's members. */
#include "grammar/grammar_int.h"

#include <stdlib.h>
#include <string.h>

#define CP_MAX 0x10FFFFu

static int cmp_range(const void *a, const void *b) {
    const ob_cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

void ob_cp_ranges_normalize(ob_cp_range *r, int *n, bool negate) {
    int m = 0;
    for (int i = 0; i < *n; i++)
        if (r[i].lo <= r[i].hi && r[i].lo <= CP_MAX) r[m++] = (ob_cp_range){r[i].lo, r[i].hi > CP_MAX ? CP_MAX : r[i].hi};
    qsort(r, (size_t)m, sizeof *r, cmp_range);
    int k = 0;
    for (int i = 0; i < m; i++) {
        if (k && r[i].lo <= r[k - 1].hi + 1) {
            if (r[i].hi > r[k - 1].hi) r[k - 1].hi = r[i].hi;
        } else {
            r[k++] = r[i];
        }
    }
    if (negate) { /* gap i (before range i) overwrites range i once it has been read */
        uint32_t next = 0;
        for (int i = 0; i < k; i++) {
            uint32_t lo = r[i].lo, hi = r[i].hi;
            r[i] = lo > next ? (ob_cp_range){next, lo - 1} : (ob_cp_range){1, 0};
            next = hi + 1;
        }
        r[k] = next <= CP_MAX ? (ob_cp_range){next, CP_MAX} : (ob_cp_range){1, 0};
        k++;
    }
    /* surrogates are never characters: cut [D800, DFFF] out (one range may split in two) */
    int extra = 0;
    for (int i = 0; i < k; i++) {
        if (r[i].hi < 0xD800 || r[i].lo > 0xDFFF) continue;
        if (r[i].lo < 0xD800 && r[i].hi > 0xDFFF) {
            r[k + extra++] = (ob_cp_range){0xE000, r[i].hi};
            r[i].hi = 0xD7FF;
        } else if (r[i].lo < 0xD800) r[i].hi = 0xD7FF;
        else if (r[i].hi > 0xDFFF) r[i].lo = 0xE000;
        else r[i].lo = 1, r[i].hi = 0; /* wholly inside: emptied, dropped below */
    }
    k += extra;
    int m2 = 0;
    for (int i = 0; i < k; i++) if (r[i].lo <= r[i].hi) r[m2++] = r[i];
    qsort(r, (size_t)m2, sizeof *r, cmp_range);
    *n = m2;
}

/* Members of the set in [a, b]. */
static uint64_t count_in(const ob_cp_range *r, int n, uint32_t a, uint32_t b) {
    uint64_t c = 0;
    for (int i = 0; i < n; i++) {
        if (r[i].hi < a) continue;
        if (r[i].lo > b) break;
        uint32_t lo = r[i].lo > a ? r[i].lo : a, hi = r[i].hi < b ? r[i].hi : b;
        c += (uint64_t)(hi - lo) + 1;
    }
    return c;
}

static int32_t new_state(ob_gdfa_pool *p) {
    if (p->n == p->cap) {
        int32_t cap = p->cap ? p->cap * 2 : 16;
        int32_t *t = realloc(p->t, (size_t)cap * 256 * sizeof *t);
        if (!t) return -1;
        p->t = t;
        p->cap = cap;
    }
    int32_t s = p->n++;
    for (int b = 0; b < 256; b++) p->t[(size_t)s * 256 + (size_t)b] = OB_GDFA_REJECT;
    return s;
}

/* The state that takes any k continuation bytes (shared by every class of the pool). */
static int32_t any_tail(ob_gdfa_pool *p, int k) {
    if (k == 0) return OB_GDFA_DONE;
    if (p->any[k] > 0) return p->any[k] - 1;
    int32_t next = any_tail(p, k - 1);
    if (next == -1) return -1;
    int32_t s = new_state(p);
    if (s < 0) return -1;
    for (int c = 0x80; c <= 0xBF; c++) p->t[(size_t)s * 256 + (size_t)c] = next;
    p->any[k] = s + 1;
    return s;
}

/* The state after a prefix whose characters are [lo, lo + 64^k) with k continuation
 * bytes to come; min: the smallest code point this encoding length may carry. Returns
 * the state, REJECT when no member is reachable, or -3 when out of memory. */
static int32_t sub_state(ob_gdfa_pool *p, const ob_cp_range *r, int n, uint32_t lo, int k, uint32_t min) {
    uint32_t span = 1u << (6 * k), hi = lo + span - 1;
    uint32_t a = lo < min ? min : lo;
    if (a > hi) return OB_GDFA_REJECT;
    uint64_t have = count_in(r, n, a, hi);
    if (have == 0) return OB_GDFA_REJECT;
    bool clean = a == lo && hi <= CP_MAX && (hi < 0xD800 || lo > 0xDFFF);
    if (clean && have == span) {
        int32_t s = any_tail(p, k);
        return s == -1 ? -3 : s;
    }
    int32_t s = new_state(p);
    if (s < 0) return -3;
    uint32_t step = span >> 6;
    for (int c = 0; c < 64; c++) {
        uint32_t sl = lo + (uint32_t)c * step;
        int32_t next;
        if (k == 1) next = (sl >= min && count_in(r, n, sl, sl)) ? OB_GDFA_DONE : OB_GDFA_REJECT;
        else next = sub_state(p, r, n, sl, k - 1, min);
        if (next == -3) return -3;
        p->t[(size_t)s * 256 + 0x80 + (size_t)c] = next;
    }
    return s;
}

int32_t ob_gdfa_build(ob_gdfa_pool *p, const ob_cp_range *r, int n) {
    int32_t s = new_state(p);
    if (s < 0) return -1;
    for (int b = 0; b < 0x80; b++)
        if (count_in(r, n, (uint32_t)b, (uint32_t)b)) p->t[(size_t)s * 256 + (size_t)b] = OB_GDFA_DONE;
    for (int b = 0xC2; b <= 0xF4; b++) {
        uint32_t lo;
        int k;
        uint32_t min;
        if (b <= 0xDF) { lo = (uint32_t)(b & 0x1F) << 6; k = 1; min = 0x80; }
        else if (b <= 0xEF) { lo = (uint32_t)(b & 0x0F) << 12; k = 2; min = 0x800; }
        else { lo = (uint32_t)(b & 0x07) << 18; k = 3; min = 0x10000; }
        int32_t next = sub_state(p, r, n, lo, k, min);
        if (next == -3) return -1;
        p->t[(size_t)s * 256 + (size_t)b] = next;
    }
    return s;
}
