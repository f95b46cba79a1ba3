#version 450
// SAMPLE: one workgroup per logits row, one I32 token out, with the CPU kernel's semantics
// (backend/cpu/op_sample.c, core/sample_pick.c: ob_sampler_sample's draw):
//   greedy (temperature <= 0): the first maximum (w[0] NaN: 0), by subgroup and workgroup
//   reductions of (value, lowest id);
//   otherwise the top k by (value desc, id asc): a 4-pass 8-bit radix select finds the k-th
//   key, one ordered pass collects the keys above it and the lowest ids equal to it, a
//   bitonic sort orders the <= 1024 candidates in shared memory; then min-p, temperature,
//   top-p and the draw with the row's u, in double and in the sampler's order (one
//   invocation adds; the exps are made by all first).
// a logits F32 [u[0], R], b params F32 [8, R] (ob_sample_param), o tokens I32 [R]; u[1] 1:
// rows start 16-byte aligned and u[0] % 4 == 0 (the greedy pass reads vec4s). Logits map to
// 32-bit keys that order as the floats do (-0 as +0, NaN lowest). The exp and log are ours,
// in double (f64.glsl: GLSL has none there): a term may differ from the C library's in its last
// bit, which moves a draw only where u * sum lands within ~1e-16 of a boundary.
// Specialization constant 6: the workgroup size (1024, or fewer where the device allows fewer
// or has subgroups under 16: at most OB_MAX_SG subgroups).
#include "common.glsl"
#include "f64.glsl"
layout(local_size_x_id = 6) in;
#define WG gl_WorkGroupSize.x
#define MAXK 1024 // OB_SAMPLE_MAX_K

layout(buffer_reference, std430, buffer_reference_align = 16) buffer BV4F { vec4 v[]; };

shared uvec2 cand[MAXK]; // (key, ~id): the larger ranks first; (0, 0) an empty slot
shared double ex[MAXK];
shared uint hist[256];
shared float s_v[OB_MAX_SG];
shared uint s_i[OB_MAX_SG];
shared uint s_sel, s_kr, s_gt, s_eq, s_m, s_done;

uint smp_key(float f) {
    if (isnan(f)) return 0u;
    if (f == 0.0) f = 0.0; // -0 ties +0, as comparison has it
    uint u = floatBitsToUint(f);
    return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}
bool rank_lt(uvec2 a, uvec2 b) { return a.x != b.x ? a.x < b.x : a.y < b.y; }
uint cand_id(uvec2 c) { return ~c.y; }

void main() {
    const uint row = group_id(), tid = gl_LocalInvocationID.x;
    if (row >= pc.u[10]) return; // uniform over the workgroup
    const uint rl = pc.u[0]; // the row's length; n: its candidates
    uint n = rl;
    BF32 w = BF32(pc.a + uint64_t(row) * rl * 4);
    BF32 p = BF32(pc.b + uint64_t(row) * 32);
    const float temp = p.v[0], kf = p.v[1], top_p = p.v[2], min_p = p.v[3], u0 = p.v[4], nv = p.v[5];
    if (nv >= 1.0 && nv < float(n)) n = uint(nv); // the sampler's vocabulary: a prefix of the row
    const uint nsg = gl_NumSubgroups, sg = gl_SubgroupID;

    if (temp <= 0.0) {
        // the first maximum: every invocation starts from w[0], so an equal later value never wins
        const float w0 = w.v[0];
        if (isnan(w0)) {
            if (tid == 0u) BI32(pc.o).v[row] = 0;
            return;
        }
        float bv = w0;
        uint bi = 0u, i0 = 0u;
        if (pc.u[1] != 0u) { // four vec4s an invocation in flight, each in id order
            BV4F v4 = BV4F(pc.a + uint64_t(row) * rl * 4);
            const uint nc = n / 4u;
            uint c = tid;
            for (; c + 3u * WG < nc; c += 4u * WG) {
                vec4 q[4] = {v4.v[c], v4.v[c + WG], v4.v[c + 2u * WG], v4.v[c + 3u * WG]};
                for (uint j = 0u; j < 4u; j++)
                    for (uint e = 0u; e < 4u; e++)
                        if (q[j][e] > bv) {
                            bv = q[j][e];
                            bi = 4u * (c + j * WG) + e;
                        }
            }
            for (; c < nc; c += WG) {
                const vec4 q = v4.v[c];
                for (uint e = 0u; e < 4u; e++)
                    if (q[e] > bv) {
                        bv = q[e];
                        bi = 4u * c + e;
                    }
            }
            i0 = 4u * nc;
        }
        for (uint i = i0 + tid; i < n; i += WG) {
            const float v = w.v[i];
            if (v > bv) {
                bv = v;
                bi = i;
            }
        }
        const float m = subgroupMax(bv);
        const uint mi = subgroupMin(bv == m ? bi : 0xffffffffu);
        if (subgroupElect()) {
            s_v[sg] = m;
            s_i[sg] = mi;
        }
        barrier();
        if (tid == 0u) {
            float best = s_v[0];
            uint id = s_i[0];
            for (uint k = 1u; k < nsg; k++)
                if (s_v[k] > best || (s_v[k] == best && s_i[k] < id)) {
                    best = s_v[k];
                    id = s_i[k];
                }
            BI32(pc.o).v[row] = int(id);
        }
        return;
    }

    const uint k = kf >= 1.0 ? (kf < float(MAXK) ? uint(kf) : MAXK) : 1u;
    const bool all = k >= n; // n <= MAXK: every id is a candidate
    uint m;
    if (all) {
        for (uint i = tid; i < MAXK; i += WG) cand[i] = i < n ? uvec2(smp_key(w.v[i]), ~i) : uvec2(0u);
        m = n;
    } else {
        // radix select of the k-th largest key, most significant byte first
        uint prefix = 0u, mask = 0u, kr = k;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (uint i = tid; i < 256u; i += WG) hist[i] = 0u;
            barrier();
            for (uint i = tid; i < n; i += WG) {
                const uint key = smp_key(w.v[i]);
                if ((key & mask) == prefix) atomicAdd(hist[(key >> shift) & 255u], 1u);
            }
            barrier();
            if (tid == 0u) {
                uint cum = 0u, b = 255u;
                for (;; b--) {
                    if (cum + hist[b] >= kr || b == 0u) break;
                    cum += hist[b];
                }
                s_sel = b;
                s_kr = kr - cum;
            }
            barrier();
            prefix |= s_sel << shift;
            mask |= 255u << shift;
            kr = s_kr;
            barrier(); // s_sel, s_kr and hist are written again by the next pass
        }
        // prefix is the k-th key; kr of the ids that hold it are wanted, the lowest
        const uint n_gt = k - kr;
        if (tid == 0u) {
            s_gt = 0u;
            s_eq = 0u;
        }
        barrier();
        for (uint base = 0u; base < n; base += WG) {
            const uint i = base + tid;
            const uint key = i < n ? smp_key(w.v[i]) : 0u;
            if (i < n && key > prefix) cand[atomicAdd(s_gt, 1u)] = uvec2(key, ~i);
            const bool eq = i < n && key == prefix;
            const uint r = subgroupExclusiveAdd(eq ? 1u : 0u), cnt = subgroupAdd(eq ? 1u : 0u);
            if (subgroupElect()) s_i[sg] = cnt;
            barrier();
            uint before = 0u, tot = 0u;
            for (uint j = 0u; j < nsg; j++) {
                before += j < sg ? s_i[j] : 0u;
                tot += s_i[j];
            }
            const uint taken = s_eq;
            if (eq && taken + before + r < kr) cand[n_gt + taken + before + r] = uvec2(key, ~i);
            barrier();
            if (tid == 0u) { // decided by one invocation: s_gt moves again in the next pass
                s_eq = taken + tot;
                s_done = s_gt == n_gt && s_eq >= kr ? 1u : 0u;
            }
            barrier();
            if (s_done != 0u) break; // uniform
        }
        for (uint i = k + tid; i < MAXK; i += WG) cand[i] = uvec2(0u);
        m = k;
    }
    barrier();
    // bitonic sort, descending, over the smallest power of two >= m
    uint P = 1u;
    while (P < m) P <<= 1;
    for (uint size = 2u; size <= P; size <<= 1)
        for (uint stride = size >> 1; stride > 0u; stride >>= 1) {
            for (uint t = tid; t < P / 2u; t += WG) {
                const uint i = 2u * stride * (t / stride) + t % stride, j = i + stride;
                const uvec2 a = cand[i], b = cand[j];
                if ((i & size) == 0u ? rank_lt(a, b) : rank_lt(b, a)) {
                    cand[i] = b;
                    cand[j] = a;
                }
            }
            barrier();
        }
    const float mx = w.v[cand_id(cand[0])];
    if (tid == 0u) {
        uint mm = m;
        const double lmp = min_p > 0.0 ? log_d(double(min_p)) * double(temp) : 0.0lf; // min-p's cut
        if (all) {
            // the sampler's top-k-off pre-filter (with its float slack), then its min-p
            float mx0 = w.v[0];
            for (uint i = 1u; i < n; i++)
                if (w.v[i] > mx0) mx0 = w.v[i];
            precise float lim = uintBitsToFloat(0xff800000u); // -inf
            if (min_p > 0.0) {
                precise float t = mx0 + float(lmp);
                lim = t - 1e-6;
            }
            mm = 0u;
            while (mm < m && w.v[cand_id(cand[mm])] >= lim) mm++;
        }
        if (mm > 0u && min_p > 0.0) {
            uint keep = 1u;
            while (keep < mm) {
                precise float d = w.v[cand_id(cand[keep])] - mx;
                if (double(d) < lmp) break;
                keep++;
            }
            mm = keep;
        }
        s_m = mm;
    }
    barrier();
    m = s_m;
    if (m == 0u) { // only NaN logits
        if (tid == 0u) BI32(pc.o).v[row] = 0;
        return;
    }
    for (uint i = tid; i < m; i += WG) {
        precise float d = w.v[cand_id(cand[i])] - mx;
        ex[i] = exp_d(double(d) / double(temp));
    }
    barrier();
    if (tid != 0u) return;
    double sum = 0.0lf;
    for (uint i = 0u; i < m; i++) sum += ex[i];
    if (top_p < 1.0) {
        double cum = 0.0lf;
        uint keep = 0u;
        while (keep < m) {
            cum += ex[keep] / sum;
            keep++;
            if (cum >= double(top_p)) break;
        }
        m = keep;
        sum = 0.0lf;
        for (uint i = 0u; i < m; i++) sum += ex[i];
    }
    const float u = u0 >= 0.0 && u0 < 1.0 ? u0 : 0.0;
    const double r = double(u) * sum;
    uint pick = cand_id(cand[m - 1u]);
    double acc = 0.0lf;
    for (uint i = 0u; i < m; i++) {
        acc += ex[i];
        if (r < acc) {
            pick = cand_id(cand[i]);
            break;
        }
    }
    BI32(pc.o).v[row] = int(pick);
}
