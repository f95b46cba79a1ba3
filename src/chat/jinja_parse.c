/* Jinja parser: tokens -> tree, with jinja2's grammar and operator precedence
 * (condexpr < or < and < not < compare < +,- < ~ < *,/,//,% < ** < unary < postfix/filter).
 * Unknown filters, tests and tags are errors at parse time, as in jinja2.
 *
 * Node fields per kind:
 *   N_BODY l1=statements        N_TEXT val        N_OUTPUT a=expr
 *   N_IF l1=conditions l2=bodies a=else-body     N_FOR l1=targets a=iter b=if-cond c=body d=else
 *   N_SET l1=targets a=value    N_SET_BLOCK l1=target a=body l2=filters
 *   N_MACRO name l1=params l2=defaults(NULL = none) a=body
 *   N_CALL_BLOCK a=call b=caller macro           N_FILTER_BLOCK l1=filters a=body
 *   N_WITH l1=targets l2=values a=body
 *   N_ATTR a.name   N_ITEM a[b]   N_SLICE a[b:c:d]   N_CALL a(l1, l2=N_KW)   N_FILTER a|name(l1,l2)
 *   N_TEST a is [not] name(l1)   N_UNARY op a   N_BINARY a op b   N_COMPARE a, l1 operands, l2 ops
 *   N_COND b if a else c   N_LIST/N_TUPLE l1   N_DICT l1 keys l2 values   N_NSREF name.val */
#include "chat/jinja_int.h"

static jj_node *parse_expr(jj_ctx *c);
static jj_node *parse_body(jj_ctx *c, const char *const *ends, int nends);
static jj_node *parse_tuple_expr(jj_ctx *c, bool with_condexpr);

static jj_tok *peek(jj_ctx *c) { return &c->toks[c->tpos]; }
static jj_tok *peek2(jj_ctx *c) { return &c->toks[c->tpos + (c->tpos + 1 < c->ntok)]; }
static jj_tok *next(jj_ctx *c) { jj_tok *t = &c->toks[c->tpos]; if (c->tpos + 1 < c->ntok) c->tpos++; return t; }

static bool is_op(const jj_tok *t, jj_op op) { return t->kind == TK_OP && t->op == op; }
static bool is_name(const jj_tok *t, const char *s) { return t->kind == TK_NAME && t->n == strlen(s) && memcmp(t->p, s, t->n) == 0; }

static const char *tok_desc(const jj_tok *t) {
    switch (t->kind) {
    case TK_EOF: return "end of template";
    case TK_DATA: return "template data";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_NAME: return "name";
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    case TK_OP: return t->p;
    }
    return "token";
}

static void expect_op(jj_ctx *c, jj_op op, const char *what) {
    jj_tok *t = next(c);
    if (!is_op(t, op)) jj_fail(c, "line %d: expected '%s', got %s", t->line, what, tok_desc(t));
}

static void expect_block_end(jj_ctx *c, const char *tag) {
    jj_tok *t = next(c);
    if (t->kind != TK_BLOCK_END) jj_fail(c, "line %d: expected end of '%s' tag ('%%}'), got %s", t->line, tag, tok_desc(t));
}

static jj_tok *expect_name(jj_ctx *c, const char *what) {
    jj_tok *t = next(c);
    if (t->kind != TK_NAME) jj_fail(c, "line %d: expected %s, got %s", t->line, what, tok_desc(t));
    return t;
}

static jj_node *mk(jj_ctx *c, jj_node_kind k, int line) {
    jj_node *n = jj_alloc(c, sizeof *n);
    memset(n, 0, sizeof *n);
    n->kind = k;
    n->line = line;
    return n;
}

static void add(jj_ctx *c, jj_nodes *l, jj_node *n) {
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 4;
        jj_node **nv = jj_alloc(c, (size_t)nc * sizeof *nv);
        if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof *nv);
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = n;
}

static void enter(jj_ctx *c) {
    if (++c->depth > c->max_depth) jj_fail(c, "line %d: template nests too deeply (limit %d)", peek(c)->line, c->max_depth);
}
static void leave(jj_ctx *c) { c->depth--; }

/* ---- expressions ---- */

static void parse_call_args(jj_ctx *c, jj_node *n) {
    /* after '(' */
    while (!is_op(peek(c), OP_RPAREN)) {
        if (n->l1.n || n->l2.n) expect_op(c, OP_COMMA, ",");
        if (is_op(peek(c), OP_RPAREN)) break;
        if (is_op(peek(c), OP_MUL) || is_op(peek(c), OP_POW))
            jj_fail(c, "line %d: *args / **kwargs in calls are not supported", peek(c)->line);
        if (peek(c)->kind == TK_NAME && is_op(peek2(c), OP_ASSIGN)) {
            jj_tok *t = next(c);
            next(c);
            jj_node *kw = mk(c, N_KW, t->line);
            kw->name = t->p; kw->name_n = t->n;
            kw->a = parse_expr(c);
            add(c, &n->l2, kw);
        } else {
            if (n->l2.n) jj_fail(c, "line %d: positional argument after keyword argument", peek(c)->line);
            add(c, &n->l1, parse_expr(c));
        }
    }
    next(c);
}

static jj_node *parse_primary(jj_ctx *c);
static jj_node *parse_postfix(jj_ctx *c, jj_node *n);

static jj_node *parse_subscript(jj_ctx *c, jj_node *obj, int line) {
    /* after '[' : expr | [a]:[b][:[c]] */
    jj_node *parts[3] = {0};
    int np = 0;
    bool is_slice = false;
    for (;;) {
        if (is_op(peek(c), OP_COLON)) { next(c); is_slice = true; np++; if (np > 2) jj_fail(c, "line %d: bad slice", line); continue; }
        if (is_op(peek(c), OP_RBRACKET)) break;
        if (parts[np]) jj_fail(c, "line %d: bad subscript", line);
        parts[np] = parse_expr(c);
        if (is_op(peek(c), OP_COMMA)) jj_fail(c, "line %d: tuple subscripts are not supported", line);
    }
    next(c);
    if (!is_slice) {
        if (!parts[0]) jj_fail(c, "line %d: empty subscript", line);
        jj_node *n = mk(c, N_ITEM, line);
        n->a = obj; n->b = parts[0];
        return n;
    }
    jj_node *n = mk(c, N_SLICE, line);
    n->a = obj; n->b = parts[0]; n->c = parts[1]; n->d = parts[2];
    return n;
}

static jj_node *parse_postfix(jj_ctx *c, jj_node *n) {
    for (;;) {
        jj_tok *t = peek(c);
        if (is_op(t, OP_DOT)) {
            next(c);
            jj_tok *a = next(c);
            if (a->kind == TK_NAME) {
                jj_node *m = mk(c, N_ATTR, a->line);
                m->a = n; m->name = a->p; m->name_n = a->n;
                n = m;
            } else if (a->kind == TK_INT) {
                jj_node *m = mk(c, N_ITEM, a->line), *k = mk(c, N_LIT, a->line);
                k->val = jv_int(a->i);
                m->a = n; m->b = k;
                n = m;
            } else jj_fail(c, "line %d: expected attribute name after '.', got %s", a->line, tok_desc(a));
        } else if (is_op(t, OP_LBRACKET)) {
            next(c);
            n = parse_subscript(c, n, t->line);
        } else if (is_op(t, OP_LPAREN)) {
            next(c);
            jj_node *m = mk(c, N_CALL, t->line);
            m->a = n;
            parse_call_args(c, m);
            n = m;
        } else return n;
    }
}

static jj_node *parse_filter(jj_ctx *c, jj_node *input) {
    /* after '|' */
    jj_tok *t = expect_name(c, "filter name");
    jj_node *n = mk(c, N_FILTER, t->line);
    n->a = input;
    n->name = t->p; n->name_n = t->n;
    n->builtin = jj_filter_index(t->p, t->n);
    if (n->builtin < 0) jj_fail(c, "line %d: no filter named '%.*s'", t->line, (int)t->n, t->p);
    if (is_op(peek(c), OP_LPAREN)) { next(c); parse_call_args(c, n); }
    return n;
}

static jj_node *parse_filter_expr(jj_ctx *c, jj_node *n) {
    for (;;) {
        jj_tok *t = peek(c);
        if (is_op(t, OP_PIPE)) {
            next(c);
            n = parse_filter(c, n);
        } else if (is_name(t, "is")) {
            next(c);
            jj_node *m = mk(c, N_TEST, t->line);
            if (is_name(peek(c), "not")) { next(c); m->neg = true; }
            jj_tok *nt = next(c);
            /* `is none`, `is true` etc. arrive as names; also accept the literal spellings */
            if (nt->kind != TK_NAME) jj_fail(c, "line %d: expected test name after 'is', got %s", nt->line, tok_desc(nt));
            m->name = nt->p; m->name_n = nt->n;
            m->builtin = jj_test_index(nt->p, nt->n);
            if (m->builtin < 0) jj_fail(c, "line %d: no test named '%.*s'", nt->line, (int)nt->n, nt->p);
            m->a = n;
            jj_tok *p = peek(c);
            if (is_op(p, OP_LPAREN)) {
                next(c);
                parse_call_args(c, m);
                if (m->l2.n) jj_fail(c, "line %d: keyword arguments to tests are not supported", p->line);
            } else if ((p->kind == TK_NAME && !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and") &&
                        !is_name(p, "if") && !is_name(p, "is") && !is_name(p, "in") && !is_name(p, "not")) ||
                       p->kind == TK_STRING || p->kind == TK_INT || p->kind == TK_FLOAT ||
                       is_op(p, OP_LBRACKET) || is_op(p, OP_LBRACE)) {
                jj_node *arg = parse_postfix(c, parse_primary(c));
                add(c, &m->l1, arg);
            }
            n = m;
        } else if (is_op(t, OP_LPAREN)) {
            next(c);
            jj_node *m = mk(c, N_CALL, t->line);
            m->a = n;
            parse_call_args(c, m);
            n = m;
        } else return n;
    }
}

static jj_node *parse_unary(jj_ctx *c, bool with_filter) {
    enter(c);
    jj_tok *t = peek(c);
    jj_node *n;
    if (is_op(t, OP_SUB) || is_op(t, OP_ADD)) {
        next(c);
        n = mk(c, N_UNARY, t->line);
        n->op = t->op == OP_SUB ? OP_NEG : OP_POS;
        n->a = parse_unary(c, false);
    } else {
        n = parse_primary(c);
    }
    n = parse_postfix(c, n);
    if (with_filter) n = parse_filter_expr(c, n);
    leave(c);
    return n;
}

static jj_node *parse_primary(jj_ctx *c) {
    enter(c);
    jj_tok *t = next(c);
    jj_node *n;
    if (t->kind == TK_NAME) {
        if (is_name(t, "true") || is_name(t, "True")) { n = mk(c, N_LIT, t->line); n->val = jv_bool(true); }
        else if (is_name(t, "false") || is_name(t, "False")) { n = mk(c, N_LIT, t->line); n->val = jv_bool(false); }
        else if (is_name(t, "none") || is_name(t, "None")) { n = mk(c, N_LIT, t->line); n->val = jv_none(); }
        else { n = mk(c, N_NAME, t->line); n->name = t->p; n->name_n = t->n; }
    } else if (t->kind == TK_STRING) {
        /* adjacent string literals concatenate */
        jj_buf b = {0};
        jj_buf_put(c, &b, t->p, t->n);
        while (peek(c)->kind == TK_STRING) { jj_tok *u = next(c); jj_buf_put(c, &b, u->p, u->n); }
        n = mk(c, N_LIT, t->line);
        n->val = jv_str(b.p ? b.p : "", b.n);
    } else if (t->kind == TK_INT) {
        n = mk(c, N_LIT, t->line); n->val = jv_int(t->i);
    } else if (t->kind == TK_FLOAT) {
        n = mk(c, N_LIT, t->line); n->val = jv_float(t->f);
    } else if (is_op(t, OP_LPAREN)) {
        if (is_op(peek(c), OP_RPAREN)) { next(c); n = mk(c, N_TUPLE, t->line); }
        else {
            n = parse_tuple_expr(c, true);
            expect_op(c, OP_RPAREN, ")");
        }
    } else if (is_op(t, OP_LBRACKET)) {
        n = mk(c, N_LIST, t->line);
        while (!is_op(peek(c), OP_RBRACKET)) {
            if (n->l1.n) expect_op(c, OP_COMMA, ",");
            if (is_op(peek(c), OP_RBRACKET)) break;
            add(c, &n->l1, parse_expr(c));
        }
        next(c);
    } else if (is_op(t, OP_LBRACE)) {
        n = mk(c, N_DICT, t->line);
        while (!is_op(peek(c), OP_RBRACE)) {
            if (n->l1.n) expect_op(c, OP_COMMA, ",");
            if (is_op(peek(c), OP_RBRACE)) break;
            add(c, &n->l1, parse_expr(c));
            expect_op(c, OP_COLON, ":");
            add(c, &n->l2, parse_expr(c));
        }
        next(c);
    } else {
        jj_fail(c, "line %d: unexpected %s in expression", t->line, tok_desc(t));
    }
    leave(c);
    return n;
}

static jj_node *binary(jj_ctx *c, jj_op op, jj_node *a, jj_node *b, int line) {
    jj_node *n = mk(c, N_BINARY, line);
    n->op = op; n->a = a; n->b = b;
    return n;
}

static jj_node *parse_pow(jj_ctx *c) {
    jj_node *n = parse_unary(c, true);
    while (is_op(peek(c), OP_POW)) { jj_tok *t = next(c); n = binary(c, OP_POW, n, parse_unary(c, true), t->line); }
    return n;
}

static jj_node *parse_math2(jj_ctx *c) {
    jj_node *n = parse_pow(c);
    for (;;) {
        jj_tok *t = peek(c);
        if (!(is_op(t, OP_MUL) || is_op(t, OP_DIV) || is_op(t, OP_FLOORDIV) || is_op(t, OP_MOD))) return n;
        next(c);
        n = binary(c, t->op, n, parse_pow(c), t->line);
    }
}

static jj_node *parse_concat(jj_ctx *c) {
    jj_node *n = parse_math2(c);
    while (is_op(peek(c), OP_TILDE)) { jj_tok *t = next(c); n = binary(c, OP_TILDE, n, parse_math2(c), t->line); }
    return n;
}

static jj_node *parse_math1(jj_ctx *c) {
    jj_node *n = parse_concat(c);
    for (;;) {
        jj_tok *t = peek(c);
        if (!(is_op(t, OP_ADD) || is_op(t, OP_SUB))) return n;
        next(c);
        n = binary(c, t->op, n, parse_concat(c), t->line);
    }
}

static jj_node *parse_compare(jj_ctx *c) {
    jj_node *first = parse_math1(c), *n = NULL;
    for (;;) {
        jj_tok *t = peek(c);
        jj_op op = OP_NONE;
        if (t->kind == TK_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT || t->op == OP_GT || t->op == OP_LE || t->op == OP_GE)) op = t->op;
        else if (is_name(t, "in")) op = OP_IN;
        else if (is_name(t, "not") && is_name(peek2(c), "in")) { next(c); op = OP_NOTIN; }
        if (op == OP_NONE) return n ? n : first;
        next(c);
        if (!n) { n = mk(c, N_COMPARE, t->line); n->a = first; }
        jj_node *o = mk(c, N_LIT, t->line);
        o->op = op;
        add(c, &n->l2, o);
        add(c, &n->l1, parse_math1(c));
    }
}

static jj_node *parse_not(jj_ctx *c) {
    if (is_name(peek(c), "not")) {
        jj_tok *t = next(c);
        enter(c);
        jj_node *n = mk(c, N_UNARY, t->line);
        n->op = OP_NOT;
        n->a = parse_not(c);
        leave(c);
        return n;
    }
    return parse_compare(c);
}

static jj_node *parse_and(jj_ctx *c) {
    jj_node *n = parse_not(c);
    while (is_name(peek(c), "and")) { jj_tok *t = next(c); n = binary(c, OP_AND, n, parse_not(c), t->line); }
    return n;
}

static jj_node *parse_or(jj_ctx *c) {
    jj_node *n = parse_and(c);
    while (is_name(peek(c), "or")) { jj_tok *t = next(c); n = binary(c, OP_OR, n, parse_and(c), t->line); }
    return n;
}

static jj_node *parse_condexpr(jj_ctx *c) {
    enter(c);
    jj_node *n = parse_or(c);
    while (is_name(peek(c), "if")) {
        jj_tok *t = next(c);
        jj_node *m = mk(c, N_COND, t->line);
        m->b = n;
        m->a = parse_or(c);
        if (is_name(peek(c), "else")) { next(c); m->c = parse_condexpr(c); }
        n = m;
    }
    leave(c);
    return n;
}

static jj_node *parse_expr(jj_ctx *c) { return parse_condexpr(c); }

/* expr or a, b, c (a tuple) */
static jj_node *parse_tuple_expr(jj_ctx *c, bool with_condexpr) {
    int line = peek(c)->line;
    jj_node *first = with_condexpr ? parse_expr(c) : parse_or(c);
    if (!is_op(peek(c), OP_COMMA)) return first;
    jj_node *t = mk(c, N_TUPLE, line);
    add(c, &t->l1, first);
    while (is_op(peek(c), OP_COMMA)) {
        next(c);
        jj_tok *p = peek(c);
        if (p->kind == TK_BLOCK_END || p->kind == TK_VAR_END || is_op(p, OP_RPAREN)) break;
        add(c, &t->l1, with_condexpr ? parse_expr(c) : parse_or(c));
    }
    return t;
}

/* ---- statements ---- */

static void parse_targets(jj_ctx *c, jj_nodes *out, bool allow_ns) {
    bool paren = false;
    if (is_op(peek(c), OP_LPAREN)) { next(c); paren = true; }
    for (;;) {
        jj_tok *t = expect_name(c, "assignment target");
        if (allow_ns && is_op(peek(c), OP_DOT)) {
            next(c);
            jj_tok *a = expect_name(c, "attribute name");
            jj_node *n = mk(c, N_NSREF, t->line);
            n->name = t->p; n->name_n = t->n;
            n->val = jv_str(a->p, a->n);
            add(c, out, n);
        } else {
            jj_node *n = mk(c, N_NAME, t->line);
            n->name = t->p; n->name_n = t->n;
            add(c, out, n);
        }
        if (!is_op(peek(c), OP_COMMA)) break;
        next(c);
    }
    if (paren) expect_op(c, OP_RPAREN, ")");
}

static void parse_macro_sig(jj_ctx *c, jj_node *m) {
    /* after '(' */
    while (!is_op(peek(c), OP_RPAREN)) {
        if (m->l1.n) expect_op(c, OP_COMMA, ",");
        jj_tok *t = expect_name(c, "parameter name");
        jj_node *p = mk(c, N_NAME, t->line);
        p->name = t->p; p->name_n = t->n;
        add(c, &m->l1, p);
        if (is_op(peek(c), OP_ASSIGN)) { next(c); add(c, &m->l2, parse_expr(c)); }
        else {
            for (int i = 0; i < m->l2.n; i++)
                if (m->l2.v[i]) jj_fail(c, "line %d: non-default parameter after default parameter", t->line);
            add(c, &m->l2, NULL);
        }
    }
    next(c);
}

static jj_node *parse_filter_chain(jj_ctx *c, jj_nodes *out) {
    do {
        jj_node *f = parse_filter(c, NULL);
        add(c, out, f);
    } while (is_op(peek(c), OP_PIPE) && (next(c), true));
    return NULL;
}

static jj_node *parse_statement(jj_ctx *c) {
    jj_tok *t = expect_name(c, "tag name");
    int line = t->line;
    enter(c);
    jj_node *n = NULL;
    if (is_name(t, "if")) {
        n = mk(c, N_IF, line);
        add(c, &n->l1, parse_tuple_expr(c, true));
        expect_block_end(c, "if");
        for (;;) {
            static const char *const ends[] = {"elif", "else", "endif"};
            add(c, &n->l2, parse_body(c, ends, 3));
            jj_tok *e = next(c);
            if (is_name(e, "elif")) { add(c, &n->l1, parse_tuple_expr(c, true)); expect_block_end(c, "elif"); continue; }
            if (is_name(e, "else")) {
                expect_block_end(c, "else");
                static const char *const ends2[] = {"endif"};
                n->a = parse_body(c, ends2, 1);
                next(c);
            }
            expect_block_end(c, "endif");
            break;
        }
    } else if (is_name(t, "for")) {
        n = mk(c, N_FOR, line);
        parse_targets(c, &n->l1, false);
        if (!is_name(next(c), "in")) jj_fail(c, "line %d: expected 'in' in for loop", line);
        n->a = parse_tuple_expr(c, false);
        if (is_name(peek(c), "if")) { next(c); n->b = parse_tuple_expr(c, true); }
        if (is_name(peek(c), "recursive")) jj_fail(c, "line %d: recursive for loops are not supported", line);
        expect_block_end(c, "for");
        static const char *const ends[] = {"endfor", "else"};
        n->c = parse_body(c, ends, 2);
        if (is_name(next(c), "else")) {
            expect_block_end(c, "else");
            static const char *const ends2[] = {"endfor"};
            n->d = parse_body(c, ends2, 1);
            next(c);
        }
        expect_block_end(c, "endfor");
    } else if (is_name(t, "set")) {
        jj_nodes targets = {0};
        parse_targets(c, &targets, true);
        if (is_op(peek(c), OP_ASSIGN)) {
            next(c);
            n = mk(c, N_SET, line);
            n->l1 = targets;
            n->a = parse_tuple_expr(c, true);
            expect_block_end(c, "set");
        } else {
            n = mk(c, N_SET_BLOCK, line);
            n->l1 = targets;
            if (targets.n != 1) jj_fail(c, "line %d: block set takes one target", line);
            if (is_op(peek(c), OP_PIPE)) { next(c); parse_filter_chain(c, &n->l2); }
            expect_block_end(c, "set");
            static const char *const ends[] = {"endset"};
            n->a = parse_body(c, ends, 1);
            next(c);
            expect_block_end(c, "endset");
        }
    } else if (is_name(t, "macro")) {
        n = mk(c, N_MACRO, line);
        jj_tok *nm = expect_name(c, "macro name");
        n->name = nm->p; n->name_n = nm->n;
        expect_op(c, OP_LPAREN, "(");
        parse_macro_sig(c, n);
        expect_block_end(c, "macro");
        static const char *const ends[] = {"endmacro"};
        n->a = parse_body(c, ends, 1);
        next(c);
        if (peek(c)->kind == TK_NAME) next(c); /* {% endmacro name %} */
        expect_block_end(c, "endmacro");
    } else if (is_name(t, "call")) {
        n = mk(c, N_CALL_BLOCK, line);
        jj_node *caller = mk(c, N_MACRO, line);
        caller->name = "caller"; caller->name_n = 6;
        if (is_op(peek(c), OP_LPAREN)) { next(c); parse_macro_sig(c, caller); }
        n->a = parse_expr(c);
        if (n->a->kind != N_CALL) jj_fail(c, "line %d: {%% call %%} needs a macro call", line);
        expect_block_end(c, "call");
        static const char *const ends[] = {"endcall"};
        caller->a = parse_body(c, ends, 1);
        next(c);
        expect_block_end(c, "endcall");
        n->b = caller;
    } else if (is_name(t, "filter")) {
        n = mk(c, N_FILTER_BLOCK, line);
        parse_filter_chain(c, &n->l1);
        expect_block_end(c, "filter");
        static const char *const ends[] = {"endfilter"};
        n->a = parse_body(c, ends, 1);
        next(c);
        expect_block_end(c, "endfilter");
    } else if (is_name(t, "with")) {
        n = mk(c, N_WITH, line);
        while (peek(c)->kind != TK_BLOCK_END) {
            if (n->l1.n) expect_op(c, OP_COMMA, ",");
            parse_targets(c, &n->l1, false);
            expect_op(c, OP_ASSIGN, "=");
            add(c, &n->l2, parse_expr(c));
            if (n->l1.n != n->l2.n) jj_fail(c, "line %d: with: one value per target", line);
        }
        expect_block_end(c, "with");
        static const char *const ends[] = {"endwith"};
        n->a = parse_body(c, ends, 1);
        next(c);
        expect_block_end(c, "endwith");
    } else if (is_name(t, "generation")) {
        /* transformers' AssistantTracker tag: renders its body unchanged */
        expect_block_end(c, "generation");
        static const char *const ends[] = {"endgeneration"};
        n = parse_body(c, ends, 1);
        next(c);
        expect_block_end(c, "endgeneration");
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        n = mk(c, is_name(t, "break") ? N_BREAK : N_CONTINUE, line);
        expect_block_end(c, is_name(t, "break") ? "break" : "continue");
    } else {
        jj_fail(c, "line %d: unsupported or unknown tag '%.*s'", line, (int)t->n, t->p);
    }
    leave(c);
    return n;
}

static jj_node *parse_body(jj_ctx *c, const char *const *ends, int nends) {
    jj_node *body = mk(c, N_BODY, peek(c)->line);
    for (;;) {
        jj_tok *t = peek(c);
        if (t->kind == TK_EOF) {
            if (nends) {
                const char *want = ends[0];
                for (int i = 0; i < nends; i++) if (strncmp(ends[i], "end", 3) == 0) want = ends[i];
                jj_fail(c, "line %d: unexpected end of template, expected '%s'", t->line, want);
            }
            return body;
        }
        if (t->kind == TK_DATA) {
            next(c);
            jj_node *n = mk(c, N_TEXT, t->line);
            n->val = jv_str(t->p, t->n);
            add(c, &body->l1, n);
        } else if (t->kind == TK_VAR_BEGIN) {
            next(c);
            jj_node *n = mk(c, N_OUTPUT, t->line);
            n->a = parse_tuple_expr(c, true);
            jj_tok *e = next(c);
            if (e->kind != TK_VAR_END) jj_fail(c, "line %d: expected '}}', got %s", e->line, tok_desc(e));
            add(c, &body->l1, n);
        } else if (t->kind == TK_BLOCK_BEGIN) {
            jj_tok *nm = peek2(c);
            for (int i = 0; i < nends; i++)
                if (is_name(nm, ends[i])) { next(c); return body; } /* leaves the end name as the next token */
            if (nm->kind == TK_NAME && nm->n > 3 && (memcmp(nm->p, "end", 3) == 0 || is_name(nm, "elif") || is_name(nm, "else")))
                jj_fail(c, "line %d: unexpected '%.*s'%s%s%s", nm->line, (int)nm->n, nm->p,
                        nends ? " (expected '" : "", nends ? ends[nends - 1] : "", nends ? "')" : "");
            if (is_name(nm, "else") || is_name(nm, "elif"))
                jj_fail(c, "line %d: unexpected '%.*s'", nm->line, (int)nm->n, nm->p);
            next(c);
            add(c, &body->l1, parse_statement(c));
        } else {
            jj_fail(c, "line %d: unexpected %s", t->line, tok_desc(t));
        }
    }
}

jj_node *jj_parse(jj_ctx *c) {
    c->tpos = 0;
    c->depth = 0;
    return parse_body(c, NULL, 0);
}
