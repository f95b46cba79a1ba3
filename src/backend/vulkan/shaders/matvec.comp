#version 450
// matvec.glsl for MATMUL.
#include "matvec.glsl"
