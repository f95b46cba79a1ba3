/* The groups of test_vulkan_ops kept in files of their own, called from its main in order
 * (each draws from g_rng, so the order fixes every input). */
#ifndef OB_VK_OPS_CASES_H
#define OB_VK_OPS_CASES_H

/* vk_ops_matmul.c */
void test_get_rows(void);
void test_matmul(void);
void test_matmul_paths(void);
void test_matvec_variants(void);
void test_matvec_q8(void);

/* vk_ops_det.c */
void test_det_matmul(void);
void test_det_attention(void);
void test_det_moe(void);
#endif
