#version 450
// ATTENTION for decode and small causal batches (T <= 8 tokens): one workgroup per (token
// t, kv head kh, group hg of GW of the G = H / n_kv query heads that share kh, split sp).
// attention.comp walks its cells one tile after another with a load chain per cell; here a
// chunk of C cells costs one round of loads: invocation (dc, cl) (dc = tid % NC, NC = hd / 8
// chunks of 8 elements; cl = tid / NC, one of NCL = WG / NC cell lanes) loads chunk dc of
// the key and the value of its CPI cells j = chunk start + i * NCL + cl (i < CPI) at once,
// before any arithmetic. The keys' partial dots meet in shared memory (one logit per
// (cell, head)); each cell lane keeps its own running max, sum and output dims (online
// softmax over its cells), and the lanes are merged at the end as splits are.
// GW (1, 2 or 4) is a specialization constant. With GW > 1 a key and value serve several
// heads, but every invocation carries GW heads' dots, sums and outputs: the per-invocation
// work, not the reads, set the time, so the default is 1 (bench/NOTES-vulkan-12-16.md:
// Session 12, heads per workgroup).
// a q F32 [hd, H, T], b K cache [hd * n_kv, cells], c V cache [sv * n_kv, cells] (both of
// TYPE: F32, F16 or Q8_0; c may be b itself, sv = hd, as MLA's), d pos I32 [T], e seq I32
// [T], o y F32 [dv * H, T]: kv head j's value is elements [j * sv, j * sv + dv) of a V row.
// u[0] hd | dv << 16 (hd a multiple of 8, 32..256, of 32 for Q8_0; dv <= hd a multiple of 8,
// of 32 for Q8_0), f[4] sv (its bits: a multiple of 8), u[1] H | n_kv << 16, u[2] T | CPI << 16 |
// GW << 24 (both repeated for the host's checks),
// u[3] | u[8] << 32 the int8 output (bit 3), u[4] cells per seq, u[5] window, u[6] bit 2:
// splits merged by the last (S > 1), bit 3 the int8 output, bits 8..15 splits S, bits 16..
// the chunk count under which split 0 walks all chunks alone (0: never),
// u[7] | floatBitsToUint(f[3]) << 32 the split scratch (TICKET_BYTES of tickets, one per
// (t, kh, hg), then the partials [m, l, acc[dv]] per (t, h, sp)), u[9] cache cells,
// u[10] workgroups; f[0] scale, f[1] soft-cap, f[2] ALiBi max bias; p the attention sinks F32
// [H] (0: none; attn.glsl's attn_inv), which join each head's softmax where its output is
// made (the lanes' merge, or the last split's).
// Only causal attention: cells lo .. p of the token's sequence (lo = p - window + 1).
#include "attn_dec.glsl"
