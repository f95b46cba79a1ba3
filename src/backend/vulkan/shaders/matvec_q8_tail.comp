#version 450
// matvec_q8.glsl with the tails (specialization constant TAIL).
#define MATVEC_TAILS
#include "matvec_q8.glsl"
