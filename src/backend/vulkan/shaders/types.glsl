// The type ids (ggml's, include/onebit.h's ob_type) and the IQ4_NL table
// (src/format/quant_small.c's ob_iq4nl_values), for dequant.glsl and kvq.glsl.
#ifndef OB_VK_TYPES_GLSL
#define OB_VK_TYPES_GLSL
const uint T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8,
           T_Q8_1 = 9, T_Q2_K = 10, T_Q3_K = 11, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14,
           T_Q8_K = 15, T_IQ4_NL = 20, T_IQ4_XS = 23, T_BF16 = 30, T_TQ1_0 = 34, T_TQ2_0 = 35,
           T_MXFP4 = 39, T_Q1_0 = 41, T_IQ2_XXS = 16, T_IQ2_XS = 17, T_IQ3_XXS = 18,
           T_IQ1_S = 19, T_IQ3_S = 21, T_IQ2_S = 22, T_IQ1_M = 29;

const int IQ4NL[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
#endif
