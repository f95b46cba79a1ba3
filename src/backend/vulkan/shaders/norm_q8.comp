#version 450
// norm.comp with its int8 output (u[6]); see norm.glsl.
#define NORM_Q8
#include "norm.glsl"
