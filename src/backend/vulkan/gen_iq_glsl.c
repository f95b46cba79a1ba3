/* Build-time generator (a host tool, not part of the library): writes the IQ lattice
 * tables of src/format/quant_iq_grids.h as GLSL constant arrays, so the shaders decode
 * with exactly the data the CPU reference uses and nobody copies tables by hand.
 *
 *   gen_iq_glsl OUT.glsl
 *
 * Packing (what shaders/dequant.glsl unpacks):
 *   IQ2 grids  8 magnitudes of one point -> 2 uints, byte j of the pair is coordinate j
 *   IQ3 grids  4 magnitudes -> 1 uint
 *   IQ1 grid   8 ternary coordinates (-1, 0, 1) as 2-bit codes (value + 1) -> 16 bits,
 *              two points per uint (even point in the low half)
 * The sign table ob_iq_ksigns is not emitted: entry i is i plus a parity bit, which the
 * shader computes; this tool checks that rule on the header's table and fails otherwise. */
#include "format/quant_iq_grids.h"

#include <stdio.h>
#include <stdlib.h>

static int emit_u8x8(FILE *f, const char *name, const uint8_t (*g)[8], int n) {
    fprintf(f, "const uint %s[%d] = uint[%d](", name, 2 * n, 2 * n);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < 2; h++) {
            const uint8_t *p = g[i] + 4 * h;
            unsigned v = p[0] | (unsigned)p[1] << 8 | (unsigned)p[2] << 16 | (unsigned)p[3] << 24;
            fprintf(f, "%s%s0x%08xu", i || h ? "," : "", (2 * i + h) % 8 ? "" : "\n    ", v);
        }
    return fprintf(f, ");\n") < 0;
}

static int emit_u8x4(FILE *f, const char *name, const uint8_t (*g)[4], int n) {
    fprintf(f, "const uint %s[%d] = uint[%d](", name, n, n);
    for (int i = 0; i < n; i++) {
        unsigned v = g[i][0] | (unsigned)g[i][1] << 8 | (unsigned)g[i][2] << 16 | (unsigned)g[i][3] << 24;
        fprintf(f, "%s%s0x%08xu", i ? "," : "", i % 8 ? "" : "\n    ", v);
    }
    return fprintf(f, ");\n") < 0;
}

static int emit_ternary(FILE *f, const char *name, const int8_t (*g)[8], int n) {
    fprintf(f, "const uint %s[%d] = uint[%d](", name, n / 2, n / 2);
    for (int i = 0; i < n; i += 2) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 8; j++) {
                int c = g[i + k][j];
                if (c < -1 || c > 1) {
                    fprintf(stderr, "gen_iq_glsl: %s[%d][%d] = %d is not ternary\n", name, i + k, j, c);
                    return 1;
                }
                v |= (unsigned)(c + 1) << (16 * k + 2 * j);
            }
        fprintf(f, "%s%s0x%08xu", i ? "," : "", (i / 2) % 8 ? "" : "\n    ", v);
    }
    return fprintf(f, ");\n") < 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gen_iq_glsl OUT.glsl\n");
        return 2;
    }
    for (int i = 0; i < 128; i++) {
        int parity = __builtin_popcount((unsigned)i) & 1;
        if (ob_iq_ksigns[i] != (i | parity << 7)) {
            fprintf(stderr, "gen_iq_glsl: ob_iq_ksigns[%d] = %d breaks the parity rule the shaders use\n", i,
                    ob_iq_ksigns[i]);
            return 1;
        }
    }
    FILE *f = fopen(argv[1], "w");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    int bad = fprintf(f, "// GENERATED at build time by src/backend/vulkan/gen_iq_glsl.c from\n"
                         "// src/format/quant_iq_grids.h; do not edit. Packing: see the generator.\n") < 0;
    bad |= emit_u8x8(f, "IQ2XXS_GRID", ob_iq2xxs_grid, 256);
    bad |= emit_u8x8(f, "IQ2XS_GRID", ob_iq2xs_grid, 512);
    bad |= emit_u8x8(f, "IQ2S_GRID", ob_iq2s_grid, 1024);
    bad |= emit_u8x4(f, "IQ3XXS_GRID", ob_iq3xxs_grid, 256);
    bad |= emit_u8x4(f, "IQ3S_GRID", ob_iq3s_grid, 512);
    bad |= emit_ternary(f, "IQ1S_GRID", ob_iq1s_grid, 2048);
    bad |= fclose(f) != 0;
    if (bad) {
        fprintf(stderr, "gen_iq_glsl: writing %s failed\n", argv[1]);
        remove(argv[1]);
        return 1;
    }
    return 0;
}
