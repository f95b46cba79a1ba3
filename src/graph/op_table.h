/* The op table: each op of graph.h described once, with its name, its sources, and the
 * checks of shapes, types and parameters that any implementation of it needs (graph.h's
 * contract). A backend's supports() calls ob_op_valid first and adds only its own limits
 * (the types it has kernels for, the sizes its kernels can index, alignment), so a
 * malformed node is refused the same way everywhere (issue #30). */
#ifndef OB_GRAPH_OP_TABLE_H
#define OB_GRAPH_OP_TABLE_H

#include "graph/graph.h"

typedef struct ob_op_info {
    const char *name;
    int n_src;     /* src[0 .. n_src-1] must be set */
    int n_src_opt; /* src[n_src .. n_src+n_src_opt-1] may be NULL; every later src must be */
    /* The op's own checks, run after the sources' count; NULL: none beyond it (LEAF, VIEW). */
    bool (*valid)(const ob_tensor *n);
    /* Bit s: the op writes src[s] in place besides its output (KV_STORE's cache, the
     * recurrent ops' state); a backend that runs the op elsewhere (a CPU fallback) copies
     * those back too, and a test harness keeps host copies of them. */
    unsigned writes;
} ob_op_info;

/* NULL for an id that is not an op. */
const ob_op_info *ob_op_info_get(ob_op op);

/* True when n is a well-formed node of its op: its sources present (and no others), their
 * types and shapes as graph.h gives them, its parameters in range. Says nothing of whether
 * a backend has a kernel for it. */
bool ob_op_valid(const ob_tensor *n);

/* Whether node n writes its source s in place (ob_op_info.writes). */
bool ob_op_writes_src(const ob_tensor *n, int s);

#endif
