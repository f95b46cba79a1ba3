#version 450
// moe_gate.glsl with float scores: softmax gating.
#include "moe_gate.glsl"
