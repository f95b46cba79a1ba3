/* Internals of the Jinja interpreter shared by jinja_lex.c, jinja_parse.c,
 * jinja_value.c, jinja_eval.c, jinja_builtin.c and jinja_filters.c. Not a public interface.
 *
 * Memory: everything (tokens, tree, values, strings) lives in one arena per render and is
 * freed at once at the end; values are immutable once built (the sandbox jinja2 runs in
 * forbids mutating lists and dicts), except namespaces, so they can be shared freely.
 * Errors: jj_fail() writes the message and longjmps back to ob_jinja_render_ex. */
#ifndef OB_CHAT_JINJA_INT_H
#define OB_CHAT_JINJA_INT_H

#include <setjmp.h>
#include "chat/jinja.h"

typedef struct jj_chunk { struct jj_chunk *next; size_t used, cap; } jj_chunk;

typedef struct jj_buf { char *p; size_t n, cap; } jj_buf;

/* ---- values ---- */
typedef enum jv_kind {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS,
    JV_FUNC, JV_MACRO, JV_LOOP,
} jv_kind;

enum { JVF_TUPLE = 1, /* list that is a Python tuple (repr with parentheses) */
       JVF_GEN = 2,   /* jinja2 would hold a generator/view here: printing it is refused */
       JVF_UNSAFE = 4, /* undefined from a sandbox-refused attribute: any use is an error */
       JVF_MISSING = 8 /* argument binding: the caller did not pass this parameter */ };

typedef struct jv {
    uint8_t kind, flags;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s; /* JV_STR; JV_UNDEF: the "why" message */
        struct jj_list *l;
        struct jj_dict *d;                      /* JV_DICT and JV_NS */
        struct jj_func *fn;
        struct jj_macro *m;
        struct jj_loop *loop;
    } u;
} jv;

typedef struct jj_list { jv *v; size_t n, cap; } jj_list;
typedef struct jj_dict { jv *k, *v; size_t n, cap; } jj_dict;

/* Built-in callables: globals and bound methods of str / dict / list / loop objects. */
typedef struct jj_func { int id; jv self; } jj_func;

typedef struct jj_node jj_node;
typedef struct jj_scope { struct jj_scope *parent; jj_dict vars; } jj_scope;

typedef struct jj_macro {
    const jj_node *def;     /* N_MACRO (or the caller body of a call block) */
    jj_scope *closure;      /* scope it was defined in */
} jj_macro;

typedef struct jj_loop {
    int64_t index0, length;
    const jj_list *items;
    int depth;
    jv last_changed; bool has_changed;
} jj_loop;

/* ---- tokens ---- */
typedef enum jj_tok_kind {
    TK_EOF, TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END, TK_NAME,
    TK_STRING, TK_INT, TK_FLOAT, TK_OP,
} jj_tok_kind;

typedef enum jj_op {
    OP_NONE, OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_TILDE,
    OP_LBRACKET, OP_RBRACKET, OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE, OP_EQ, OP_NE,
    OP_LT, OP_GT, OP_LE, OP_GE, OP_ASSIGN, OP_DOT, OP_COLON, OP_PIPE, OP_COMMA, OP_SEMI,
    /* not lexed; used by the tree */
    OP_AND, OP_OR, OP_NOT, OP_IN, OP_NOTIN, OP_NEG, OP_POS,
} jj_op;

typedef struct jj_tok {
    jj_tok_kind kind;
    int line;
    jj_op op;
    const char *p; size_t n; /* name / processed string / data text */
    int64_t i; double f;
} jj_tok;

/* ---- tree ---- */
typedef enum jj_node_kind {
    /* statements */
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_BLOCK, N_MACRO, N_CALL_BLOCK, N_FILTER_BLOCK,
    N_WITH, N_BREAK, N_CONTINUE, N_BODY,
    /* expressions */
    N_LIT, N_NAME, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_UNARY, N_BINARY,
    N_COMPARE, N_COND, N_LIST, N_TUPLE, N_DICT, N_KW, N_NSREF,
} jj_node_kind;

typedef struct jj_nodes { jj_node **v; int n, cap; } jj_nodes;

struct jj_node {
    jj_node_kind kind;
    int line;
    jj_op op;
    bool neg;                /* N_TEST: `is not` */
    const char *name; size_t name_n; /* names, attributes, filter/test names */
    int builtin;             /* N_FILTER / N_TEST: index in the builtin table */
    jv val;                  /* N_LIT */
    jj_node *a, *b, *c, *d;  /* children; meaning per kind (see jinja_parse.c) */
    jj_nodes l1, l2, l3;     /* lists: args, kwargs, bodies, targets ... */
};

/* ---- context ---- */
typedef struct jj_ctx {
    jmp_buf jb;
    char *err; size_t err_len;
    jj_chunk *arena; size_t mem_used, mem_cap;
    size_t max_output; uint64_t steps, max_steps; int depth, max_depth;
    /* lexer state */
    const char *src; size_t src_n;
    jj_tok *toks; size_t ntok, captok, tpos;
    size_t line_pos; int line_cur;
    /* evaluation */
    jj_buf *out;           /* where output goes now (macros and set-blocks swap it) */
    jj_scope *globals;
    int loop_ctl;          /* 1 = break, 2 = continue pending */
} jj_ctx;

_Noreturn void jj_fail(jj_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void *jj_alloc(jj_ctx *c, size_t n);
char *jj_strndup(jj_ctx *c, const char *p, size_t n);
void jj_step(jj_ctx *c);
void jj_buf_put(jj_ctx *c, jj_buf *b, const char *p, size_t n);
void jj_buf_putc(jj_ctx *c, jj_buf *b, char ch);
void jj_buf_printf(jj_ctx *c, jj_buf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* lexer / parser */
void jj_lex(jj_ctx *c);
jj_node *jj_parse(jj_ctx *c);
int jj_filter_index(const char *name, size_t n); /* -1 if no such filter */
int jj_test_index(const char *name, size_t n);   /* -1 if no such test */

/* values */
static inline jv jv_undef(const char *why) { jv v = {0}; v.kind = JV_UNDEF; v.u.s.p = why; v.u.s.n = why ? strlen(why) : 0; return v; }
static inline jv jv_none(void) { jv v = {0}; v.kind = JV_NONE; return v; }
static inline jv jv_bool(bool b) { jv v = {0}; v.kind = JV_BOOL; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.kind = JV_INT; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.kind = JV_FLOAT; v.u.f = f; return v; }
static inline jv jv_str(const char *p, size_t n) { jv v = {0}; v.kind = JV_STR; v.u.s.p = p; v.u.s.n = n; return v; }
jv jv_list_new(jj_ctx *c, size_t cap);
jv jv_dict_new(jj_ctx *c, size_t cap);
void jj_list_push(jj_ctx *c, jj_list *l, jv x);
void jj_dict_set(jj_ctx *c, jj_dict *d, jv k, jv x);   /* replaces an equal key */
bool jj_dict_get(const jj_dict *d, jv k, jv *out);
bool jj_dict_get_s(const jj_dict *d, const char *k, size_t kn, jv *out);
jv jv_func(jj_ctx *c, int id, jv self);
jv jv_from_json(jj_ctx *c, const json_t *j);
const char *jv_type_name(jv v);        /* Python type name: 'str', 'dict', ... */
bool jv_truthy(jj_ctx *c, jv v);
bool jv_eq(jv a, jv b);
int jv_cmp(jj_ctx *c, jv a, jv b);     /* Python <, ==, > for orderable values; else error */
void jv_check_defined(jj_ctx *c, jv v);
void jv_to_str(jj_ctx *c, jj_buf *b, jv v);   /* Python str() */
void jv_repr(jj_ctx *c, jj_buf *b, jv v);     /* Python repr() */
jv jv_str_of(jj_ctx *c, jv v);                /* str() as a value */
void jj_float_repr(char *out, size_t cap, double f);
typedef struct jj_json_opts { const char *indent; bool has_indent; const char *item_sep, *key_sep; bool sort_keys, ensure_ascii; } jj_json_opts;
void jv_to_json(jj_ctx *c, jj_buf *b, jv v, const jj_json_opts *o, int level);
size_t jj_utf8_len(const char *p, size_t n);             /* code points */
size_t jj_utf8_offset(const char *p, size_t n, size_t cp); /* byte offset of code point cp */
bool jj_is_space_at(const char *p, size_t n, size_t i, size_t *clen); /* Python str.isspace */
jv jj_iterable_to_list(jj_ctx *c, jv v, const char *what); /* str -> chars, dict -> keys */

/* builtins (jinja_builtin.c: globals, attributes, methods; jinja_filters.c: filters, tests) */
enum { JF_RANGE = 1, JF_NAMESPACE, JF_DICT, JF_RAISE, JF_STRFTIME,
       JF_METHOD /* str/dict/list methods: id = JF_METHOD + method index */ };
jv jj_global(jj_ctx *c, const char *name, size_t n, bool *found);
jv jj_get_attr(jj_ctx *c, jv obj, const char *name, size_t n);
jv jj_get_item(jj_ctx *c, jv obj, jv key);
jv jj_call_builtin(jj_ctx *c, const jj_func *fn, jv *args, int nargs, const char **kwn, const size_t *kwnl, jv *kwv, int nkw, int line);
jv jj_apply_filter(jj_ctx *c, int idx, jv v, jv *args, int nargs, const char **kwn, const size_t *kwnl, jv *kwv, int nkw);
bool jj_apply_test(jj_ctx *c, int idx, jv v, jv *args, int nargs);
jv jj_slice(jj_ctx *c, jv obj, jv start, jv stop, jv step);

/* argument binding for filters, globals and methods: positional then keyword into out[];
 * a parameter not passed is an undefined with JVF_MISSING; unknown or extra arguments fail */
typedef struct jj_args { jv *a; int na; const char **kn; const size_t *knl; jv *kv; int nk; } jj_args;
void jj_bind(jj_ctx *c, const char *fname, const jj_args *in, const char *const *names, int nnames, jv *out);
static inline bool jj_given(jv v) { return !(v.kind == JV_UNDEF && (v.flags & JVF_MISSING)); }
jv jj_case(jj_ctx *c, jv s, int mode);          /* 0 lower, 1 upper, 2 capitalize, 3 jinja title, 4 str.title */
jv jj_strip(jj_ctx *c, jv s, jv chars, int mode); /* 1 left, 2 right, 3 both */
jv jj_replace(jj_ctx *c, jv s, jv old, jv new_, int64_t count);
jv jj_splitlines(jj_ctx *c, const char *p, size_t n);
jv jj_attr_path(jj_ctx *c, jv item, jv path);  /* "a.b.0" as jinja2's attrgetter */

/* operators, shared with filters (sum, odd/even tests) */
jv jj_binary(jj_ctx *c, jj_op op, jv a, jv b);

#endif
