#version 450
// attn_dec.comp with the nodes before a one-token decode attention folded in (ATTN_FOLD):
// the q and k RMS norms (optional) and ropes, and the K and V stores of the token. Each
// workgroup normalises and ropes its own query heads, and the token's key and value of its
// kv head, rounded as the cache stores them; it uses those for the token's cell, which the
// first head group's workgroup writes into the caches (no other workgroup reads it from
// there). One token, no ALiBi or soft-cap (vk_ops.c: ob_vk_attn_fold_ok).
// As attn_dec.comp, but a is the raw q F32 [hd, H], u[5] / u[9] the raw k / v (F32
// [hd * n_kv]) as byte offsets from a (int32), and f[1] | f[2] << 32 the parameter block
// (uint32 words, host: ob_vk_record_attn_fold): [0..1] the q norm weight, [2..3] the k
// norm weight (0: none), [4] bit 0 q normalised, bit 1 k normalised, [5] n_rot | rope mode
// << 16, [6] / [7] the q / k norm epsilon, [8] + [9] the rope ratio base^(-2/n_rot) as a
// float pair, [10] freq scale, [11] cache cells, [12] window, [13..14] the rope's frequency
// factors (0: none), [15] its mscale. Bit 4 of u[6]: the F32 output is not written (its
// one reader takes the int8 output). Specialization constant 8 (HD128,
// host: subgroups of whole 16-lane clusters with shuffles) builds the head_dim 128 path
// alone: a cell's 16 lanes sum its dot product by shuffles (no shared memory, no barrier
// in the chunk loop), and the int8 output takes 8 invocations a block.
#define ATTN_FOLD
#extension GL_KHR_shader_subgroup_shuffle : require
#define Q8_SHUFFLE // HD128's int8 output by 8 invocations a block (the host needs shuffles)
#include "attn_dec.glsl"
