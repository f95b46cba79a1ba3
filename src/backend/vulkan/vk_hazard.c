/* Hazards between dispatches: a barrier goes before a dispatch that reads or writes bytes
 * an earlier dispatch since the last barrier wrote, or writes bytes one read. The ranges
 * since the last barrier are kept in hz_rd / hz_wr; a barrier clears them.
 *
 * A node's own ranges (ob_vk_hz_node's, taken before its first dispatch) are put back
 * after a barrier that one of its own dispatches sets: its later dispatch still comes
 * after that barrier, and a reader after it must still see the node's write. (A prenorm
 * consumer met this: the barrier for the producer's int8 x cleared the consumer's output
 * range, so the residual ADD after it ran beside it on NVIDIA.)
 *
 * The audit (ONEBIT_VK_HZ_AUDIT=1, set by the op and model tests) checks the outcome
 * apart from that bookkeeping: every range handed in is tied to the next dispatch, and a
 * dispatch whose ranges meet those of an earlier dispatch of its level (no barrier
 * between) fails the graph with a line naming both. Lavapipe runs dispatches one after
 * another, so a missing barrier shows there only through the audit. */
#include "backend/vulkan/vk_internal.h"
#include "graph/op_table.h"
#include <stdlib.h>
#include <string.h>

static bool hz_hit(const ob_vk_range *r, int n, uint64_t lo, uint64_t hi) {
    for (int i = 0; i < n; i++)
        if (lo < r[i].hi && r[i].lo < hi) return true;
    return false;
}

/* The audit's record of ranges handed in since the last dispatch (disp -1). */
static void audit_add(ob_vk *vk, const ob_vk_range *r, int n, bool wr) {
    ob_vk_audit *a = &vk->audit;
    if (!vk->hz_audit || a->failed) return;
    if (a->n + n > a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 256;
        while (cap < a->n + n) cap *= 2;
        ob_vk_audit_range *p = realloc(a->r, sizeof(*p) * (size_t)cap);
        if (!p) {
            snprintf(a->msg, sizeof(a->msg), "vulkan: hazard audit: out of memory");
            a->failed = true;
            return;
        }
        a->r = p;
        a->cap = cap;
    }
    for (int i = 0; i < n; i++) {
        if (r[i].hi <= r[i].lo) continue;
        a->r[a->n++] = (ob_vk_audit_range){r[i], wr, -1};
    }
}

void ob_vk_hz(ob_vk *vk, const ob_vk_range *rd, int nrd, const ob_vk_range *wr, int nwr) {
    audit_add(vk, rd, nrd, false);
    audit_add(vk, wr, nwr, true);
    bool need = vk->hz_all || vk->all_barriers || (!vk->listing && !vk->recording) ||
                vk->hz_nrd + nrd + vk->hz_nown_rd > OB_VK_MAX_RANGES || vk->hz_nwr + nwr + vk->hz_nown_wr > OB_VK_MAX_RANGES;
    for (int i = 0; i < nrd && !need; i++) need = hz_hit(vk->hz_wr, vk->hz_nwr, rd[i].lo, rd[i].hi);
    for (int i = 0; i < nwr && !need; i++)
        need = (!wr[i].dead && hz_hit(vk->hz_wr, vk->hz_nwr, wr[i].lo, wr[i].hi)) ||
               hz_hit(vk->hz_rd, vk->hz_nrd, wr[i].lo, wr[i].hi);
    if (need) {
        vk->need_barrier = true;
        vk->hz_all = false;
        /* the node being recorded still comes after this barrier */
        memcpy(vk->hz_rd, vk->hz_own_rd, sizeof(vk->hz_own_rd[0]) * (size_t)vk->hz_nown_rd);
        memcpy(vk->hz_wr, vk->hz_own_wr, sizeof(vk->hz_own_wr[0]) * (size_t)vk->hz_nown_wr);
        vk->hz_nrd = vk->hz_nown_rd;
        vk->hz_nwr = vk->hz_nown_wr;
    }
    for (int i = 0; i < nrd; i++) vk->hz_rd[vk->hz_nrd++] = rd[i];
    for (int i = 0; i < nwr; i++) {
        vk->hz_wr[vk->hz_nwr++] = wr[i];
        if (vk->q8_src && wr[i].lo < vk->q8_end && vk->q8_src < wr[i].hi) vk->q8_src = 0;
        /* the norm's bytes reused: it is dead, and so is its prenorm */
        if (vk->pn_src && wr[i].lo < vk->pn_end && vk->pn_src < wr[i].hi) vk->pn_src = 0;
    }
}

void ob_vk_hz_own_clear(ob_vk *vk) { vk->hz_nown_rd = vk->hz_nown_wr = 0; }

void ob_vk_hz_node(ob_vk *vk, const ob_tensor *n, const ob_tensor *add, const ob_tensor *store) {
    ob_vk_range rd[OB_VK_OWN_RD], wr[OB_VK_OWN_WR];
    int nrd = 0, nwr = 0;
    for (int i = 0; i < 3 * OB_MAX_SRC; i++) {
        const ob_tensor *by = i < OB_MAX_SRC ? n : i < 2 * OB_MAX_SRC ? add : store;
        const ob_tensor *s = by ? by->src[i % OB_MAX_SRC] : NULL;
        if (add && s == add) {
            /* a residual ADD's sum is written; a norm fused before a rope is not (the
             * rope is its one reader, and reads it inside the dispatch) */
            uint64_t lo = (uint64_t)(uintptr_t)add->data;
            if (add->op == OB_OP_ADD) wr[nwr++] = (ob_vk_range){lo, lo + ob_nbytes(add), false};
            continue;
        }
        /* KV_STORE outputs are ordering tokens: no shader reads them (the caches' own
         * ranges order the attention after its stores) */
        if (!s || !s->data || s == n || s->op == OB_OP_KV_STORE) continue;
        uint64_t lo = (uint64_t)(uintptr_t)s->data;
        /* a source written in place (the op table's: KV_STORE's cache, the recurrent state) */
        if (ob_op_writes_src(by, i % OB_MAX_SRC)) wr[nwr++] = (ob_vk_range){lo, lo + ob_nbytes(s), false};
        else rd[nrd++] = (ob_vk_range){lo, lo + ob_nbytes(s), false};
    }
    /* n's output, but not a KV_STORE's token (kv_store.comp never writes it); dead when
     * nothing reads it back: a rope's output when its store is fused in */
    uint64_t o = (uint64_t)(uintptr_t)n->data;
    if (n->op != OB_OP_KV_STORE) wr[nwr++] = (ob_vk_range){o, o + ob_nbytes(n), store != NULL};
    /* a norm or GLU that also writes the int8 x buffer */
    ob_vk_range q = ob_vk_q8_out(vk, n, add);
    if (q.hi > q.lo) wr[nwr++] = q;
    ob_vk_hz_own_clear(vk);
    ob_vk_hz(vk, rd, nrd, wr, nwr);
    memcpy(vk->hz_own_rd, rd, sizeof(rd[0]) * (size_t)nrd);
    memcpy(vk->hz_own_wr, wr, sizeof(wr[0]) * (size_t)nwr);
    vk->hz_nown_rd = nrd;
    vk->hz_nown_wr = nwr;
}

/* Do a (a later dispatch's) and b (an earlier one's, same level) need a barrier between? */
static bool audit_meet(const ob_vk_audit_range *a, const ob_vk_audit_range *b) {
    if (!(a->r.lo < b->r.hi && b->r.lo < a->r.hi)) return false;
    if (a->wr && b->wr) return !a->r.dead;
    return a->wr || b->wr;
}

ob_status ob_vk_hz_audit(ob_vk *vk, bool barrier, const char *shader, char *err, size_t err_len) {
    ob_vk_audit *a = &vk->audit;
    if (!vk->hz_audit) return OB_OK;
    if (a->failed) return ob_fail(err, err_len, OB_ERR_DEVICE, "%s", a->msg);
    int64_t first = 0; /* the first pending range */
    while (first < a->n && a->r[first].disp >= 0) first++;
    if (barrier) {
        memmove(a->r, a->r + first, sizeof(a->r[0]) * (size_t)(a->n - first));
        a->n -= first;
        first = 0;
    }
    for (int64_t i = first; i < a->n; i++)
        for (int64_t j = 0; j < first; j++)
            if (audit_meet(&a->r[i], &a->r[j])) {
                const ob_vk_audit_range *e = &a->r[j];
                snprintf(a->msg, sizeof(a->msg),
                         "vulkan: hazard audit: %s (node '%s', %s) %s bytes [%#llx, %#llx) that dispatch %lld %s, "
                         "with no barrier between",
                         shader, vk->mk_node ? vk->mk_node->name : "", vk->mk_node ? ob_op_name(vk->mk_node->op) : "-",
                         a->r[i].wr ? "writes" : "reads",
                         (unsigned long long)a->r[i].r.lo, (unsigned long long)a->r[i].r.hi, (long long)e->disp,
                         e->wr ? "wrote" : "read");
                a->failed = true;
                return ob_fail(err, err_len, OB_ERR_DEVICE, "%s", a->msg);
            }
    for (int64_t i = first; i < a->n; i++) a->r[i].disp = a->disp;
    a->disp++;
    return OB_OK;
}

void ob_vk_hz_audit_reset(ob_vk *vk) {
    vk->audit.n = 0;
    vk->audit.disp = 0;
    vk->audit.failed = false;
}

void ob_vk_hz_audit_free(ob_vk *vk) {
    free(vk->audit.r);
    memset(&vk->audit, 0, sizeof(vk->audit));
}
