#version 450
// Test-only (ONEBIT_TEST_FAULT, vk_fault.c): a dispatch that never finishes. Each
// invocation spins until the word at a is nonzero; the backend zeroes it and nothing
// writes it, so the fence times out. The loop counts its turns in the next word with an
// atomic, which no compiler may drop (glslc -O removed a loop of plain volatile reads).
// llvmpipe (lavapipe) ends every invocation's loops after 65535 turns in all (gallivm's
// loop limiter), about a millisecond: the backend dispatches 65535 x 65535 workgroups,
// weeks on a CPU device; on a GPU the first never ends.
#include "common.glsl"
layout(local_size_x = 1) in;
layout(buffer_reference, std430, buffer_reference_align = 4) coherent volatile buffer BFlag { uint v[]; };

void main() {
    BFlag f = BFlag(pc.a);
    while (f.v[0] == 0u) atomicAdd(f.v[1], 1u);
}
