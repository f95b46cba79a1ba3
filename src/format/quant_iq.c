/* Reference dequantize / quantize for the lattice ("IQ") types: IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M. Layouts are GGUF's (see quant.h); values are a per-block
 * f16 scale d times a small per-sub-block scale code times a point of a fixed lattice
 * (quant_iq_grids.h), with explicit signs (IQ2/IQ3) or an offset delta (IQ1).
 *
 * Dequantize evaluates in float in the same order as gguf.quants so it is bit-exact.
 *
 * Quantize is a plain search without an importance matrix: for every sub-block, try a
 * range of scales, give each group of 4 or 8 values its nearest lattice point, refit the
 * scale by least squares, keep the best; then try a few block scales d, round every
 * sub-block scale to its code and reassign the points for the rounded scale. The nearest
 * point is exact: per-coordinate rounding when that lands on the lattice, else exhaustive
 * search over all points (up to 2048). Minimises plain squared error; about 1-3 ms per
 * 256 values on one core. */
#include "format/quant.h"
#include "format/quant_iq_grids.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

/* Bit-exactness with gguf.quants needs separate multiplies and adds (see quant.c). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

_Static_assert(sizeof(ob_block_iq2_xxs) == 66, "iq2_xxs layout");
_Static_assert(sizeof(ob_block_iq2_xs) == 74, "iq2_xs layout");
_Static_assert(sizeof(ob_block_iq2_s) == 82, "iq2_s layout");
_Static_assert(sizeof(ob_block_iq3_xxs) == 98, "iq3_xxs layout");
_Static_assert(sizeof(ob_block_iq3_s) == 110, "iq3_s layout");
_Static_assert(sizeof(ob_block_iq1_s) == 50, "iq1_s layout");
_Static_assert(sizeof(ob_block_iq1_m) == 56, "iq1_m layout");

/* ---------------------------------------------------------------- dequantize */

static uint32_t rd_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint16_t rd_u16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* y[8] = db * grid * (+-1 from the sign bits). */
static void put8_signed(float *y, float db, const uint8_t *grid, uint8_t signs) {
    for (int j = 0; j < 8; j++) {
        float v = db * (float)grid[j];
        y[j] = (signs >> j) & 1 ? -v : v;
    }
}

void ob_dequant_row_iq2_xxs(const void *vx, float *y, int64_t n) {
    const ob_block_iq2_xxs *x = vx;
    for (int64_t i = 0; i < n / OB_QK_K; i++, y += OB_QK_K) {
        float d = ob_f16_to_f32(x[i].d);
        const uint8_t *qs = (const uint8_t *)x[i].qs;
        for (int ib = 0; ib < 8; ib++) {
            /* 8 bytes per 32 values: 4 grid indices, then 4x7 sign bits and a 4-bit scale */
            uint32_t aux = rd_u32(qs + 8 * ib + 4);
            float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++)
                put8_signed(y + 32 * ib + 8 * l, db, ob_iq2xxs_grid[qs[8 * ib + l]],
                            ob_iq_ksigns[(aux >> (7 * l)) & 127]);
        }
    }
}

void ob_dequant_row_iq2_xs(const void *vx, float *y, int64_t n) {
    const ob_block_iq2_xs *x = vx;
    for (int64_t i = 0; i < n / OB_QK_K; i++, y += OB_QK_K) {
        float d = ob_f16_to_f32(x[i].d);
        for (int g = 0; g < 32; g++) { /* one uint16 per 8 values: 9-bit index, 7 sign bits */
            int ls = (x[i].scales[g / 4] >> (4 * ((g / 2) & 1))) & 15;
            float db = d * (0.5f + (float)ls) * 0.25f;
            uint16_t q = x[i].qs[g];
            put8_signed(y + 8 * g, db, ob_iq2xs_grid[q & 511], ob_iq_ksigns[q >> 9]);
        }
    }
}

void ob_dequant_row_iq2_s(const void *vx, float *y, int64_t n) {
    const ob_block_iq2_s *x = vx;
    for (int64_t i = 0; i < n / OB_QK_K; i++, y += OB_QK_K) {
        float d = ob_f16_to_f32(x[i].d);
        for (int g = 0; g < 32; g++) { /* qs[0..31] low index bits, qs[32..63] sign bytes */
            int ls = (x[i].scales[g / 4] >> (4 * ((g / 2) & 1))) & 15;
            float db = d * (0.5f + (float)ls) * 0.25f;
            int idx = x[i].qs[g] | (((x[i].qh[g / 4] >> (2 * (g % 4))) & 3) << 8);
            put8_signed(y + 8 * g, db, ob_iq2s_grid[idx], x[i].qs[32 + g]);
        }
    }
}

void ob_dequant_row_iq3_xxs(const void *vx, float *y, int64_t n) {
    const ob_block_iq3_xxs *x = vx;
    for (int64_t i = 0; i < n / OB_QK_K; i++, y += OB_QK_K) {
        float d = ob_f16_to_f32(x[i].d);
        const uint8_t *qs = x[i].qs; /* [0..63] grid indices (4 values each), [64..95] 8x u32 */
        for (int ib = 0; ib < 8; ib++) {
            uint32_t aux = rd_u32(qs + 64 + 4 * ib);
            float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                uint8_t signs = ob_iq_ksigns[(aux >> (7 * l)) & 127];
                float *yy = y + 32 * ib + 8 * l;
                const uint8_t *g0 = ob_iq3xxs_grid[qs[8 * ib + 2 * l]];
                const uint8_t *g1 = ob_iq3xxs_grid[qs[8 * ib + 2 * l + 1]];
                for (int j = 0; j < 4; j++) {
                    float v0 = db * (float)g0[j], v1 = db * (float)g1[j];
                    yy[j] = (signs >> j) & 1 ? -v0 : v0;
                    yy[j + 4] = (signs >> (j + 4)) & 1 ? -v1 : v1;
                }
            }
        }
    }
}

void ob_dequant_row_iq3_s(const void *vx, float *y, int64_t n) {
    const ob_block_iq3_s *x = vx;
    for (int64_t i = 0; i < n / OB_QK_K; i++, y += OB_QK_K) {
        float d = ob_f16_to_f32(x[i].d);
        for (int g = 0; g < 64; g++) { /* groups of 4; one sign byte per 8 values */
            int ib = g / 8;
            float db = d * (float)(1 + 2 * ((x[i].scales[ib / 2] >> (4 * (ib & 1))) & 15));
            int idx = x[i].qs[g] | (((x[i].qh[g / 8] >> (g % 8)) & 1) << 8);
            uint8_t signs = x[i].signs[g / 2];
            int sh = 4 * (g & 1);
            for (int j = 0; j < 4; j++) {
                float v = db * (float)ob_iq3s_grid[idx][j];
                y[4 * g + j] = (signs >> (sh + j)) & 1 ? -v : v;
            }
        }
    }
}

/* y[8] = dl * (grid + delta), grid in {-1, 0, 1}. */
static void put8_delta(float *y, float dl, const int8_t *grid, float delta) {
    for (int j = 0; j < 8; j++) y[j] = dl * ((float)grid[j] + delta);
}

#define IQ1_DELTA 0.125f

void ob_dequant_row_iq1_s(const void *vx, float *y, int64_t n) {
    const ob_block_iq1_s *x = vx;
    for (int64_t i = 0; i < n / OB_QK_K; i++, y += OB_QK_K) {
        float d = ob_f16_to_f32(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            /* qh: 4x3 high index bits, 3-bit scale, delta sign in the top bit */
            uint16_t qh = x[i].qh[ib];
            float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            float delta = qh & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
            for (int l = 0; l < 4; l++) {
                int idx = x[i].qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
                put8_delta(y + 32 * ib + 8 * l, dl, ob_iq1s_grid[idx], delta);
            }
        }
    }
}

/* IQ1_M keeps its f16 block scale in the top nibbles of the four scale words. */
static uint16_t iq1m_get_d(const uint16_t sc[4]) {
    return (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

void ob_dequant_row_iq1_m(const void *vx, float *y, int64_t n) {
    const ob_block_iq1_m *x = vx;
    for (int64_t i = 0; i < n / OB_QK_K; i++, y += OB_QK_K) {
        uint16_t sc[4];
        for (int k = 0; k < 4; k++) sc[k] = rd_u16(x[i].scales + 2 * k);
        float d = ob_f16_to_f32(iq1m_get_d(sc));
        for (int g = 0; g < 32; g++) { /* one 3-bit scale per 16 values, one nibble of qh per 8 */
            int j = g / 2;
            float dl = d * (float)(2 * ((sc[j / 4] >> (3 * (j % 4))) & 7) + 1);
            int nib = (x[i].qh[g / 2] >> (4 * (g & 1))) & 15;
            float delta = nib & 8 ? -IQ1_DELTA : IQ1_DELTA;
            put8_delta(y + 8 * g, dl, ob_iq1s_grid[x[i].qs[g] | ((nib & 7) << 8)], delta);
        }
    }
}

/* ---------------------------------------------------------------- quantize */

#define IQ_MAX_POINTS 2048
#define IQ_NCAND 16 /* scales tried per sub-block (more gains nothing measurable) */
#define IQ_NTOP 4   /* block scales tried */

/* A lattice with per-point |g|^2 and sum(g), computed once per row. Points are either
 * unsigned magnitudes (u8) or ternary (i8). */
typedef struct {
    const uint8_t *u8;
    const int8_t *i8;
    int n, dim;
    float gmax;
    float pts[IQ_MAX_POINTS * 8]; /* the points as float, [n][dim] */
    float norm[IQ_MAX_POINTS];    /* |g|^2 */
    float sum[IQ_MAX_POINTS];     /* sum of coordinates */
    float qq[2][IQ_MAX_POINTS];   /* IQ1 only: |g + delta|^2 for delta = +1/8, -1/8 */
    /* Shortcut for the exhaustive search: the error is a sum over coordinates, so when
     * rounding every coordinate to its nearest level gives a lattice point, that point is
     * the nearest. map: level digits (base nlev) -> point index, or -1. */
    int nlev;
    float lev[8];
    int16_t map[6561];            /* 3^8 or 8^4 entries */
    /* Per-block scratch, set by the quantizer. */
    float *dots;                  /* [256 / dim][n]: <targets of group g, point k> */
    const float *tgt;             /* [256] the targets the dots were made from */
    bool exact_only[64];          /* group whose dots were adjusted: no shortcut */
} iq_lattice;

static float lat_at(const iq_lattice *L, int k, int j) { return L->pts[k * L->dim + j]; }

static int lat_level(const iq_lattice *L, float t) {
    int best = 0;
    for (int i = 1; i < L->nlev; i++)
        if (fabsf(t - L->lev[i]) < fabsf(t - L->lev[best])) best = i;
    return best;
}

/* The point whose coordinates are the nearest levels to (t - off) / s, or -1. */
static int lat_round(const iq_lattice *L, const float *t, float s, float off) {
    int code = 0;
    for (int j = L->dim - 1; j >= 0; j--) code = code * L->nlev + lat_level(L, t[j] / s - off);
    return L->map[code];
}

static void lat_init(iq_lattice *L, const uint8_t *u8, const int8_t *i8, int n, int dim) {
    L->u8 = u8; L->i8 = i8; L->n = n; L->dim = dim; L->gmax = 0; L->nlev = 0;
    for (int i = 0; i < n * dim; i++) L->pts[i] = u8 ? (float)u8[i] : (float)i8[i];
    for (int k = 0; k < n; k++) {
        float s2 = 0, s1 = 0;
        for (int j = 0; j < dim; j++) {
            float g = lat_at(L, k, j);
            s2 += g * g; s1 += g;
            if (g > L->gmax) L->gmax = g;
        }
        L->norm[k] = s2; L->sum[k] = s1;
        for (int j = 0; j < dim; j++) { /* collect the distinct levels, kept sorted */
            float g = lat_at(L, k, j);
            int i = 0;
            while (i < L->nlev && L->lev[i] < g) i++;
            if (i < L->nlev && L->lev[i] == g) continue;
            OB_ASSERT(L->nlev < 8);
            memmove(L->lev + i + 1, L->lev + i, sizeof(float) * (size_t)(L->nlev - i));
            L->lev[i] = g;
            L->nlev++;
        }
        for (int m = 0; m < 2; m++) {
            float dl = m ? -IQ1_DELTA : IQ1_DELTA;
            L->qq[m][k] = s2 + 2.0f * dl * s1 + (float)dim * dl * dl;
        }
    }
    int ncodes = 1;
    for (int j = 0; j < dim; j++) ncodes *= L->nlev;
    OB_ASSERT(ncodes <= (int)OB_ARRAY_LEN(L->map));
    for (int c = 0; c < ncodes; c++) L->map[c] = -1;
    for (int k = 0; k < n; k++) {
        int code = 0;
        for (int j = dim - 1; j >= 0; j--) code = code * L->nlev + lat_level(L, lat_at(L, k, j));
        L->map[code] = (int16_t)k;
    }
    memset(L->exact_only, 0, sizeof(L->exact_only));
}

/* dots[k] = <a, point k> for one group of dim values. */
static void lat_dots(const iq_lattice *L, const float *a, float *dots) {
    const float *p = L->pts;
    if (L->dim == 8) {
        for (int k = 0; k < L->n; k++, p += 8)
            dots[k] = a[0] * p[0] + a[1] * p[1] + a[2] * p[2] + a[3] * p[3] +
                      a[4] * p[4] + a[5] * p[5] + a[6] * p[6] + a[7] * p[7];
    } else {
        for (int k = 0; k < L->n; k++, p += 4) dots[k] = a[0] * p[0] + a[1] * p[1] + a[2] * p[2] + a[3] * p[3];
    }
}

/* Nearest point to a/s for a group, given its dots: argmin s^2|g|^2 - 2s<a,g>. */
static int lat_pick(const iq_lattice *L, int g, float s) {
    const float *dots = L->dots + (size_t)g * L->n;
    if (!L->exact_only[g]) {
        int k = lat_round(L, L->tgt + g * L->dim, s, 0.0f);
        if (k >= 0) return k;
    }
    int best = 0;
    float be = FLT_MAX;
    for (int k = 0; k < L->n; k++) {
        float e = s * L->norm[k] - 2.0f * dots[k];
        if (e < be) { be = e; best = k; }
    }
    return best;
}

/* Nearest scale code, clamped; NaN (from inf/NaN input) gives 0. */
static int code_near(float c, int code_max) {
    if (!(c > 0)) return 0;
    return c >= (float)code_max ? code_max : (int)lrintf(c);
}

/* How a sign-magnitude type (IQ2_*, IQ3_*) is laid out, for the shared search. */
typedef struct {
    int sub;          /* values per scale code: 16 or 32 */
    bool parity;      /* signs stored as 7 bits + even parity (ksigns) */
    float s0, s1;     /* sub-block scale = d * (s0 + s1 * code) */
    int code_max;     /* codes are 0..code_max */
} iq_signed_spec;

/* The result of quantizing one super-block of a sign-magnitude type. */
typedef struct {
    uint16_t d;            /* f16 */
    uint8_t code[16];      /* per sub-block scale code */
    uint16_t idx[64];      /* per group lattice index */
    uint8_t signs[32];     /* per 8 values, bit j set = value j negative (even parity if spec.parity) */
} iq_signed_block;

/* Sum over a sub-block's groups of the squared error (up to a constant) at scale s,
 * writing the chosen indices. */
static float sub_assign(const iq_lattice *L, int g0, int ngroups, float s, uint16_t *idx) {
    float e = 0;
    for (int g = 0; g < ngroups; g++) {
        const float *dg = L->dots + (size_t)(g0 + g) * L->n;
        int k = lat_pick(L, g0 + g, s);
        idx[g] = (uint16_t)k;
        e += s * s * L->norm[k] - 2.0f * s * dg[k];
    }
    return e;
}

/* Best real scale for the sub-block of groups g0.. whose largest target is amax. */
static float sub_search_scale(const iq_lattice *L, int g0, int ngroups, float amax) {
    if (amax <= 0) return 0;
    float best_s = 0, best_e = 0; /* e = 0 is what scale 0 gives */
    for (int c = 0; c < IQ_NCAND; c++) {
        /* the largest target lands between 0.35 and 1.25 of the largest lattice value */
        float f = 0.35f + 0.9f * (float)c / (IQ_NCAND - 1);
        float s = amax / (L->gmax * f);
        float sag = 0, sgg = 0;
        for (int g = 0; g < ngroups; g++) {
            const float *dg = L->dots + (size_t)(g0 + g) * L->n;
            int k = lat_pick(L, g0 + g, s);
            sag += dg[k]; sgg += L->norm[k];
        }
        if (sag <= 0 || sgg <= 0) continue;
        float e = -sag * sag / sgg; /* error at the least-squares scale sag/sgg */
        if (e < best_e) { best_e = e; best_s = sag / sgg; }
    }
    return best_s;
}

/* Error (up to a constant) of the whole block for block scale d: every sub-block takes
 * the best of the codes next to its ideal scale. Fills codes and indices. */
static float signed_block_at(const iq_lattice *L, const iq_signed_spec *sp, const float *sub_s,
                             float d, uint8_t *code, uint16_t *idx) {
    const int gps = sp->sub / L->dim, nsub = OB_QK_K / sp->sub;
    float total = 0;
    for (int ib = 0; ib < nsub; ib++) {
        int c0 = code_near((sub_s[ib] / d - sp->s0) / sp->s1, sp->code_max);
        float best_e = FLT_MAX;
        uint16_t tmp[8];
        for (int c = OB_MAX(c0 - 1, 0); c <= OB_MIN(c0 + 1, sp->code_max); c++) {
            float e = sub_assign(L, ib * gps, gps, d * (sp->s0 + sp->s1 * (float)c), tmp);
            if (e < best_e) {
                best_e = e;
                code[ib] = (uint8_t)c;
                memcpy(idx + ib * gps, tmp, sizeof(uint16_t) * (size_t)gps);
            }
        }
        total += best_e;
    }
    return total;
}

/* min over j of a_j * g_kj for an 8-value group: the cheapest value to give the wrong sign. */
static float flip_cost(const iq_lattice *L, const float *a, int k, int *jmin) {
    float best = FLT_MAX;
    for (int j = 0; j < 8; j++) {
        float c = a[j] * lat_at(L, k, j);
        if (c < best) { best = c; if (jmin) *jmin = j; }
    }
    return best;
}

static void quant_signed_block(iq_lattice *L, const iq_signed_spec *sp, const float *x,
                               iq_signed_block *out) {
    const int dim = L->dim, gps = sp->sub / dim, nsub = OB_QK_K / sp->sub;
    float a[OB_QK_K];
    float sub_s[16];
    bool odd[32];

    for (int k = 0; k < OB_QK_K / 8; k++) {
        const float *xx = x + 8 * k;
        uint8_t s = 0;
        int jmin = 0;
        for (int j = 0; j < 8; j++) {
            if (xx[j] < 0) s |= (uint8_t)(1u << j);
            if (fabsf(xx[j]) < fabsf(xx[jmin])) jmin = j;
        }
        /* With an odd number of minus signs the 8th bit cannot be stored: one value
         * gets the wrong sign. When a sign group is one lattice group (dim 8) the choice
         * is made jointly with the point below; otherwise flip the smallest value. */
        odd[k] = sp->parity && (__builtin_popcount(s) & 1);
        if (odd[k] && dim != 8) s ^= (uint8_t)(1u << jmin);
        out->signs[k] = s;
        for (int j = 0; j < 8; j++) a[8 * k + j] = (s >> j) & 1 ? -xx[j] : xx[j];
    }
    L->tgt = a;
    for (int g = 0; g < OB_QK_K / dim; g++) {
        float *dg = L->dots + (size_t)g * L->n;
        lat_dots(L, a + g * dim, dg);
        L->exact_only[g] = dim == 8 && odd[g];
        if (L->exact_only[g]) /* flipping value j of point k lowers <a,g_k> by 2 a_j g_kj */
            for (int k = 0; k < L->n; k++) dg[k] -= 2.0f * flip_cost(L, a + 8 * g, k, NULL);
    }

    float smax = 0;
    for (int ib = 0; ib < nsub; ib++) {
        const float *ab = a + ib * sp->sub;
        float amax = 0;
        for (int j = 0; j < sp->sub; j++) amax = fmaxf(amax, ab[j]);
        sub_s[ib] = sub_search_scale(L, ib * gps, gps, amax);
        smax = fmaxf(smax, sub_s[ib]);
    }

    memset(out->code, 0, sizeof(out->code));
    memset(out->idx, 0, sizeof(out->idx));
    out->d = 0;
    if (smax <= 0) return;
    /* Mapping the largest sub-block scale to the top code wastes codes when one
     * sub-block is an outlier; also try lowering the top. */
    float best = FLT_MAX;
    for (int t = 0; t < IQ_NTOP; t++) {
        uint16_t dh = ob_f32_to_f16(smax / (sp->s0 + sp->s1 * ((float)sp->code_max - 0.5f * (float)t)));
        float d = ob_f16_to_f32(dh);
        if (!(d > 0)) continue;
        iq_signed_block cand;
        float e = signed_block_at(L, sp, sub_s, d, cand.code, cand.idx);
        if (e < best) {
            best = e;
            out->d = dh;
            memcpy(out->code, cand.code, sizeof(out->code));
            memcpy(out->idx, cand.idx, sizeof(out->idx));
        }
    }
    if (dim == 8)
        for (int g = 0; g < 32; g++) {
            int j = 0;
            if (!odd[g]) continue;
            flip_cost(L, a + 8 * g, out->idx[g], &j);
            out->signs[g] ^= (uint8_t)(1u << j);
        }
}

/* The lattice and its scratch are large (~110 KiB + up to 256 KiB): heap, once per row. */
static iq_lattice *lat_new(const uint8_t *u8, const int8_t *i8, int n, int dim) {
    iq_lattice *L = malloc(sizeof(*L));
    if (!L) return NULL;
    L->dots = malloc(sizeof(float) * (size_t)(OB_QK_K / dim) * (size_t)n);
    if (!L->dots) { free(L); return NULL; }
    lat_init(L, u8, i8, n, dim);
    return L;
}

static void lat_free(iq_lattice *L) {
    if (L) free(L->dots);
    free(L);
}

static const iq_signed_spec SPEC_IQ2_XXS = { 32, true, 0.125f, 0.25f, 15 };
static const iq_signed_spec SPEC_IQ2_XS = { 16, true, 0.125f, 0.25f, 15 };
static const iq_signed_spec SPEC_IQ2_S = { 16, false, 0.125f, 0.25f, 15 };
static const iq_signed_spec SPEC_IQ3_XXS = { 32, true, 0.25f, 0.5f, 15 };
static const iq_signed_spec SPEC_IQ3_S = { 32, false, 1.0f, 2.0f, 15 };

size_t ob_quant_row_iq2_xxs(const float *x, void *vy, int64_t n) {
    iq_lattice *L = lat_new(&ob_iq2xxs_grid[0][0], NULL, 256, 8);
    if (!L) return 0;
    ob_block_iq2_xxs *y = vy;
    int64_t nb = n / OB_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        iq_signed_block q;
        quant_signed_block(L, &SPEC_IQ2_XXS, x + i * OB_QK_K, &q);
        uint8_t *qs = (uint8_t *)y[i].qs;
        y[i].d = q.d;
        for (int ib = 0; ib < 8; ib++) {
            uint32_t aux = (uint32_t)q.code[ib] << 28;
            for (int l = 0; l < 4; l++) {
                qs[8 * ib + l] = (uint8_t)q.idx[4 * ib + l];
                aux |= (uint32_t)(q.signs[4 * ib + l] & 127) << (7 * l);
            }
            memcpy(qs + 8 * ib + 4, &aux, 4);
        }
    }
    lat_free(L);
    return (size_t)nb * sizeof(ob_block_iq2_xxs);
}

size_t ob_quant_row_iq2_xs(const float *x, void *vy, int64_t n) {
    iq_lattice *L = lat_new(&ob_iq2xs_grid[0][0], NULL, 512, 8);
    if (!L) return 0;
    ob_block_iq2_xs *y = vy;
    int64_t nb = n / OB_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        iq_signed_block q;
        quant_signed_block(L, &SPEC_IQ2_XS, x + i * OB_QK_K, &q);
        y[i].d = q.d;
        for (int g = 0; g < 32; g++) y[i].qs[g] = (uint16_t)(q.idx[g] | ((q.signs[g] & 127) << 9));
        for (int k = 0; k < 8; k++) y[i].scales[k] = (uint8_t)(q.code[2 * k] | (q.code[2 * k + 1] << 4));
    }
    lat_free(L);
    return (size_t)nb * sizeof(ob_block_iq2_xs);
}

size_t ob_quant_row_iq2_s(const float *x, void *vy, int64_t n) {
    iq_lattice *L = lat_new(&ob_iq2s_grid[0][0], NULL, 1024, 8);
    if (!L) return 0;
    ob_block_iq2_s *y = vy;
    int64_t nb = n / OB_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        iq_signed_block q;
        quant_signed_block(L, &SPEC_IQ2_S, x + i * OB_QK_K, &q);
        y[i].d = q.d;
        memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int g = 0; g < 32; g++) {
            y[i].qs[g] = (uint8_t)q.idx[g];
            y[i].qs[32 + g] = q.signs[g];
            y[i].qh[g / 4] |= (uint8_t)((q.idx[g] >> 8) << (2 * (g % 4)));
        }
        for (int k = 0; k < 8; k++) y[i].scales[k] = (uint8_t)(q.code[2 * k] | (q.code[2 * k + 1] << 4));
    }
    lat_free(L);
    return (size_t)nb * sizeof(ob_block_iq2_s);
}

size_t ob_quant_row_iq3_xxs(const float *x, void *vy, int64_t n) {
    iq_lattice *L = lat_new(&ob_iq3xxs_grid[0][0], NULL, 256, 4);
    if (!L) return 0;
    ob_block_iq3_xxs *y = vy;
    int64_t nb = n / OB_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        iq_signed_block q;
        quant_signed_block(L, &SPEC_IQ3_XXS, x + i * OB_QK_K, &q);
        y[i].d = q.d;
        for (int g = 0; g < 64; g++) y[i].qs[g] = (uint8_t)q.idx[g];
        for (int ib = 0; ib < 8; ib++) {
            uint32_t aux = (uint32_t)q.code[ib] << 28;
            for (int l = 0; l < 4; l++) aux |= (uint32_t)(q.signs[4 * ib + l] & 127) << (7 * l);
            memcpy(y[i].qs + 64 + 4 * ib, &aux, 4);
        }
    }
    lat_free(L);
    return (size_t)nb * sizeof(ob_block_iq3_xxs);
}

size_t ob_quant_row_iq3_s(const float *x, void *vy, int64_t n) {
    iq_lattice *L = lat_new(&ob_iq3s_grid[0][0], NULL, 512, 4);
    if (!L) return 0;
    ob_block_iq3_s *y = vy;
    int64_t nb = n / OB_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        iq_signed_block q;
        quant_signed_block(L, &SPEC_IQ3_S, x + i * OB_QK_K, &q);
        y[i].d = q.d;
        memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int g = 0; g < 64; g++) {
            y[i].qs[g] = (uint8_t)q.idx[g];
            y[i].qh[g / 8] |= (uint8_t)((q.idx[g] >> 8) << (g % 8));
        }
        memcpy(y[i].signs, q.signs, 32);
        for (int k = 0; k < 4; k++) y[i].scales[k] = (uint8_t)(q.code[2 * k] | (q.code[2 * k + 1] << 4));
    }
    lat_free(L);
    return (size_t)nb * sizeof(ob_block_iq3_s);
}

/* IQ1: values are s * (g + delta), g a ternary lattice point, delta = +-1/8 chosen per
 * sub-block of 32 (IQ1_S) or per group of 8 (IQ1_M); s = d * (2 * code + 1), code 0..7. */
typedef struct {
    int sub;           /* values per scale code: 32 (IQ1_S) or 16 (IQ1_M) */
    bool delta_group;  /* delta chosen per group of 8, else one per sub-block */
} iq1_spec;

typedef struct {
    uint16_t d;
    uint8_t code[16];
    uint16_t idx[32];
    bool dneg[32];     /* delta is -1/8 for this group */
} iq1_block;

/* Best point for a group at scale s > 0; dmask: bit 0 allows delta +1/8, bit 1 -1/8.
 * Returns the squared error up to sum x^2: s^2 |g + dl|^2 - 2 s <x, g + dl>, computed
 * from dots[k] = <x, g_k> and sx = sum x as s (s |g + dl|^2 - 2 <x, g>) - 2 s dl sx. */
static float iq1_pick(const iq_lattice *L, int g, float sx, float s, int dmask,
                      uint16_t *idx, bool *dneg) {
    const float *dots = L->dots + (size_t)g * L->n;
    float be = FLT_MAX;
    for (int m = 0; m < 2; m++) {
        if (!(dmask & (1 << m))) continue;
        const float *qq = L->qq[m];
        float dl = m ? -IQ1_DELTA : IQ1_DELTA;
        int km = lat_round(L, L->tgt + 8 * g, s, dl);
        float bm;
        if (km >= 0) {
            bm = s * qq[km] - 2.0f * dots[km];
        } else {
            bm = FLT_MAX;
            km = 0;
            for (int k = 0; k < L->n; k++) {
                float e = s * qq[k] - 2.0f * dots[k];
                if (e < bm) { bm = e; km = k; }
            }
        }
        float e = s * bm - 2.0f * s * dl * sx;
        if (e < be) { be = e; *idx = (uint16_t)km; *dneg = m; }
    }
    return be;
}

/* Total error of a sub-block at scale s with the best delta choice; fills idx/dneg. */
static float iq1_assign(const iq_lattice *L, const iq1_spec *sp, int g0, const float *sx,
                        float s, uint16_t *idx, bool *dneg) {
    const int gps = sp->sub / 8;
    float best = FLT_MAX;
    for (int m = 0; m < (sp->delta_group ? 1 : 2); m++) {
        int dmask = sp->delta_group ? 3 : 1 << m;
        uint16_t ti[4];
        bool tn[4];
        float e = 0;
        for (int g = 0; g < gps; g++)
            e += iq1_pick(L, g0 + g, sx[g], s, dmask, &ti[g], &tn[g]);
        if (e < best) {
            best = e;
            memcpy(idx, ti, sizeof(uint16_t) * (size_t)gps);
            memcpy(dneg, tn, sizeof(bool) * (size_t)gps);
        }
    }
    return best;
}

static void quant_iq1_block(iq_lattice *L, const iq1_spec *sp, const float *x, iq1_block *out) {
    const int gps = sp->sub / 8, nsub = OB_QK_K / sp->sub;
    float sx[32], sub_s[16];
    uint16_t ti[4];
    bool tn[4];

    L->tgt = x;
    for (int g = 0; g < 32; g++) {
        sx[g] = 0;
        for (int j = 0; j < 8; j++) sx[g] += x[8 * g + j];
        lat_dots(L, x + 8 * g, L->dots + (size_t)g * L->n);
    }
    float smax = 0;
    for (int ib = 0; ib < nsub; ib++) {
        const float *xb = x + ib * sp->sub;
        float amax = 0;
        for (int j = 0; j < sp->sub; j++) amax = fmaxf(amax, fabsf(xb[j]));
        sub_s[ib] = 0;
        if (amax <= 0) continue;
        const float *dots = L->dots + (size_t)ib * gps * L->n;
        float best_e = 0;
        for (int c = 0; c < IQ_NCAND; c++) {
            /* the largest |x| lands between 0.5 and 3 steps of the ternary lattice */
            float s = amax / (0.5f + 2.5f * (float)c / (IQ_NCAND - 1));
            iq1_assign(L, sp, ib * gps, sx + ib * gps, s, ti, tn);
            float sxq = 0, sqq = 0;
            for (int g = 0; g < gps; g++) {
                float dl = tn[g] ? -IQ1_DELTA : IQ1_DELTA;
                sxq += dots[(size_t)g * L->n + ti[g]] + dl * sx[ib * gps + g];
                sqq += L->qq[tn[g]][ti[g]];
            }
            if (sxq <= 0 || sqq <= 0) continue;
            float e = -sxq * sxq / sqq;
            if (e < best_e) { best_e = e; sub_s[ib] = sxq / sqq; }
        }
        smax = fmaxf(smax, sub_s[ib]);
    }

    out->d = ob_f32_to_f16(smax / 15.0f);
    float d = ob_f16_to_f32(out->d);
    for (int ib = 0; ib < nsub; ib++) {
        out->code[ib] = 0;
        if (d <= 0) {
            for (int g = 0; g < gps; g++) { out->idx[ib * gps + g] = 0; out->dneg[ib * gps + g] = false; }
            continue;
        }
        int c0 = code_near((sub_s[ib] / d - 1.0f) * 0.5f, 7);
        float best_e = FLT_MAX;
        for (int c = OB_MAX(c0 - 1, 0); c <= OB_MIN(c0 + 1, 7); c++) {
            float e = iq1_assign(L, sp, ib * gps, sx + ib * gps, d * (float)(2 * c + 1), ti, tn);
            if (e < best_e) {
                best_e = e;
                out->code[ib] = (uint8_t)c;
                memcpy(out->idx + ib * gps, ti, sizeof(uint16_t) * (size_t)gps);
                memcpy(out->dneg + ib * gps, tn, sizeof(bool) * (size_t)gps);
            }
        }
    }
}

static const iq1_spec SPEC_IQ1_S = { 32, false };
static const iq1_spec SPEC_IQ1_M = { 16, true };

size_t ob_quant_row_iq1_s(const float *x, void *vy, int64_t n) {
    iq_lattice *L = lat_new(NULL, &ob_iq1s_grid[0][0], 2048, 8);
    if (!L) return 0;
    ob_block_iq1_s *y = vy;
    int64_t nb = n / OB_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        iq1_block q;
        quant_iq1_block(L, &SPEC_IQ1_S, x + i * OB_QK_K, &q);
        y[i].d = q.d;
        for (int ib = 0; ib < 8; ib++) {
            uint16_t qh = (uint16_t)(q.code[ib] << 12);
            if (q.dneg[4 * ib]) qh |= 0x8000;
            for (int l = 0; l < 4; l++) {
                y[i].qs[4 * ib + l] = (uint8_t)q.idx[4 * ib + l];
                qh |= (uint16_t)((q.idx[4 * ib + l] >> 8) << (3 * l));
            }
            y[i].qh[ib] = qh;
        }
    }
    lat_free(L);
    return (size_t)nb * sizeof(ob_block_iq1_s);
}

size_t ob_quant_row_iq1_m(const float *x, void *vy, int64_t n) {
    iq_lattice *L = lat_new(NULL, &ob_iq1s_grid[0][0], 2048, 8);
    if (!L) return 0;
    ob_block_iq1_m *y = vy;
    int64_t nb = n / OB_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        iq1_block q;
        quant_iq1_block(L, &SPEC_IQ1_M, x + i * OB_QK_K, &q);
        memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int g = 0; g < 32; g++) {
            y[i].qs[g] = (uint8_t)q.idx[g];
            int nib = (q.idx[g] >> 8) | (q.dneg[g] ? 8 : 0);
            y[i].qh[g / 2] |= (uint8_t)(nib << (4 * (g & 1)));
        }
        uint16_t sc[4] = { 0, 0, 0, 0 };
        for (int j = 0; j < 16; j++) sc[j / 4] |= (uint16_t)(q.code[j] << (3 * (j % 4)));
        for (int k = 0; k < 4; k++) sc[k] |= (uint16_t)(((q.d >> (4 * k)) & 15) << 12);
        memcpy(y[i].scales, sc, sizeof(sc));
    }
    lat_free(L);
    return (size_t)nb * sizeof(ob_block_iq1_m);
}
