#version 450
// matvec_q8.glsl's prenorm pair (MATVEC_PN): the producer and the consumers of an RMS norm
// that is not dispatched. A module of its own, so the default one-token pipelines keep
// their code as it is.
#define MATVEC_PN
#extension GL_KHR_shader_subgroup_shuffle : require
#define Q8_SHUFFLE // the producer's blocks by 8 invocations each (the host needs shuffles)
#include "matvec_q8.glsl"
