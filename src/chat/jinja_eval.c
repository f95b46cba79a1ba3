/* Jinja evaluator: walks the tree with jinja2's scoping (a for-loop iteration, macro call
 * and {% with %} open a scope; if/set do not), undefined semantics (printing an undefined
 * gives "", using it in arithmetic or looking into it is an error) and loop controls. */
#include "chat/jinja_int.h"
#include <math.h>
#include <stdlib.h>

static jv eval(jj_ctx *c, const jj_node *n, jj_scope *s);
static void exec_body(jj_ctx *c, const jj_node *body, jj_scope *s);

static jj_scope *scope_new(jj_ctx *c, jj_scope *parent) {
    jj_scope *s = jj_alloc(c, sizeof *s);
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

static void scope_set(jj_ctx *c, jj_scope *s, const char *name, size_t n, jv v) {
    jv k = jv_str(name, n);
    jj_dict_set(c, &s->vars, k, v);
}

static jv lookup(jj_ctx *c, jj_scope *s, const char *name, size_t n) {
    jv v;
    for (; s; s = s->parent)
        if (jj_dict_get_s(&s->vars, name, n, &v)) return v;
    bool found;
    v = jj_global(c, name, n, &found);
    if (found) return v;
    jj_buf b = {0};
    jj_buf_printf(c, &b, "'%.*s' is undefined", (int)OB_MIN(n, 200), name);
    return jv_undef(b.p);
}

/* ---- operators ---- */

static bool is_num(jv v) { return v.kind == JV_BOOL || v.kind == JV_INT || v.kind == JV_FLOAT; }
static double num_f(jv v) { return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t num_i(jv v) { return v.kind == JV_INT ? v.u.i : v.kind == JV_BOOL ? (int64_t)v.u.b : 0; }

static const char *op_str(jj_op op) {
    switch (op) {
    case OP_ADD: return "+"; case OP_SUB: return "-"; case OP_MUL: return "*"; case OP_DIV: return "/";
    case OP_FLOORDIV: return "//"; case OP_MOD: return "%"; case OP_POW: return "**";
    default: return "?";
    }
}

_Noreturn static void bad_operands(jj_ctx *c, jj_op op, jv a, jv b) {
    jj_fail(c, "unsupported operand type(s) for %s: '%s' and '%s'", op_str(op), jv_type_name(a), jv_type_name(b));
}

static jv repeat(jj_ctx *c, jv seq, int64_t k) {
    if (k < 0) k = 0;
    if (seq.kind == JV_STR) {
        jj_buf b = {0};
        for (int64_t i = 0; i < k; i++) { jj_step(c); jj_buf_put(c, &b, seq.u.s.p, seq.u.s.n); }
        return jv_str(b.p ? b.p : "", b.n);
    }
    jv l = jv_list_new(c, 0);
    l.flags = seq.flags & JVF_TUPLE;
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < seq.u.l->n; j++) { jj_step(c); jj_list_push(c, l.u.l, seq.u.l->v[j]); }
    return l;
}

jv jj_binary(jj_ctx *c, jj_op op, jv a, jv b) {
    if (op == OP_TILDE) {
        jj_buf buf = {0};
        jv_to_str(c, &buf, a);
        jv_to_str(c, &buf, b);
        return jv_str(buf.p ? buf.p : "", buf.n);
    }
    jv_check_defined(c, a);
    jv_check_defined(c, b);
    if (is_num(a) && is_num(b)) {
        bool fl = a.kind == JV_FLOAT || b.kind == JV_FLOAT;
        double x = num_f(a), y = num_f(b);
        int64_t i = num_i(a), j = num_i(b), r;
        switch (op) {
        case OP_ADD: if (fl) return jv_float(x + y); if (__builtin_add_overflow(i, j, &r)) goto ovf; return jv_int(r);
        case OP_SUB: if (fl) return jv_float(x - y); if (__builtin_sub_overflow(i, j, &r)) goto ovf; return jv_int(r);
        case OP_MUL: if (fl) return jv_float(x * y); if (__builtin_mul_overflow(i, j, &r)) goto ovf; return jv_int(r);
        case OP_DIV:
            if (y == 0) jj_fail(c, "division by zero");
            return jv_float(x / y);
        case OP_FLOORDIV:
            if (y == 0) jj_fail(c, "integer division or modulo by zero");
            if (fl) return jv_float(floor(x / y));
            if (i == INT64_MIN && j == -1) goto ovf;
            r = i / j;
            if ((i % j != 0) && ((i < 0) != (j < 0))) r--;
            return jv_int(r);
        case OP_MOD:
            if (y == 0) jj_fail(c, "integer division or modulo by zero");
            if (fl) { double m = fmod(x, y); if (m != 0 && ((m < 0) != (y < 0))) m += y; return jv_float(m); }
            if (j == -1) return jv_int(0);
            r = i % j;
            if (r != 0 && ((r < 0) != (j < 0))) r += j;
            return jv_int(r);
        case OP_POW:
            if (fl || j < 0) return jv_float(pow(x, y));
            r = 1;
            for (int64_t k = 0; k < j; k++) { if (__builtin_mul_overflow(r, i, &r)) goto ovf; if (r == 0 || r == 1) break; }
            if (r == 1 && i == -1) r = (j % 2) ? -1 : 1;
            return jv_int(r);
        default: break;
        }
    }
    if (op == OP_ADD && a.kind == JV_STR && b.kind == JV_STR) {
        jj_buf buf = {0};
        jj_buf_put(c, &buf, a.u.s.p, a.u.s.n);
        jj_buf_put(c, &buf, b.u.s.p, b.u.s.n);
        return jv_str(buf.p ? buf.p : "", buf.n);
    }
    if (op == OP_ADD && a.kind == JV_LIST && b.kind == JV_LIST && (a.flags & JVF_TUPLE) == (b.flags & JVF_TUPLE) &&
        !((a.flags | b.flags) & JVF_GEN)) {
        jv l = jv_list_new(c, a.u.l->n + b.u.l->n);
        l.flags = a.flags & JVF_TUPLE;
        for (size_t k = 0; k < a.u.l->n; k++) jj_list_push(c, l.u.l, a.u.l->v[k]);
        for (size_t k = 0; k < b.u.l->n; k++) jj_list_push(c, l.u.l, b.u.l->v[k]);
        return l;
    }
    if (op == OP_MUL && (a.kind == JV_STR || a.kind == JV_LIST) && (b.kind == JV_INT || b.kind == JV_BOOL)) return repeat(c, a, num_i(b));
    if (op == OP_MUL && (b.kind == JV_STR || b.kind == JV_LIST) && (a.kind == JV_INT || a.kind == JV_BOOL)) return repeat(c, b, num_i(a));
    if (op == OP_MOD && a.kind == JV_STR) jj_fail(c, "printf-style '%%' string formatting is not supported");
    bad_operands(c, op, a, b);
ovf:
    jj_fail(c, "integer overflow in '%s' (Python integers are unbounded; ours are 64-bit)", op_str(op));
}

static bool contains(jj_ctx *c, jv container, jv item) {
    switch ((jv_kind)container.kind) {
    case JV_STR:
        if (item.kind != JV_STR) jj_fail(c, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        if (item.u.s.n == 0) return true;
        return memmem(container.u.s.p, container.u.s.n, item.u.s.p, item.u.s.n) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < container.u.l->n; i++) if (jv_eq(container.u.l->v[i], item)) return true;
        return false;
    case JV_DICT: { jv x; return jj_dict_get(container.u.d, item, &x); }
    case JV_UNDEF: jv_check_defined(c, container); return false;
    default: jj_fail(c, "argument of type '%s' is not iterable", jv_type_name(container));
    }
}

static bool compare(jj_ctx *c, jj_op op, jv a, jv b) {
    switch (op) {
    case OP_EQ: return jv_eq(a, b);
    case OP_NE: return !jv_eq(a, b);
    case OP_LT: return jv_cmp(c, a, b) < 0;
    case OP_GT: return jv_cmp(c, a, b) > 0;
    case OP_LE: return jv_cmp(c, a, b) <= 0;
    case OP_GE: return jv_cmp(c, a, b) >= 0;
    case OP_IN: return contains(c, b, a);
    case OP_NOTIN: return !contains(c, b, a);
    default: jj_fail(c, "bad comparison operator");
    }
}

/* ---- macros ---- */

static bool uses_name(const jj_node *n, const char *name, int depth) {
    if (!n || depth > 400) return false;
    if (n->kind == N_NAME && n->name_n == strlen(name) && memcmp(n->name, name, n->name_n) == 0) return true;
    if (uses_name(n->a, name, depth + 1) || uses_name(n->b, name, depth + 1) || uses_name(n->c, name, depth + 1) || uses_name(n->d, name, depth + 1)) return true;
    const jj_nodes *ls[3] = {&n->l1, &n->l2, &n->l3};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < ls[k]->n; i++) if (uses_name(ls[k]->v[i], name, depth + 1)) return true;
    return false;
}

static jv call_macro(jj_ctx *c, const jj_macro *m, jv *args, int nargs, const char **kwn, const size_t *kwnl, jv *kwv, int nkw, jv caller) {
    const jj_node *def = m->def;
    if (++c->depth > c->max_depth) jj_fail(c, "macro calls nest too deeply (limit %d)", c->max_depth);
    jj_scope *s = scope_new(c, m->closure);
    int np = def->l1.n;
    bool *given = jj_alloc(c, (size_t)(np + 1) * sizeof(bool));
    memset(given, 0, (size_t)(np + 1) * sizeof(bool));
    for (int i = 0; i < nargs && i < np; i++) { scope_set(c, s, def->l1.v[i]->name, def->l1.v[i]->name_n, args[i]); given[i] = true; }
    jv varargs = jv_list_new(c, 0);
    varargs.flags = JVF_TUPLE;
    for (int i = np; i < nargs; i++) jj_list_push(c, varargs.u.l, args[i]);
    if (nargs > np && !uses_name(def->a, "varargs", 0))
        jj_fail(c, "macro '%.*s' takes not more than %d argument(s)", (int)def->name_n, def->name, np);
    jv kwargs = jv_dict_new(c, 0);
    for (int k = 0; k < nkw; k++) {
        int i;
        for (i = 0; i < np; i++)
            if (def->l1.v[i]->name_n == kwnl[k] && memcmp(def->l1.v[i]->name, kwn[k], kwnl[k]) == 0) break;
        if (i < np) {
            if (given[i]) jj_fail(c, "macro '%.*s' got multiple values for argument '%.*s'", (int)def->name_n, def->name, (int)kwnl[k], kwn[k]);
            scope_set(c, s, kwn[k], kwnl[k], kwv[k]);
            given[i] = true;
        } else {
            if (!uses_name(def->a, "kwargs", 0))
                jj_fail(c, "macro '%.*s' takes no keyword argument '%.*s'", (int)def->name_n, def->name, (int)kwnl[k], kwn[k]);
            jj_dict_set(c, kwargs.u.d, jv_str(kwn[k], kwnl[k]), kwv[k]);
        }
    }
    for (int i = 0; i < np; i++) {
        if (given[i]) continue;
        const jj_node *p = def->l1.v[i];
        if (def->l2.v[i]) scope_set(c, s, p->name, p->name_n, eval(c, def->l2.v[i], s));
        else {
            jj_buf b = {0};
            jj_buf_printf(c, &b, "parameter '%.*s' was not provided", (int)p->name_n, p->name);
            scope_set(c, s, p->name, p->name_n, jv_undef(b.p));
        }
    }
    scope_set(c, s, "varargs", 7, varargs);
    scope_set(c, s, "kwargs", 6, kwargs);
    if (caller.kind == JV_MACRO) scope_set(c, s, "caller", 6, caller);
    jj_buf *saved = c->out, out = {0};
    int saved_ctl = c->loop_ctl;
    c->out = &out;
    exec_body(c, def->a, s);
    c->out = saved;
    c->loop_ctl = saved_ctl;
    c->depth--;
    return jv_str(out.p ? out.p : "", out.n);
}

/* Evaluates call arguments into arrays in the arena. */
typedef struct call_args { jv *args; int nargs; const char **kwn; size_t *kwnl; jv *kwv; int nkw; } call_args;

static call_args eval_args(jj_ctx *c, const jj_node *n, jj_scope *s) {
    call_args a = {0};
    a.nargs = n->l1.n;
    a.nkw = n->l2.n;
    a.args = jj_alloc(c, (size_t)(a.nargs + 1) * sizeof(jv));
    a.kwn = jj_alloc(c, (size_t)(a.nkw + 1) * sizeof(char *));
    a.kwnl = jj_alloc(c, (size_t)(a.nkw + 1) * sizeof(size_t));
    a.kwv = jj_alloc(c, (size_t)(a.nkw + 1) * sizeof(jv));
    for (int i = 0; i < a.nargs; i++) a.args[i] = eval(c, n->l1.v[i], s);
    for (int i = 0; i < a.nkw; i++) {
        a.kwn[i] = n->l2.v[i]->name;
        a.kwnl[i] = n->l2.v[i]->name_n;
        a.kwv[i] = eval(c, n->l2.v[i]->a, s);
    }
    return a;
}

static jv call_value(jj_ctx *c, jv fn, call_args *a, jv caller, int line) {
    if (fn.kind == JV_MACRO) return call_macro(c, fn.u.m, a->args, a->nargs, a->kwn, a->kwnl, a->kwv, a->nkw, caller);
    if (fn.kind == JV_FUNC) return jj_call_builtin(c, fn.u.fn, a->args, a->nargs, a->kwn, a->kwnl, a->kwv, a->nkw, line);
    jv_check_defined(c, fn);
    jj_fail(c, "line %d: '%s' object is not callable", line, jv_type_name(fn));
}

static jv apply_filter_node(jj_ctx *c, const jj_node *f, jv input, jj_scope *s) {
    call_args a = eval_args(c, f, s);
    return jj_apply_filter(c, f->builtin, input, a.args, a.nargs, a.kwn, a.kwnl, a.kwv, a.nkw);
}

/* ---- expressions ---- */

static jv eval(jj_ctx *c, const jj_node *n, jj_scope *s) {
    jj_step(c);
    switch (n->kind) {
    case N_LIT: return n->val;
    case N_NAME: return lookup(c, s, n->name, n->name_n);
    case N_ATTR: return jj_get_attr(c, eval(c, n->a, s), n->name, n->name_n);
    case N_ITEM: { jv o = eval(c, n->a, s); return jj_get_item(c, o, eval(c, n->b, s)); }
    case N_SLICE: {
        jv o = eval(c, n->a, s);
        jv a = n->b ? eval(c, n->b, s) : jv_none();
        jv b = n->c ? eval(c, n->c, s) : jv_none();
        jv st = n->d ? eval(c, n->d, s) : jv_none();
        return jj_slice(c, o, a, b, st);
    }
    case N_CALL: {
        jv fn = eval(c, n->a, s);
        call_args a = eval_args(c, n, s);
        return call_value(c, fn, &a, jv_undef(NULL), n->line);
    }
    case N_FILTER: return apply_filter_node(c, n, eval(c, n->a, s), s);
    case N_TEST: {
        jv v = eval(c, n->a, s);
        jv *args = jj_alloc(c, (size_t)(n->l1.n + 1) * sizeof(jv));
        for (int i = 0; i < n->l1.n; i++) args[i] = eval(c, n->l1.v[i], s);
        return jv_bool(jj_apply_test(c, n->builtin, v, args, n->l1.n) != n->neg);
    }
    case N_UNARY: {
        jv v = eval(c, n->a, s);
        if (n->op == OP_NOT) return jv_bool(!jv_truthy(c, v));
        jv_check_defined(c, v);
        if (v.kind == JV_FLOAT) return jv_float(n->op == OP_NEG ? -v.u.f : v.u.f);
        if (v.kind == JV_INT || v.kind == JV_BOOL) {
            int64_t i = num_i(v);
            if (n->op == OP_NEG && i == INT64_MIN) jj_fail(c, "integer overflow in unary '-'");
            return jv_int(n->op == OP_NEG ? -i : i);
        }
        jj_fail(c, "line %d: bad operand type for unary %s: '%s'", n->line, n->op == OP_NEG ? "-" : "+", jv_type_name(v));
    }
    case N_BINARY: {
        jv a = eval(c, n->a, s);
        if (n->op == OP_AND) return jv_truthy(c, a) ? eval(c, n->b, s) : a;
        if (n->op == OP_OR) return jv_truthy(c, a) ? a : eval(c, n->b, s);
        return jj_binary(c, n->op, a, eval(c, n->b, s));
    }
    case N_COMPARE: {
        jv left = eval(c, n->a, s);
        for (int i = 0; i < n->l1.n; i++) {
            jv right = eval(c, n->l1.v[i], s);
            if (!compare(c, n->l2.v[i]->op, left, right)) return jv_bool(false);
            left = right;
        }
        return jv_bool(true);
    }
    case N_COND:
        if (jv_truthy(c, eval(c, n->a, s))) return eval(c, n->b, s);
        return n->c ? eval(c, n->c, s) : jv_undef("the inline if-expression evaluated to false and no else section was defined");
    case N_LIST: case N_TUPLE: {
        jv l = jv_list_new(c, (size_t)n->l1.n);
        if (n->kind == N_TUPLE) l.flags = JVF_TUPLE;
        for (int i = 0; i < n->l1.n; i++) jj_list_push(c, l.u.l, eval(c, n->l1.v[i], s));
        return l;
    }
    case N_DICT: {
        jv d = jv_dict_new(c, (size_t)n->l1.n);
        for (int i = 0; i < n->l1.n; i++) {
            jv k = eval(c, n->l1.v[i], s);
            jv_check_defined(c, k);
            jj_dict_set(c, d.u.d, k, eval(c, n->l2.v[i], s));
        }
        return d;
    }
    default:
        jj_fail(c, "line %d: internal: not an expression", n->line);
    }
}

/* ---- statements ---- */

static void assign(jj_ctx *c, jj_scope *s, const jj_nodes *targets, jv v, int line) {
    if (targets->n == 1) {
        const jj_node *t = targets->v[0];
        if (t->kind == N_NSREF) {
            jv ns = lookup(c, s, t->name, t->name_n);
            if (ns.kind != JV_NS) jj_fail(c, "line %d: cannot assign attribute on non-namespace object", line);
            jj_dict_set(c, ns.u.d, t->val, v);
        } else {
            scope_set(c, s, t->name, t->name_n, v);
        }
        return;
    }
    jv l = jj_iterable_to_list(c, v, "cannot unpack");
    if (l.u.l->n != (size_t)targets->n)
        jj_fail(c, "line %d: %s values to unpack (expected %d, got %zu)", line, l.u.l->n > (size_t)targets->n ? "too many" : "not enough", targets->n, l.u.l->n);
    for (int i = 0; i < targets->n; i++) {
        jj_nodes one = {0};
        jj_node *tv[1] = {targets->v[i]};
        one.v = tv; one.n = 1;
        assign(c, s, &one, l.u.l->v[i], line);
    }
}

static void exec_for(jj_ctx *c, const jj_node *n, jj_scope *s) {
    jv it = eval(c, n->a, s);
    if (it.kind == JV_NS || it.kind == JV_FUNC || it.kind == JV_MACRO || it.kind == JV_LOOP || it.kind == JV_NONE ||
        it.kind == JV_INT || it.kind == JV_FLOAT || it.kind == JV_BOOL)
        jj_fail(c, "line %d: '%s' object is not iterable", n->line, jv_type_name(it));
    jv items = jj_iterable_to_list(c, it, "for");
    if (n->b) { /* {% for x in xs if cond %}: loop.* counts only the kept items */
        jv kept = jv_list_new(c, items.u.l->n);
        for (size_t i = 0; i < items.u.l->n; i++) {
            jj_scope *fs = scope_new(c, s);
            assign(c, fs, &n->l1, items.u.l->v[i], n->line);
            if (jv_truthy(c, eval(c, n->b, fs))) jj_list_push(c, kept.u.l, items.u.l->v[i]);
        }
        items = kept;
    }
    jj_loop *loop = jj_alloc(c, sizeof *loop);
    memset(loop, 0, sizeof *loop);
    loop->items = items.u.l;
    loop->length = (int64_t)items.u.l->n;
    loop->depth = 1;
    jv lv = {0};
    lv.kind = JV_LOOP;
    lv.u.loop = loop;
    for (size_t i = 0; i < items.u.l->n; i++) {
        jj_step(c);
        loop->index0 = (int64_t)i;
        jj_scope *is = scope_new(c, s);
        assign(c, is, &n->l1, items.u.l->v[i], n->line);
        scope_set(c, is, "loop", 4, lv);
        exec_body(c, n->c, is);
        if (c->loop_ctl == 1) { c->loop_ctl = 0; break; }
        c->loop_ctl = 0;
    }
    if (items.u.l->n == 0 && n->d) exec_body(c, n->d, s);
}

static jv capture(jj_ctx *c, const jj_node *body, jj_scope *s) {
    jj_buf *saved = c->out, out = {0};
    c->out = &out;
    exec_body(c, body, s);
    c->out = saved;
    return jv_str(out.p ? out.p : "", out.n);
}

static void exec_stmt(jj_ctx *c, const jj_node *n, jj_scope *s) {
    jj_step(c);
    switch (n->kind) {
    case N_TEXT: jj_buf_put(c, c->out, n->val.u.s.p, n->val.u.s.n); return;
    case N_OUTPUT: jv_to_str(c, c->out, eval(c, n->a, s)); return;
    case N_BODY: exec_body(c, n, s); return;
    case N_IF:
        for (int i = 0; i < n->l1.n; i++)
            if (jv_truthy(c, eval(c, n->l1.v[i], s))) { exec_body(c, n->l2.v[i], s); return; }
        if (n->a) exec_body(c, n->a, s);
        return;
    case N_FOR: exec_for(c, n, s); return;
    case N_SET: assign(c, s, &n->l1, eval(c, n->a, s), n->line); return;
    case N_SET_BLOCK: {
        jv v = capture(c, n->a, s);
        for (int i = 0; i < n->l2.n; i++) v = apply_filter_node(c, n->l2.v[i], v, s);
        assign(c, s, &n->l1, v, n->line);
        return;
    }
    case N_MACRO: {
        jj_macro *m = jj_alloc(c, sizeof *m);
        m->def = n; m->closure = s;
        jv v = {0};
        v.kind = JV_MACRO;
        v.u.m = m;
        scope_set(c, s, n->name, n->name_n, v);
        return;
    }
    case N_CALL_BLOCK: {
        jj_macro *m = jj_alloc(c, sizeof *m);
        m->def = n->b; m->closure = s;
        jv caller = {0};
        caller.kind = JV_MACRO;
        caller.u.m = m;
        jv fn = eval(c, n->a->a, s);
        call_args a = eval_args(c, n->a, s);
        if (fn.kind != JV_MACRO) { jv_check_defined(c, fn); jj_fail(c, "line %d: {%% call %%} needs a macro", n->line); }
        jv r = call_value(c, fn, &a, caller, n->line);
        jj_buf_put(c, c->out, r.u.s.p, r.u.s.n);
        return;
    }
    case N_FILTER_BLOCK: {
        jv v = capture(c, n->a, s);
        for (int i = 0; i < n->l1.n; i++) v = apply_filter_node(c, n->l1.v[i], v, s);
        jv_to_str(c, c->out, v);
        return;
    }
    case N_WITH: {
        jj_scope *ws = scope_new(c, s);
        for (int i = 0; i < n->l2.n; i++) {
            jj_nodes one = {0};
            jj_node *tv[1] = {n->l1.v[i]};
            one.v = tv; one.n = 1;
            assign(c, ws, &one, eval(c, n->l2.v[i], s), n->line);
        }
        exec_body(c, n->a, ws);
        return;
    }
    case N_BREAK: c->loop_ctl = 1; return;
    case N_CONTINUE: c->loop_ctl = 2; return;
    default: jj_fail(c, "line %d: internal: not a statement", n->line);
    }
}

static void exec_body(jj_ctx *c, const jj_node *body, jj_scope *s) {
    if (++c->depth > c->max_depth) jj_fail(c, "template nests too deeply (limit %d)", c->max_depth);
    for (int i = 0; i < body->l1.n && !c->loop_ctl; i++) exec_stmt(c, body->l1.v[i], s);
    c->depth--;
}

static void render_root(jj_ctx *c, const jj_node *root, const json_t *context) {
    c->globals = scope_new(c, NULL);
    if (context && json_is_object(context)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)context, k, v) scope_set(c, c->globals, k, strlen(k), jv_from_json(c, v));
    }
    /* template-level sets go in their own scope above the context, as in jinja2 */
    jj_scope *top = scope_new(c, c->globals);
    c->depth = 0;
    exec_body(c, root, top);
}

ob_status ob_jinja_render_ex(const char *tmpl, size_t tmpl_len, const json_t *context,
                             const ob_jinja_limits *lim, char **out, size_t *out_len, char *err,
                             size_t err_len) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!tmpl || !out) return ob_fail(err, err_len, OB_ERR_ARG, "jinja: no template or output pointer");
    if (context && !json_is_object(context)) return ob_fail(err, err_len, OB_ERR_ARG, "jinja: context must be a JSON object");
    jj_ctx *c = calloc(1, sizeof *c);
    if (!c) return ob_fail(err, err_len, OB_ERR_NOMEM, "jinja: out of memory");
    c->err = err;
    c->err_len = err_len;
    c->max_output = lim && lim->max_output ? lim->max_output : (size_t)16 << 20;
    c->mem_cap = lim && lim->max_memory ? lim->max_memory : (size_t)256 << 20;
    c->max_steps = lim && lim->max_steps ? lim->max_steps : 20000000ull;
    c->max_depth = lim && lim->max_depth ? lim->max_depth : 200;
    c->src = tmpl;
    c->src_n = tmpl_len;
    c->line_cur = 1;
    ob_status st = OB_OK;
    if (setjmp(c->jb) == 0) {
        jj_lex(c);
        jj_node *root = jj_parse(c);
        jj_buf res = {0};
        c->out = &res;
        render_root(c, root, context);
        char *s = malloc(res.n + 1);
        if (!s) jj_fail(c, "jinja: out of memory");
        if (res.n) memcpy(s, res.p, res.n);
        s[res.n] = 0;
        *out = s;
        if (out_len) *out_len = res.n;
    } else {
        st = OB_ERR_FORMAT;
    }
    jj_chunk *k = c->arena;
    while (k) { jj_chunk *nx = k->next; free(k); k = nx; }
    free(c);
    return st;
}

ob_status ob_jinja_render(const char *tmpl, size_t tmpl_len, const json_t *context, char **out,
                          char *err, size_t err_len) {
    return ob_jinja_render_ex(tmpl, tmpl_len, context, NULL, out, NULL, err, err_len);
}
