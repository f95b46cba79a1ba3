#version 450
// matvec_q8.glsl without the tails.
#include "matvec_q8.glsl"
