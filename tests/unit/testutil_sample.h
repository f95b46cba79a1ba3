/* Shared by the SAMPLE op tests of the GPU backends (test_cuda_ops.c, test_vulkan_sample.c):
 * the inputs both draw, the check of a device's tokens against the CPU kernel, and the
 * golden greedy decode through ob_decode_sample. */
#ifndef OB_TESTUTIL_SAMPLE_H
#define OB_TESTUTIL_SAMPLE_H
#include "onebit.h"
#include "testutil.h"
#include <stdbool.h>

/* Temperature, top_k, top_p, min_p of each row, in turn. */
#define OB_TEST_SAMPLE_NCFG 12
extern const float ob_test_sample_cfg[OB_TEST_SAMPLE_NCFG][4];

/* R rows of n logits into lg (normals times 3, every other row rounded to integers: long
 * runs of ties at the maximum and at the top-k boundary, where the lowest ids must win;
 * row 1 two equal maxima, the later at the row's end) and their params into par
 * (OB_SAMPLE_NPARAM a row: the configs in turn, u drawn from rng, the last row's u just
 * under 1, every fifth row from the fourth a vocabulary smaller than the row with its best
 * logit just past it). With nan_row0, row 0 (greedy) also holds NaNs and a -0 / +0 pair as
 * its maximum. */
void ob_test_sample_inputs(int n, int R, bool nan_row0, ob_rng *rng, float *lg, float *par);
/* Device tokens got[R] against ob_cpu_sample_row: a failed check for each row that differs
 * (up to 8 printed); returns how many differ. */
int ob_test_sample_check(const float *lg, const float *par, int n, int R, const int32_t *got, const char *dev,
                         const char *what);
/* Constant rows: 4 rows of OB_TEST_SAMPLE_CONST_N logits of -1.5 (every id ties, so the
 * candidates are the k lowest ids) into lg, and params into par (4 rows): greedy; top-k 40
 * with u 0; top-k 40 and 1024 with u .999. The check wants ids 0, 0, 39 and 1022. */
#define OB_TEST_SAMPLE_CONST_N 32000
void ob_test_sample_constant(float *lg, float *par);
void ob_test_sample_constant_check(const int32_t *tk, const char *dev);
/* ob_decode_sample on device dev (named dev_name) over fixture arch: greedy tokens equal the
 * fixture's golden ones through reused steps, with no logits row coming back. */
void ob_test_sample_decode(const char *arch, ob_device_kind dev, const char *dev_name);
#endif
