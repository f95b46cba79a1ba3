// MOE_GATE (graph.h), with the CPU kernel's arithmetic (backend/cpu/op_moe.c): a
// workgroup per token. a router logits F32 [E, T], b the selection bias F32 [E] (0: none),
// o F32 [2k, T]: the k chosen experts' weights, then their ids as floats. u[0] E, u[1] k,
// u[2] ob_moe_gating (0 softmax, 1 sigmoid), u[3] bit 0: the weights divided by their sum
// (OB_MOE_NORM), u[4] 0 or group-limited routing (OB_MOE_GROUPS: n | used << 16, at most
// MAXG groups; moe_gate_f64.comp only); f[0] the scale.
//
// Selection, as the CPU's: pick j is the best expert ranked after pick j - 1 in (score
// descending, id ascending) order, NaN scores lowest. Each invocation keeps the best of its
// experts (tid + WG i) that qualify, and a tree over shared memory keeps the better of two
// (higher score, or equal and lower id): the answer is the one maximum of a total order, so
// the order of the reduction does not matter. Softmax ranks by the logit itself
// (moe_gate.comp, float). Sigmoid ranks by sigmoid(l) + bias in double as the CPU does
// (moe_gate_f64.comp, GATE_F64; the host sends it there only: a device without
// shaderFloat64 refuses the node). A float score would order large logits that the double
// sigmoid rounds to 1.0 (l > ~36.7: a tie, the lower id first) by logit instead; the exp
// here (f64.glsl) may differ from the C library's in its last bit, which can move a pick
// only between scores within that of each other, and the same logit and bias always tie.
//
// Group-limited routing (graph.h's OB_MOE_GROUPS, DeepSeek-V3; GATE_F64 only, for either
// gating): an invocation per group takes the sum of its two best selection scores (softmax:
// probabilities, exp(l - max) / sum in double, the sum by a tree in a fixed order), and a
// group is used when fewer than `used` groups rank before it (higher score, or equal and
// lower id): the CPU's choice of the `used` best, made in parallel. Every expert of another
// group then scores -inf, as op_moe.c's gate_mask_groups leaves them.
//
// The weights: the max logit and the softmax's denominator by workgroup reductions (a
// fixed order for any batch), then invocation 0 writes each pick's weight and id as it is
// made, sums the weights in pick order and normalises and scales them, as the CPU does.
#include "common.glsl"
#ifdef GATE_F64
#include "f64.glsl"
#define SCORE double
#else
#define SCORE float
#endif
#define WG 128
#define NONE 0xffffffffu
#define PER 4 // scores an invocation keeps in registers: those of experts tid + WG i, i < PER
layout(local_size_x = WG) in;

shared SCORE r_s[WG];
shared uint r_i[WG];

SCORE neg_inf() { return SCORE(uintBitsToFloat(0xff800000u)); }

#ifdef GATE_F64
#define MAXG 64 // groups (vk_moe.c refuses more)
shared double g_s[MAXG];
shared uint g_used[MAXG];
#endif

// The selection score of expert e of logit l (NaN: -inf, below every other).
SCORE score(uint e, float l) {
    if (isnan(l)) return neg_inf();
#ifdef GATE_F64
    if (pc.u[2] == 1u) {
        precise double s = 1.0lf / (1.0lf + exp_d(-double(l)));
        if (pc.b != 0ul) s += double(BF32(pc.b).v[e]);
        return isnan(s) ? neg_inf() : s;
    }
#endif
    return SCORE(l);
}

// Does (s, e) rank before (bs, bi)? NONE ranks after everything.
bool ranks_before(SCORE s, uint e, SCORE bs, uint bi) {
    return e != NONE && (bi == NONE || s > bs || (s == bs && e < bi));
}

#ifdef GATE_F64
// The sum of v over the workgroup, by a tree over r_s in a fixed order (every invocation).
double wg_sum_d(double v) {
    const uint tid = gl_LocalInvocationID.x;
    r_s[tid] = v;
    barrier();
    for (uint h = WG / 2; h > 0; h /= 2) {
        if (tid < h) r_s[tid] += r_s[tid + h];
        barrier();
    }
    const double s = r_s[0];
    barrier();
    return s;
}
// e^x, NaN for NaN (exp_d's range tests would not carry it)
double exp_dn(double x) { return isnan(x) ? x : exp_d(x); }

// Marks the used groups in g_used (every invocation; groups: u[4]). mx: the largest logit
// (softmax; NaN skipped).
void mask_groups(BF32 L, uint E, bool softmax, float mx) {
    const uint tid = gl_LocalInvocationID.x, ng = pc.u[4] & 0xffffu, nu = pc.u[4] >> 16, per = E / ng;
    double den = 0.0lf;
    if (softmax) { // as op_moe.c: the NaN logits left out
        for (uint e = tid; e < E; e += WG)
            if (!isnan(L.v[e])) den += exp_dn(double(L.v[e]) - double(mx));
        den = wg_sum_d(den);
    }
    for (uint gi = tid; gi < ng; gi += WG) {
        double b1 = neg_inf(), b2 = neg_inf();
        for (uint e = gi * per; e < (gi + 1) * per; e++) {
            double v = softmax ? exp_dn(double(L.v[e]) - double(mx)) / den : score(e, L.v[e]);
            if (isnan(v)) v = neg_inf();
            if (v > b1) {
                b2 = b1;
                b1 = v;
            } else if (v > b2) {
                b2 = v;
            }
        }
        const double gs = per > 1u ? b1 + b2 : b1;
        g_s[gi] = isnan(gs) ? neg_inf() : gs; // inf + -inf, from an infinite bias
    }
    barrier();
    for (uint gi = tid; gi < ng; gi += WG) {
        uint before = 0;
        for (uint o = 0; o < ng; o++) before += g_s[o] > g_s[gi] || (g_s[o] == g_s[gi] && o < gi) ? 1u : 0u;
        g_used[gi] = before < nu ? 1u : 0u;
    }
    barrier();
}
#endif

// The score expert e competes with: its selection score, or -inf outside the used groups.
SCORE sel(uint e, float l, uint per) {
#ifdef GATE_F64
    if (per != 0u && g_used[e / per] == 0u) return neg_inf();
#endif
    return score(e, l);
}

void main() {
    const uint t = group_id(), tid = gl_LocalInvocationID.x;
    if (t >= pc.u[10]) return; // uniform over the workgroup
    const uint E = pc.u[0], k = pc.u[1];
    const bool softmax = pc.u[2] == 0u;
    BF32 L = BF32(pc.a + uint64_t(t) * E * 4), Y = BF32(pc.o + uint64_t(t) * 2 * k * 4);

    float mx = uintBitsToFloat(0xff800000u), den = 0.0;
    if (softmax) { // the largest logit (NaN skipped, as `l > mx` skips it) and sum(e^(l - mx))
        for (uint e = tid; e < E; e += WG) mx = max(mx, isnan(L.v[e]) ? mx : L.v[e]);
        mx = wg_max(mx);
        for (uint e = tid; e < E; e += WG) den += exp(L.v[e] - mx);
        den = wg_sum(den);
    }
    uint per = 0; // experts a group (0: no groups)
#ifdef GATE_F64
    if (pc.u[4] != 0u) {
        mask_groups(L, E, softmax, mx);
        per = E / (pc.u[4] & 0xffffu);
    }
#endif

    SCORE mine[PER];
    for (uint i = 0; i < PER; i++) {
        const uint e = tid + WG * i;
        mine[i] = e < E ? sel(e, L.v[e], per) : neg_inf();
    }
    SCORE ps = neg_inf();
    uint pid = NONE;
    float wsum = 0.0;
    for (uint j = 0; j < k; j++) {
        SCORE bs = neg_inf();
        uint bi = NONE, i = 0;
        for (uint e = tid; e < E; e += WG, i++) { // ids ascending: a tie keeps the lower
            const SCORE s = i < PER ? mine[i] : sel(e, L.v[e], per);
            if (j > 0 && !(s < ps || (s == ps && e > pid))) continue; // ranked before pick j - 1
            if (bi == NONE || s > bs) {
                bs = s;
                bi = e;
            }
        }
        r_s[tid] = bs;
        r_i[tid] = bi;
        barrier();
        for (uint h = WG / 2; h > 0; h /= 2) {
            if (tid < h && ranks_before(r_s[tid + h], r_i[tid + h], r_s[tid], r_i[tid])) {
                r_s[tid] = r_s[tid + h];
                r_i[tid] = r_i[tid + h];
            }
            barrier();
        }
        ps = r_s[0];
        pid = r_i[0]; // never NONE: E >= k experts, one picked a pass
        barrier(); // r_s and r_i are written again next pass
        if (tid == 0) {
            const float l = L.v[pid], w = softmax ? exp(l - mx) / den : 1.0 / (1.0 + exp(-l));
            Y.v[j] = w;
            Y.v[k + j] = float(pid);
            wsum += w;
        }
    }
    if (tid == 0)
        for (uint j = 0; j < k; j++) {
            float w = Y.v[j];
            if ((pc.u[3] & 1u) != 0u) w /= wsum;
            Y.v[j] = w * pc.f[0];
        }
}
