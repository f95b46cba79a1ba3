#version 450
// moe_gate.glsl with double scores (GATE_F64): sigmoid + bias gating, as the CPU ranks it.
// A module only where the device has shaderFloat64.
#define GATE_F64
#include "moe_gate.glsl"
