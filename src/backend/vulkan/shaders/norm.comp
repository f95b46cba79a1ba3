#version 450
#include "norm.glsl"
