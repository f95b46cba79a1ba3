/* Build-time tool: rewrites a SPIR-V module that uses SPV_NV_cooperative_matrix into the
 * same module on SPV_KHR_cooperative_matrix, and prints it as the comma-separated words
 * that the Vulkan backend embeds (glslc -mfmt=num style).
 *
 *   spv_nv2khr IN.spv OUT.inc
 *
 * Why: Debian 12's glslc (glslang 11.13) compiles GL_NV_cooperative_matrix but not
 * GL_KHR_cooperative_matrix, while most devices (AMD RADV, Intel, NVIDIA) offer the KHR
 * extension. The two differ only in encoding:
 *   - capability CooperativeMatrixNV (5357) -> CooperativeMatrixKHR (6022), and the
 *     extension string;
 *   - OpTypeCooperativeMatrixNV (5358: type, scope, rows, cols) ->
 *     OpTypeCooperativeMatrixKHR (4456: the same + a Use id: 0 A, 1 B, 2 accumulator).
 *     NV has one type where KHR needs distinct A and B types, so the Use of each matrix
 *     value is read off the MulAdd operands it feeds, and a type used both as A and as B
 *     is cloned for B (the loads that produce B operands get the clone);
 *   - loads/stores (5359/5360: pointer, stride, column-major bool id) -> 4457/4458
 *     (pointer, layout id 0 row-major / 1 column-major, stride);
 *   - OpCooperativeMatrixMulAddNV 5361 -> 4459, LengthNV 5362 -> 4460.
 * Anything the rewrite cannot map exactly (a B value that is not a load's result, a
 * non-constant column-major operand, a missing 32-bit int type) fails the build with a
 * message, so a shader change that breaks the assumptions cannot slip through. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    OP_EXTENSION = 10, OP_CAPABILITY = 17, OP_TYPE_BOOL = 20, OP_TYPE_INT = 21, OP_CONSTANT_TRUE = 41,
    OP_CONSTANT_FALSE = 42, OP_CONSTANT = 43, OP_TYPE_POINTER = 32, OP_PHI = 245, OP_VARIABLE = 59, OP_LOAD = 61, OP_STORE = 62,
    NV_CAP = 5357, NV_TYPE = 5358, NV_LOAD = 5359, NV_STORE = 5360, NV_MULADD = 5361, NV_LENGTH = 5362,
    KHR_CAP = 6022, KHR_TYPE = 4456, KHR_LOAD = 4457, KHR_STORE = 4458, KHR_MULADD = 4459, KHR_LENGTH = 4460,
};
enum { USE_A = 1, USE_B = 2, USE_ACC = 4 };

static void die(const char *msg, uint32_t v) {
    fprintf(stderr, "spv_nv2khr: %s (%u)\n", msg, v);
    exit(1);
}

typedef struct { uint32_t *w; size_t n, cap; } vec;
static void push(vec *v, uint32_t x) {
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 4096;
        v->w = realloc(v->w, v->cap * sizeof(uint32_t));
        if (!v->w) die("out of memory", 0);
    }
    v->w[v->n++] = x;
}

static void push_string_inst(vec *o, uint32_t op, const char *s) {
    const size_t len = strlen(s) + 1, words = (len + 3) / 4;
    push(o, (uint32_t)((1 + words) << 16 | op));
    for (size_t i = 0; i < words; i++) {
        uint32_t w = 0;
        for (size_t b = 0; b < 4; b++) {
            const size_t k = i * 4 + b;
            if (k < len) w |= (uint32_t)(unsigned char)s[k] << (8 * b);
        }
        push(o, w);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: spv_nv2khr IN.spv OUT.inc\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) die("cannot open input", 0);
    vec in = {0};
    uint32_t word;
    while (fread(&word, 4, 1, f) == 1) push(&in, word);
    fclose(f);
    if (in.n < 5 || in.w[0] != 0x07230203u) die("not a little-endian SPIR-V module", (uint32_t)in.n);
    uint32_t bound = in.w[3];
    uint8_t *use = calloc(bound, 1), *is_coop_type = calloc(bound, 1), *is_load = calloc(bound, 1);
    /* ptr_to: pointer type -> matrix type; var_type: variable -> its pointer type;
     * load_var: value -> the variable it was loaded from */
    uint32_t *ptr_to = calloc(bound, sizeof(uint32_t)), *var_type = calloc(bound, sizeof(uint32_t));
    uint32_t *load_var = calloc(bound, sizeof(uint32_t));
    if (!ptr_to || !var_type || !load_var) die("out of memory", 0);
    uint32_t *type_of = calloc(bound, sizeof(uint32_t)), *bool_const = calloc(bound, sizeof(uint32_t));
    if (!use || !is_coop_type || !is_load || !type_of || !bool_const) die("out of memory", 0);
    uint32_t uint_type = 0;
    /* Pass 1: types, loads, and which operand slot each matrix value feeds. */
    for (size_t i = 5; i < in.n;) {
        const uint32_t wc = in.w[i] >> 16, op = in.w[i] & 0xffff, *a = &in.w[i + 1];
        if (wc == 0 || i + wc > in.n) die("malformed instruction at word", (uint32_t)i);
        if (op == OP_TYPE_INT && wc == 4 && a[1] == 32 && a[2] == 0 && !uint_type) uint_type = a[0];
        if (op == OP_CONSTANT_TRUE || op == OP_CONSTANT_FALSE) bool_const[a[1]] = op == OP_CONSTANT_TRUE ? 2 : 1;
        if (op == NV_TYPE) is_coop_type[a[0]] = 1;
        if (op == OP_TYPE_POINTER && is_coop_type[a[2]]) ptr_to[a[0]] = a[2];
        if (op == OP_VARIABLE && ptr_to[a[0]]) var_type[a[1]] = a[0];
        if (op == OP_LOAD && var_type[a[2]]) { type_of[a[1]] = a[0]; load_var[a[1]] = a[2]; }
        if (op == NV_LOAD) { type_of[a[1]] = a[0]; is_load[a[1]] = 1; }
        if (op == NV_MULADD) {
            use[a[2]] |= USE_A;
            use[a[3]] |= USE_B;
            use[a[4]] |= USE_ACC;
            use[a[1]] |= USE_ACC;
            type_of[a[1]] = a[0];
        }
        i += wc;
    }
    if (!uint_type) die("no 32-bit unsigned int type to hold Use/layout constants", 0);
    /* glslang keeps matrix variables in Function memory (its optimiser does not promote
     * them): a variable takes the uses of the values loaded from it, and a value stored
     * into a variable takes the variable's uses. */
    for (uint32_t id = 0; id < bound; id++)
        if (load_var[id]) use[load_var[id]] |= use[id];
    for (size_t i = 5; i < in.n; i += in.w[i] >> 16) {
        const uint32_t op = in.w[i] & 0xffff, *a = &in.w[i + 1];
        if (op == OP_STORE && var_type[a[0]]) use[a[1]] |= use[a[0]];
    }
    for (uint32_t id = 0; id < bound; id++) {
        if ((use[id] & USE_A) && (use[id] & USE_B)) die("a matrix value or variable used both as A and as B", id);
        if (var_type[id]) type_of[id] = ptr_to[var_type[id]];
    }
    /* Use per type: from the values of that type. A type whose values feed both A and B
     * gets a clone for B; B values must then be load results (retyped below). */
    uint8_t *type_use = calloc(bound, 1);
    if (!type_use) die("out of memory", 0);
    for (uint32_t id = 0; id < bound; id++)
        if (type_of[id] && is_coop_type[type_of[id]]) type_use[type_of[id]] |= use[id];
    uint32_t next = bound;
    uint32_t *clone_b = calloc(bound, sizeof(uint32_t));
    if (!clone_b) die("out of memory", 0);
    for (uint32_t t = 0; t < bound; t++) {
        if (!is_coop_type[t]) continue;
        const uint8_t u = type_use[t];
        if ((u & USE_ACC) && (u & (USE_A | USE_B))) die("a matrix type used both as accumulator and operand", t);
        if ((u & USE_A) && (u & USE_B)) clone_b[t] = next++;
    }
    for (uint32_t p = 0; p < bound; p++)
        if (ptr_to[p] && clone_b[ptr_to[p]]) clone_b[p] = next++; /* pointer to the B clone */
    for (uint32_t id = 0; id < bound; id++)
        if ((use[id] & USE_B) && type_of[id] && clone_b[type_of[id]] && !is_load[id] && !load_var[id] && !var_type[id])
            die("a B operand that is neither a load result nor a variable: cannot retype it", id);
    const uint32_t c_use[3] = {next, next + 1, next + 2}; /* constants 0, 1, 2 */
    next += 3;
    /* Pass 2: emit. */
    vec o = {0};
    for (int k = 0; k < 5; k++) push(&o, in.w[k]);
    int consts_done = 0, uint_seen = 0;
    for (size_t i = 5; i < in.n;) {
        const uint32_t wc = in.w[i] >> 16, op = in.w[i] & 0xffff, *a = &in.w[i + 1];
        if (op == OP_TYPE_INT && a[0] == uint_type) uint_seen = 1;
        if (op == OP_CAPABILITY && a[0] == NV_CAP) {
            push(&o, 2u << 16 | OP_CAPABILITY);
            push(&o, KHR_CAP);
        } else if (op == OP_EXTENSION && !strncmp((const char *)a, "SPV_NV_cooperative_matrix", (wc - 1) * 4)) {
            push_string_inst(&o, OP_EXTENSION, "SPV_KHR_cooperative_matrix");
        } else if (op == NV_TYPE) {
            if (!consts_done) {
                if (!uint_seen) die("the 32-bit int type comes after the first matrix type", uint_type);
                for (uint32_t v = 0; v < 3; v++) {
                    push(&o, 4u << 16 | OP_CONSTANT);
                    push(&o, uint_type);
                    push(&o, c_use[v]);
                    push(&o, v);
                }
                consts_done = 1;
            }
            const uint8_t u = type_use[a[0]];
            const uint32_t use_id = u & USE_ACC ? c_use[2] : (u & USE_A) ? c_use[0] : (u & USE_B) ? c_use[1] : c_use[2];
            push(&o, 7u << 16 | KHR_TYPE);
            for (int k = 0; k < 5; k++) push(&o, a[k]);
            push(&o, use_id);
            if (clone_b[a[0]]) {
                push(&o, 7u << 16 | KHR_TYPE);
                push(&o, clone_b[a[0]]);
                for (int k = 1; k < 5; k++) push(&o, a[k]);
                push(&o, c_use[1]);
            }
        } else if (op == OP_TYPE_POINTER && clone_b[a[0]]) {
            for (uint32_t k = 0; k < wc; k++) push(&o, in.w[i + k]);
            push(&o, 4u << 16 | OP_TYPE_POINTER);
            push(&o, clone_b[a[0]]);
            push(&o, a[1]);
            push(&o, clone_b[a[2]]);
        } else if ((op == OP_VARIABLE || op == OP_LOAD) && (use[a[1]] & USE_B) && clone_b[a[0]]) {
            /* a B variable gets the clone's pointer type; a load from it the clone type */
            push(&o, in.w[i]);
            push(&o, clone_b[a[0]]);
            for (uint32_t k = 1; k < wc - 1; k++) push(&o, a[k]);
        } else if (op == NV_LOAD) {
            /* rtype res ptr stride colmajor [mem...] -> rtype res ptr layout stride [mem...] */
            const uint32_t cm = bool_const[a[4]];
            if (!cm) die("column-major operand of a load is not a constant", a[4]);
            uint32_t rtype = a[0];
            if ((use[a[1]] & USE_B) && clone_b[rtype]) rtype = clone_b[rtype];
            push(&o, wc << 16 | KHR_LOAD);
            push(&o, rtype);
            push(&o, a[1]);
            push(&o, a[2]);
            push(&o, c_use[cm == 2 ? 1 : 0]);
            push(&o, a[3]);
            for (uint32_t k = 5; k < wc - 1; k++) push(&o, a[k]);
        } else if (op == NV_STORE) {
            /* ptr obj stride colmajor [mem...] -> ptr obj layout stride [mem...] */
            const uint32_t cm = bool_const[a[3]];
            if (!cm) die("column-major operand of a store is not a constant", a[3]);
            push(&o, wc << 16 | KHR_STORE);
            push(&o, a[0]);
            push(&o, a[1]);
            push(&o, c_use[cm == 2 ? 1 : 0]);
            push(&o, a[2]);
            for (uint32_t k = 4; k < wc - 1; k++) push(&o, a[k]);
        } else if (op == NV_MULADD || op == NV_LENGTH) {
            push(&o, wc << 16 | (op == NV_MULADD ? KHR_MULADD : KHR_LENGTH));
            for (uint32_t k = 0; k < wc - 1; k++) push(&o, a[k]);
        } else if (op == OP_PHI && is_coop_type[a[0]] && clone_b[a[0]]) {
            die("a phi of a matrix type that is split into A and B", a[1]);
        } else {
            for (uint32_t k = 0; k < wc; k++) push(&o, in.w[i + k]);
        }
        i += wc;
    }
    o.w[3] = next;
    FILE *g = fopen(argv[2], "w");
    if (!g) die("cannot open output", 0);
    for (size_t k = 0; k < o.n; k++) fprintf(g, "0x%08x,%s", o.w[k], k % 4 == 3 ? "\n" : "");
    fprintf(g, "\n");
    if (fclose(g) != 0) die("cannot write output", 0);
    free(in.w); free(o.w); free(use); free(is_coop_type); free(is_load); free(type_of); free(bool_const);
    free(type_use); free(clone_b); free(ptr_to); free(var_type); free(load_var);
    return 0;
}
