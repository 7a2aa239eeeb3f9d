/* Template parser: tokens -> AST, a recursive-descent port of Jinja2's grammar (operator
 * precedence, tests and filters, tuples, slices, call arguments, the statements chat templates
 * use: for/if/set/macro/call/filter/with/print/break/continue, and HF's {% generation %}).
 * Everything the AST holds lives in the program's pool. */
#include <stdlib.h>
#include <string.h>

#include "template/template_internal.h"

/* Expression and statement nesting allowed in a template (bounds the parser's recursion). */
#define PARSE_MAX_DEPTH 128
#define MAX_OPEN_TAGS 64

/* ================================================================================ pool */

struct template_pool_chunk {
    struct template_pool_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

void *template_pool_alloc(struct template_pool *p, size_t size)
{
    size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    struct template_pool_chunk *c = p->head;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > 60000 ? size : 60000;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = p->head;
        p->head = c;
    }
    void *r = (char *)c->data + c->used;
    c->used += size;
    memset(r, 0, size);
    return r;
}

void template_pool_free(struct template_pool *p)
{
    struct template_pool_chunk *c = p->head;
    while (c) {
        struct template_pool_chunk *n = c->next;
        free(c);
        c = n;
    }
    p->head = NULL;
}

/* ============================================================================== parser */

struct parser {
    const struct template_token *tok; /* [ntok] */
    size_t ntok;
    size_t i;
    struct template_program *prog;
    char *err;
    size_t errlen;
    enum hr_status st;
    int depth;
    int loop_depth; /* for-loop bodies around (break/continue are valid) */
    struct {
        const char *name;
        uint32_t line;
    } open[MAX_OPEN_TAGS]; /* blocks being parsed, for error messages */
    int nopen;
};

struct nodevec {
    struct template_node **v;
    size_t n, cap;
};

static const struct template_token *cur(const struct parser *p)
{
    return &p->tok[p->i < p->ntok ? p->i : p->ntok - 1];
}

static const struct template_token *look(const struct parser *p)
{
    return &p->tok[p->i + 1 < p->ntok ? p->i + 1 : p->ntok - 1];
}

static const struct template_token *next(struct parser *p)
{
    const struct template_token *t = cur(p);
    if (p->i < p->ntok - 1)
        p->i++;
    return t;
}

static bool is_type(const struct parser *p, enum template_tok t)
{
    return cur(p)->type == t;
}

static bool tok_is_name(const struct template_token *t, const char *name)
{
    return t->type == TEMPLATE_TOK_NAME && t->len == strlen(name) && memcmp(t->s, name, t->len) == 0;
}

static bool is_name(const struct parser *p, const char *name)
{
    return tok_is_name(cur(p), name);
}

static bool fail_at(struct parser *p, const struct template_token *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool fail_at(struct parser *p, const struct template_token *t, const char *fmt, ...)
{
    if (p->st != HR_OK)
        return false;
    char msg[HR_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->st = HR_ERR_FORMAT;
    hr_err(p->err, p->errlen, HR_ERR_FORMAT, "line %u, column %u: %s", t->line, t->col, msg);
    return false;
}

static bool oom(struct parser *p)
{
    if (p->st == HR_OK)
        p->st = hr_err(p->err, p->errlen, HR_ERR_NOMEM, "out of memory parsing the template");
    return false;
}

/* Describes a token for messages: names by their text. */
static void describe(const struct template_token *t, char *buf, size_t n)
{
    if (t->type == TEMPLATE_TOK_NAME)
        snprintf(buf, n, "'%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s);
    else
        snprintf(buf, n, "%s", template_tok_name(t->type));
}

static bool expect(struct parser *p, enum template_tok type)
{
    if (is_type(p, type)) {
        next(p);
        return true;
    }
    char got[64];
    describe(cur(p), got, sizeof got);
    if (cur(p)->type == TEMPLATE_TOK_EOF)
        return fail_at(p, cur(p), "unexpected end of template, expected %s", template_tok_name(type));
    return fail_at(p, cur(p), "expected %s, got %s", template_tok_name(type), got);
}

static bool expect_name(struct parser *p, const char *name)
{
    if (is_name(p, name)) {
        next(p);
        return true;
    }
    char got[64];
    describe(cur(p), got, sizeof got);
    return fail_at(p, cur(p), "expected '%s', got %s", name, got);
}

static struct template_node *new_node(struct parser *p, enum template_node_kind kind,
                                      const struct template_token *at)
{
    struct template_node *n = template_pool_alloc(&p->prog->pool, sizeof *n);
    if (!n) {
        oom(p);
        return NULL;
    }
    n->kind = kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static bool copy_str(struct parser *p, struct template_str *dst, const char *s, size_t len)
{
    char *c = template_pool_alloc(&p->prog->pool, len + 1);
    if (!c)
        return oom(p);
    memcpy(c, s, len);
    c[len] = 0;
    dst->s = c;
    dst->len = len;
    return true;
}

static bool vec_push(struct parser *p, struct nodevec *v, struct template_node *n)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        struct template_node **a = template_pool_alloc(&p->prog->pool, cap * sizeof *a);
        if (!a)
            return oom(p);
        if (v->n)
            memcpy(a, v->v, v->n * sizeof *a);
        v->v = a;
        v->cap = cap;
    }
    v->v[v->n++] = n;
    return true;
}

static bool enter(struct parser *p)
{
    if (++p->depth > PARSE_MAX_DEPTH)
        return fail_at(p, cur(p), "template nested too deeply (limit %d)", PARSE_MAX_DEPTH);
    return true;
}

static struct template_node *parse_expression(struct parser *p, bool with_condexpr);
static struct template_node *parse_tuple(struct parser *p, bool simplified, bool with_condexpr,
                                         const char *extra_end, bool explicit_parens);
static struct template_node *parse_primary(struct parser *p);
static struct template_node *parse_postfix(struct parser *p, struct template_node *node);
static struct template_node *parse_unary(struct parser *p, bool with_filter);
static bool parse_body(struct parser *p, const char *const *ends, size_t nends, struct nodevec *out);

/* ========================================================================= expressions */

static bool parse_call_args(struct parser *p, struct template_args_node *args)
{
    const struct template_token *open = cur(p);
    if (!expect(p, TEMPLATE_TOK_LPAREN))
        return false;
    struct nodevec pos = {0}, kwval = {0};
    struct template_str *kwname = NULL;
    size_t kwcap = 0;
    bool require_comma = false;
    while (!is_type(p, TEMPLATE_TOK_RPAREN)) {
        if (require_comma) {
            if (!expect(p, TEMPLATE_TOK_COMMA))
                return false;
            if (is_type(p, TEMPLATE_TOK_RPAREN))
                break;
        }
        if (is_type(p, TEMPLATE_TOK_MUL)) {
            if (args->star || args->star2)
                return fail_at(p, open, "invalid syntax for function call expression");
            next(p);
            if (!(args->star = parse_expression(p, true)))
                return false;
        } else if (is_type(p, TEMPLATE_TOK_POW)) {
            if (args->star2)
                return fail_at(p, open, "invalid syntax for function call expression");
            next(p);
            if (!(args->star2 = parse_expression(p, true)))
                return false;
        } else if (is_type(p, TEMPLATE_TOK_NAME) && look(p)->type == TEMPLATE_TOK_ASSIGN) {
            if (args->star2)
                return fail_at(p, open, "invalid syntax for function call expression");
            const struct template_token *key = next(p);
            next(p);
            struct template_node *v = parse_expression(p, true);
            if (!v)
                return false;
            if (kwval.n == kwcap) {
                size_t cap = kwcap ? kwcap * 2 : 4;
                struct template_str *a = template_pool_alloc(&p->prog->pool, cap * sizeof *a);
                if (!a)
                    return oom(p);
                if (kwval.n)
                    memcpy(a, kwname, kwval.n * sizeof *a);
                kwname = a;
                kwcap = cap;
            }
            if (!copy_str(p, &kwname[kwval.n], key->s, key->len) || !vec_push(p, &kwval, v))
                return false;
        } else {
            if (args->star || args->star2 || kwval.n)
                return fail_at(p, cur(p), "positional argument follows keyword argument");
            struct template_node *v = parse_expression(p, true);
            if (!v || !vec_push(p, &pos, v))
                return false;
        }
        require_comma = true;
    }
    if (!expect(p, TEMPLATE_TOK_RPAREN))
        return false;
    args->pos = pos.v;
    args->npos = pos.n;
    args->kwname = kwname;
    args->kwval = kwval.v;
    args->nkw = kwval.n;
    return true;
}

static struct template_node *parse_call(struct parser *p, struct template_node *callee)
{
    struct template_node *n = new_node(p, TEMPLATE_N_CALL, cur(p));
    if (!n)
        return NULL;
    n->a = callee;
    return parse_call_args(p, &n->args) ? n : NULL;
}

/* A dotted name after '|' or 'is'. */
static bool parse_dotted_name(struct parser *p, struct template_str *out)
{
    if (!is_type(p, TEMPLATE_TOK_NAME)) {
        char got[64];
        describe(cur(p), got, sizeof got);
        return fail_at(p, cur(p), "expected a name, got %s", got);
    }
    const struct template_token *t = next(p);
    if (!is_type(p, TEMPLATE_TOK_DOT))
        return copy_str(p, out, t->s, t->len);
    struct template_buf b = {0};
    bool ok = template_buf_put(&b, t->s, t->len);
    while (ok && is_type(p, TEMPLATE_TOK_DOT)) {
        next(p);
        if (!is_type(p, TEMPLATE_TOK_NAME)) {
            template_buf_free(&b);
            return fail_at(p, cur(p), "expected a name after '.'");
        }
        const struct template_token *s = next(p);
        ok = template_buf_putc(&b, '.') && template_buf_put(&b, s->s, s->len);
    }
    ok = ok && copy_str(p, out, b.data, b.len);
    template_buf_free(&b);
    return ok ? true : oom(p);
}

static struct template_node *parse_filter(struct parser *p, struct template_node *node, bool start_inline)
{
    while (is_type(p, TEMPLATE_TOK_PIPE) || start_inline) {
        if (!start_inline)
            next(p);
        struct template_node *f = new_node(p, TEMPLATE_N_FILTER, cur(p));
        if (!f || !parse_dotted_name(p, &f->name))
            return NULL;
        if (is_type(p, TEMPLATE_TOK_LPAREN) && !parse_call_args(p, &f->args))
            return NULL;
        f->a = node;
        node = f;
        start_inline = false;
    }
    return node;
}

static struct template_node *parse_test(struct parser *p, struct template_node *node)
{
    const struct template_token *is = next(p);
    bool negated = false;
    if (is_name(p, "not")) {
        next(p);
        negated = true;
    }
    struct template_node *t = new_node(p, TEMPLATE_N_TEST, is);
    if (!t || !parse_dotted_name(p, &t->name))
        return NULL;
    t->a = node;
    enum template_tok ty = cur(p)->type;
    if (ty == TEMPLATE_TOK_LPAREN) {
        if (!parse_call_args(p, &t->args))
            return NULL;
    } else if ((ty == TEMPLATE_TOK_NAME || ty == TEMPLATE_TOK_STRING || ty == TEMPLATE_TOK_INT ||
                ty == TEMPLATE_TOK_FLOAT || ty == TEMPLATE_TOK_LBRACKET || ty == TEMPLATE_TOK_LBRACE) &&
               !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and")) {
        if (is_name(p, "is")) {
            fail_at(p, cur(p), "you cannot chain multiple tests with 'is'");
            return NULL;
        }
        struct template_node *arg = parse_primary(p);
        if (!arg || !(arg = parse_postfix(p, arg)))
            return NULL;
        struct template_node **a = template_pool_alloc(&p->prog->pool, sizeof *a);
        if (!a) {
            oom(p);
            return NULL;
        }
        a[0] = arg;
        t->args.pos = a;
        t->args.npos = 1;
    }
    if (!negated)
        return t;
    struct template_node *n = new_node(p, TEMPLATE_N_NOT, is);
    if (!n)
        return NULL;
    n->a = t;
    return n;
}

static struct template_node *make_const(struct parser *p, const struct template_token *at,
                                        struct template_value *v)
{
    if (!v) {
        oom(p);
        return NULL;
    }
    struct template_node *n = new_node(p, TEMPLATE_N_CONST, at);
    if (n)
        n->value = v;
    return n;
}

/* [start]:[stop][:[step]] or a plain expression inside brackets. */
static struct template_node *parse_subscribed(struct parser *p)
{
    const struct template_token *at = cur(p);
    struct template_node *args[3] = {NULL, NULL, NULL};
    if (is_type(p, TEMPLATE_TOK_COLON)) {
        next(p);
    } else {
        struct template_node *e = parse_expression(p, true);
        if (!e)
            return NULL;
        if (!is_type(p, TEMPLATE_TOK_COLON))
            return e;
        next(p);
        args[0] = e;
    }
    if (!is_type(p, TEMPLATE_TOK_COLON) && !is_type(p, TEMPLATE_TOK_RBRACKET) && !is_type(p, TEMPLATE_TOK_COMMA)) {
        if (!(args[1] = parse_expression(p, true)))
            return NULL;
    }
    if (is_type(p, TEMPLATE_TOK_COLON)) {
        next(p);
        if (!is_type(p, TEMPLATE_TOK_RBRACKET) && !is_type(p, TEMPLATE_TOK_COMMA))
            if (!(args[2] = parse_expression(p, true)))
                return NULL;
    }
    struct template_node *s = new_node(p, TEMPLATE_N_SLICE, at);
    if (!s)
        return NULL;
    s->a = args[0];
    s->b = args[1];
    s->c = args[2];
    return s;
}

static struct template_node *parse_subscript(struct parser *p, struct template_node *node)
{
    const struct template_token *op = next(p);
    if (op->type == TEMPLATE_TOK_DOT) {
        const struct template_token *attr = next(p);
        if (attr->type == TEMPLATE_TOK_NAME) {
            struct template_node *n = new_node(p, TEMPLATE_N_GETATTR, op);
            if (!n || !copy_str(p, &n->name, attr->s, attr->len))
                return NULL;
            n->a = node;
            return n;
        }
        if (attr->type != TEMPLATE_TOK_INT) {
            fail_at(p, attr, "expected a name or a number after '.'");
            return NULL;
        }
        struct template_node *k = make_const(p, attr, template_const_num(&p->prog->pool, false, attr->i, 0));
        struct template_node *n = k ? new_node(p, TEMPLATE_N_GETITEM, op) : NULL;
        if (!n)
            return NULL;
        n->a = node;
        n->b = k;
        return n;
    }
    /* '[' */
    struct nodevec args = {0};
    while (!is_type(p, TEMPLATE_TOK_RBRACKET)) {
        if (args.n && !expect(p, TEMPLATE_TOK_COMMA))
            return NULL;
        if (is_type(p, TEMPLATE_TOK_RBRACKET))
            break;
        struct template_node *a = parse_subscribed(p);
        if (!a || !vec_push(p, &args, a))
            return NULL;
    }
    if (!expect(p, TEMPLATE_TOK_RBRACKET))
        return NULL;
    struct template_node *n = new_node(p, TEMPLATE_N_GETITEM, op); /* x[] subscripts with () */
    if (!n)
        return NULL;
    n->a = node;
    if (args.n == 1) {
        n->b = args.v[0];
    } else {
        struct template_node *t = new_node(p, TEMPLATE_N_TUPLE, op);
        if (!t)
            return NULL;
        t->items = args.v;
        t->nitems = args.n;
        n->b = t;
    }
    return n;
}

static struct template_node *parse_postfix(struct parser *p, struct template_node *node)
{
    while (node) {
        if (is_type(p, TEMPLATE_TOK_DOT) || is_type(p, TEMPLATE_TOK_LBRACKET))
            node = parse_subscript(p, node);
        else if (is_type(p, TEMPLATE_TOK_LPAREN))
            node = parse_call(p, node);
        else
            break;
    }
    return node;
}

static struct template_node *parse_filter_expr(struct parser *p, struct template_node *node)
{
    while (node) {
        if (is_type(p, TEMPLATE_TOK_PIPE))
            node = parse_filter(p, node, false);
        else if (is_name(p, "is"))
            node = parse_test(p, node);
        else if (is_type(p, TEMPLATE_TOK_LPAREN))
            node = parse_call(p, node);
        else
            break;
    }
    return node;
}

static struct template_node *parse_list(struct parser *p)
{
    const struct template_token *at = next(p);
    struct nodevec items = {0};
    while (!is_type(p, TEMPLATE_TOK_RBRACKET)) {
        if (items.n && !expect(p, TEMPLATE_TOK_COMMA))
            return NULL;
        if (is_type(p, TEMPLATE_TOK_RBRACKET))
            break;
        struct template_node *e = parse_expression(p, true);
        if (!e || !vec_push(p, &items, e))
            return NULL;
    }
    if (!expect(p, TEMPLATE_TOK_RBRACKET))
        return NULL;
    struct template_node *n = new_node(p, TEMPLATE_N_LIST, at);
    if (n) {
        n->items = items.v;
        n->nitems = items.n;
    }
    return n;
}

static struct template_node *parse_dict(struct parser *p)
{
    const struct template_token *at = next(p);
    struct nodevec keys = {0}, vals = {0};
    while (!is_type(p, TEMPLATE_TOK_RBRACE)) {
        if (keys.n && !expect(p, TEMPLATE_TOK_COMMA))
            return NULL;
        if (is_type(p, TEMPLATE_TOK_RBRACE))
            break;
        struct template_node *k = parse_expression(p, true);
        if (!k || !expect(p, TEMPLATE_TOK_COLON))
            return NULL;
        struct template_node *v = parse_expression(p, true);
        if (!v || !vec_push(p, &keys, k) || !vec_push(p, &vals, v))
            return NULL;
    }
    if (!expect(p, TEMPLATE_TOK_RBRACE))
        return NULL;
    struct template_node *n = new_node(p, TEMPLATE_N_DICT, at);
    if (n) {
        n->items = keys.v;
        n->items2 = vals.v;
        n->nitems = keys.n;
    }
    return n;
}

static struct template_node *parse_primary(struct parser *p)
{
    const struct template_token *t = cur(p);
    struct template_pool *pool = &p->prog->pool;
    switch (t->type) {
    case TEMPLATE_TOK_NAME: {
        next(p);
        if (tok_is_name(t, "true") || tok_is_name(t, "True"))
            return make_const(p, t, &template_true);
        if (tok_is_name(t, "false") || tok_is_name(t, "False"))
            return make_const(p, t, &template_false);
        if (tok_is_name(t, "none") || tok_is_name(t, "None"))
            return make_const(p, t, &template_none);
        struct template_node *n = new_node(p, TEMPLATE_N_NAME, t);
        if (!n || !copy_str(p, &n->name, t->s, t->len))
            return NULL;
        return n;
    }
    case TEMPLATE_TOK_STRING: {
        next(p);
        if (!is_type(p, TEMPLATE_TOK_STRING))
            return make_const(p, t, template_const_str(pool, t->s, t->len));
        /* adjacent literals concatenate */
        struct template_buf b = {0};
        bool ok = template_buf_put(&b, t->s, t->len);
        while (ok && is_type(p, TEMPLATE_TOK_STRING)) {
            const struct template_token *s = next(p);
            ok = template_buf_put(&b, s->s, s->len);
        }
        struct template_value *v = ok ? template_const_str(pool, b.data ? b.data : "", b.len) : NULL;
        template_buf_free(&b);
        return make_const(p, t, v);
    }
    case TEMPLATE_TOK_INT:
        next(p);
        return make_const(p, t, template_const_num(pool, false, t->i, 0));
    case TEMPLATE_TOK_FLOAT:
        next(p);
        return make_const(p, t, template_const_num(pool, true, 0, t->f));
    case TEMPLATE_TOK_LPAREN: {
        next(p);
        if (!enter(p))
            return NULL;
        struct template_node *n = parse_tuple(p, false, true, NULL, true);
        p->depth--;
        if (!n || !expect(p, TEMPLATE_TOK_RPAREN))
            return NULL;
        return n;
    }
    case TEMPLATE_TOK_LBRACKET:
    case TEMPLATE_TOK_LBRACE: {
        if (!enter(p))
            return NULL;
        struct template_node *n = t->type == TEMPLATE_TOK_LBRACKET ? parse_list(p) : parse_dict(p);
        p->depth--;
        return n;
    }
    default: {
        char got[64];
        describe(t, got, sizeof got);
        if (t->type == TEMPLATE_TOK_EOF)
            fail_at(p, t, "unexpected end of template");
        else
            fail_at(p, t, "unexpected %s", got);
        return NULL;
    }
    }
}

static struct template_node *parse_unary(struct parser *p, bool with_filter)
{
    const struct template_token *t = cur(p);
    struct template_node *node;
    if (!enter(p))
        return NULL;
    if (t->type == TEMPLATE_TOK_SUB || t->type == TEMPLATE_TOK_ADD) {
        next(p);
        node = new_node(p, t->type == TEMPLATE_TOK_SUB ? TEMPLATE_N_NEG : TEMPLATE_N_POS, t);
        if (node && !(node->a = parse_unary(p, false)))
            node = NULL;
    } else {
        node = parse_primary(p);
    }
    p->depth--;
    node = parse_postfix(p, node);
    if (with_filter)
        node = parse_filter_expr(p, node);
    return node;
}

static struct template_node *binop(struct parser *p, const struct template_token *at,
                                   enum template_node_kind kind, enum template_op op,
                                   struct template_node *a, struct template_node *b)
{
    if (!a || !b)
        return NULL;
    struct template_node *n = new_node(p, kind, at);
    if (n) {
        n->op = op;
        n->a = a;
        n->b = b;
    }
    return n;
}

static struct template_node *parse_pow(struct parser *p)
{
    struct template_node *left = parse_unary(p, true);
    while (left && is_type(p, TEMPLATE_TOK_POW)) {
        const struct template_token *t = next(p);
        left = binop(p, t, TEMPLATE_N_BINOP, TEMPLATE_OP_POW, left, parse_unary(p, true));
    }
    return left;
}

static struct template_node *parse_math2(struct parser *p)
{
    struct template_node *left = parse_pow(p);
    for (;;) {
        enum template_op op;
        switch (cur(p)->type) {
        case TEMPLATE_TOK_MUL: op = TEMPLATE_OP_MUL; break;
        case TEMPLATE_TOK_DIV: op = TEMPLATE_OP_DIV; break;
        case TEMPLATE_TOK_FLOORDIV: op = TEMPLATE_OP_FLOORDIV; break;
        case TEMPLATE_TOK_MOD: op = TEMPLATE_OP_MOD; break;
        default: return left;
        }
        if (!left)
            return NULL;
        const struct template_token *t = next(p);
        left = binop(p, t, TEMPLATE_N_BINOP, op, left, parse_pow(p));
    }
}

static struct template_node *parse_concat(struct parser *p)
{
    const struct template_token *at = cur(p);
    struct template_node *first = parse_math2(p);
    if (!first || !is_type(p, TEMPLATE_TOK_TILDE))
        return first;
    struct nodevec items = {0};
    if (!vec_push(p, &items, first))
        return NULL;
    while (is_type(p, TEMPLATE_TOK_TILDE)) {
        next(p);
        struct template_node *e = parse_math2(p);
        if (!e || !vec_push(p, &items, e))
            return NULL;
    }
    struct template_node *n = new_node(p, TEMPLATE_N_CONCAT, at);
    if (n) {
        n->items = items.v;
        n->nitems = items.n;
    }
    return n;
}

static struct template_node *parse_math1(struct parser *p)
{
    struct template_node *left = parse_concat(p);
    while (left && (is_type(p, TEMPLATE_TOK_ADD) || is_type(p, TEMPLATE_TOK_SUB))) {
        const struct template_token *t = next(p);
        enum template_op op = t->type == TEMPLATE_TOK_ADD ? TEMPLATE_OP_ADD : TEMPLATE_OP_SUB;
        left = binop(p, t, TEMPLATE_N_BINOP, op, left, parse_concat(p));
    }
    return left;
}

static struct template_node *parse_compare(struct parser *p)
{
    const struct template_token *at = cur(p);
    struct template_node *expr = parse_math1(p);
    if (!expr)
        return NULL;
    struct nodevec operands = {0};
    enum template_op *ops = NULL;
    size_t opcap = 0;
    for (;;) {
        enum template_op op;
        switch (cur(p)->type) {
        case TEMPLATE_TOK_EQ: op = TEMPLATE_OP_EQ; next(p); break;
        case TEMPLATE_TOK_NE: op = TEMPLATE_OP_NE; next(p); break;
        case TEMPLATE_TOK_LT: op = TEMPLATE_OP_LT; next(p); break;
        case TEMPLATE_TOK_LTEQ: op = TEMPLATE_OP_LTEQ; next(p); break;
        case TEMPLATE_TOK_GT: op = TEMPLATE_OP_GT; next(p); break;
        case TEMPLATE_TOK_GTEQ: op = TEMPLATE_OP_GTEQ; next(p); break;
        default:
            if (is_name(p, "in")) {
                op = TEMPLATE_OP_IN;
                next(p);
            } else if (is_name(p, "not") && tok_is_name(look(p), "in")) {
                op = TEMPLATE_OP_NOTIN;
                next(p);
                next(p);
            } else {
                goto done;
            }
        }
        struct template_node *e = parse_math1(p);
        if (!e)
            return NULL;
        if (operands.n == opcap) {
            size_t cap = opcap ? opcap * 2 : 2;
            enum template_op *a = template_pool_alloc(&p->prog->pool, cap * sizeof *a);
            if (!a) {
                oom(p);
                return NULL;
            }
            if (operands.n)
                memcpy(a, ops, operands.n * sizeof *a);
            ops = a;
            opcap = cap;
        }
        ops[operands.n] = op;
        if (!vec_push(p, &operands, e))
            return NULL;
    }
done:
    if (!operands.n)
        return expr;
    struct template_node *n = new_node(p, TEMPLATE_N_COMPARE, at);
    if (n) {
        n->a = expr;
        n->items = operands.v;
        n->nitems = operands.n;
        n->ops = ops;
    }
    return n;
}

static struct template_node *parse_not(struct parser *p)
{
    if (is_name(p, "not")) {
        const struct template_token *t = next(p);
        if (!enter(p))
            return NULL;
        struct template_node *n = new_node(p, TEMPLATE_N_NOT, t);
        if (n && !(n->a = parse_not(p)))
            n = NULL;
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

static struct template_node *parse_and(struct parser *p)
{
    struct template_node *left = parse_not(p);
    while (left && is_name(p, "and")) {
        const struct template_token *t = next(p);
        left = binop(p, t, TEMPLATE_N_AND, TEMPLATE_OP_ADD, left, parse_not(p));
    }
    return left;
}

static struct template_node *parse_or(struct parser *p)
{
    struct template_node *left = parse_and(p);
    while (left && is_name(p, "or")) {
        const struct template_token *t = next(p);
        left = binop(p, t, TEMPLATE_N_OR, TEMPLATE_OP_ADD, left, parse_and(p));
    }
    return left;
}

static struct template_node *parse_condexpr(struct parser *p)
{
    const struct template_token *at = cur(p);
    struct template_node *e1 = parse_or(p);
    while (e1 && is_name(p, "if")) {
        next(p);
        struct template_node *e2 = parse_or(p), *e3 = NULL;
        if (!e2)
            return NULL;
        if (is_name(p, "else")) {
            next(p);
            if (!enter(p))
                return NULL;
            e3 = parse_condexpr(p);
            p->depth--;
            if (!e3)
                return NULL;
        }
        struct template_node *n = new_node(p, TEMPLATE_N_COND, at);
        if (!n)
            return NULL;
        n->a = e2;
        n->b = e1;
        n->c = e3;
        e1 = n;
        at = cur(p);
    }
    return e1;
}

static struct template_node *parse_expression(struct parser *p, bool with_condexpr)
{
    if (!enter(p))
        return NULL;
    struct template_node *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
    p->depth--;
    return n;
}

static bool is_tuple_end(struct parser *p, const char *extra_end)
{
    enum template_tok t = cur(p)->type;
    if (t == TEMPLATE_TOK_VAR_END || t == TEMPLATE_TOK_BLOCK_END || t == TEMPLATE_TOK_RPAREN)
        return true;
    return extra_end && is_name(p, extra_end);
}

static struct template_node *parse_tuple(struct parser *p, bool simplified, bool with_condexpr,
                                         const char *extra_end, bool explicit_parens)
{
    const struct template_token *at = cur(p);
    struct nodevec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && !expect(p, TEMPLATE_TOK_COMMA))
            return NULL;
        if (is_tuple_end(p, extra_end))
            break;
        struct template_node *e = simplified ? parse_primary(p) : parse_expression(p, with_condexpr);
        if (!e || !vec_push(p, &args, e))
            return NULL;
        if (is_type(p, TEMPLATE_TOK_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (args.n)
            return args.v[0];
        if (!explicit_parens) {
            char got[64];
            describe(cur(p), got, sizeof got);
            fail_at(p, cur(p), "expected an expression, got %s", got);
            return NULL;
        }
    }
    struct template_node *n = new_node(p, TEMPLATE_N_TUPLE, at);
    if (n) {
        n->items = args.v;
        n->nitems = args.n;
    }
    return n;
}

/* ========================================================================== statements */

static bool can_assign(const struct template_node *n)
{
    if (n->kind == TEMPLATE_N_NAME)
        return true;
    if (n->kind != TEMPLATE_N_TUPLE)
        return false;
    for (size_t i = 0; i < n->nitems; i++)
        if (!can_assign(n->items[i]))
            return false;
    return true;
}

static struct template_node *parse_assign_target(struct parser *p, bool name_only,
                                                 const char *extra_end, bool with_namespace)
{
    const struct template_token *at = cur(p);
    if (with_namespace && look(p)->type == TEMPLATE_TOK_DOT) {
        if (!is_type(p, TEMPLATE_TOK_NAME)) {
            fail_at(p, at, "expected a name");
            return NULL;
        }
        const struct template_token *ns = next(p);
        next(p);
        if (!is_type(p, TEMPLATE_TOK_NAME)) {
            fail_at(p, cur(p), "expected an attribute name after '.'");
            return NULL;
        }
        const struct template_token *attr = next(p);
        struct template_node *n = new_node(p, TEMPLATE_N_NSREF, ns);
        if (!n || !copy_str(p, &n->name, ns->s, ns->len) || !copy_str(p, &n->name2, attr->s, attr->len))
            return NULL;
        return n;
    }
    struct template_node *t;
    if (name_only) {
        if (!is_type(p, TEMPLATE_TOK_NAME)) {
            char got[64];
            describe(at, got, sizeof got);
            fail_at(p, at, "expected a name, got %s", got);
            return NULL;
        }
        next(p);
        t = new_node(p, TEMPLATE_N_NAME, at);
        if (!t || !copy_str(p, &t->name, at->s, at->len))
            return NULL;
    } else {
        t = parse_tuple(p, true, true, extra_end, false);
        if (!t)
            return NULL;
    }
    if (!can_assign(t) || (t->kind == TEMPLATE_N_NAME && (
            (t->name.len == 4 && (!memcmp(t->name.s, "true", 4) || !memcmp(t->name.s, "none", 4))) ||
            (t->name.len == 5 && !memcmp(t->name.s, "false", 5))))) {
        fail_at(p, at, "cannot assign to this expression");
        return NULL;
    }
    return t;
}

static bool open_tag(struct parser *p, const char *name, uint32_t line)
{
    if (p->nopen == MAX_OPEN_TAGS)
        return fail_at(p, cur(p), "blocks nested too deeply (limit %d)", MAX_OPEN_TAGS);
    p->open[p->nopen].name = name;
    p->open[p->nopen].line = line;
    p->nopen++;
    return true;
}

/* Expects the end of the opening tag, then parses the body up to one of ends; the current
 * token is then the end tag's name. drop consumes that name. */
static bool parse_statements(struct parser *p, const char *const *ends, size_t nends, bool drop,
                             struct nodevec *out)
{
    if (is_type(p, TEMPLATE_TOK_COLON))
        next(p);
    if (!expect(p, TEMPLATE_TOK_BLOCK_END))
        return false;
    if (!enter(p))
        return false;
    bool ok = parse_body(p, ends, nends, out);
    p->depth--;
    if (ok && drop)
        next(p);
    return ok;
}

static bool parse_signature(struct parser *p, struct template_node *n)
{
    if (!expect(p, TEMPLATE_TOK_LPAREN))
        return false;
    struct nodevec defs = {0};
    struct template_str *names = NULL;
    size_t cap = 0, count = 0;
    bool any_default = false;
    while (!is_type(p, TEMPLATE_TOK_RPAREN)) {
        if (count && !expect(p, TEMPLATE_TOK_COMMA))
            return false;
        if (!is_type(p, TEMPLATE_TOK_NAME)) {
            char got[64];
            describe(cur(p), got, sizeof got);
            return fail_at(p, cur(p), "expected a parameter name, got %s", got);
        }
        const struct template_token *name = next(p);
        struct template_node *def = NULL;
        if (is_type(p, TEMPLATE_TOK_ASSIGN)) {
            next(p);
            if (!(def = parse_expression(p, true)))
                return false;
            any_default = true;
        } else if (any_default) {
            return fail_at(p, name, "non-default argument follows default argument");
        }
        for (size_t i = 0; i < count; i++)
            if (names[i].len == name->len && !memcmp(names[i].s, name->s, name->len))
                return fail_at(p, name, "duplicate parameter '%.*s'", (int)name->len, name->s);
        if (count == cap) {
            size_t nc = cap ? cap * 2 : 4;
            struct template_str *a = template_pool_alloc(&p->prog->pool, nc * sizeof *a);
            if (!a)
                return oom(p);
            if (count)
                memcpy(a, names, count * sizeof *a);
            names = a;
            cap = nc;
        }
        if (!copy_str(p, &names[count], name->s, name->len) || !vec_push(p, &defs, def))
            return false;
        count++;
    }
    if (!expect(p, TEMPLATE_TOK_RPAREN))
        return false;
    n->params = names;
    n->defaults = defs.v;
    n->nparams = count;
    return true;
}

static struct template_node *parse_for(struct parser *p, const struct template_token *at)
{
    struct template_node *n = new_node(p, TEMPLATE_N_FOR, at);
    if (!n || !(n->a = parse_assign_target(p, false, "in", false)) || !expect_name(p, "in"))
        return NULL;
    if (!(n->b = parse_tuple(p, false, false, "recursive", false)))
        return NULL;
    if (is_name(p, "if")) {
        next(p);
        if (!(n->c = parse_expression(p, true)))
            return NULL;
    }
    if (is_name(p, "recursive")) {
        fail_at(p, cur(p), "recursive loops are not supported");
        return NULL;
    }
    static const char *const ends[] = {"endfor", "else"};
    struct nodevec body = {0}, els = {0};
    p->loop_depth++;
    bool ok = parse_statements(p, ends, 2, false, &body);
    p->loop_depth--;
    if (!ok)
        return NULL;
    if (tok_is_name(next(p), "else")) {
        static const char *const end[] = {"endfor"};
        int saved = p->loop_depth;
        p->loop_depth = 0;
        ok = parse_statements(p, end, 1, true, &els);
        p->loop_depth = saved;
        if (!ok)
            return NULL;
    }
    n->body = body.v;
    n->nbody = body.n;
    n->else_body = els.v;
    n->nelse = els.n;
    return n;
}

static struct template_node *parse_if(struct parser *p, const struct template_token *at)
{
    struct template_node *root = new_node(p, TEMPLATE_N_IF, at), *node = root;
    static const char *const ends[] = {"elif", "else", "endif"};
    static const char *const endif[] = {"endif"};
    while (node) {
        if (!(node->a = parse_tuple(p, false, false, NULL, false)))
            return NULL;
        struct nodevec body = {0};
        if (!parse_statements(p, ends, 3, false, &body))
            return NULL;
        node->body = body.v;
        node->nbody = body.n;
        const struct template_token *t = next(p);
        if (tok_is_name(t, "elif")) {
            struct template_node *nif = new_node(p, TEMPLATE_N_IF, t);
            struct template_node **e = nif ? template_pool_alloc(&p->prog->pool, sizeof *e) : NULL;
            if (!e) {
                oom(p);
                return NULL;
            }
            e[0] = nif;
            node->else_body = e;
            node->nelse = 1;
            node = nif;
            continue;
        }
        if (tok_is_name(t, "else")) {
            struct nodevec els = {0};
            if (!parse_statements(p, endif, 1, true, &els))
                return NULL;
            node->else_body = els.v;
            node->nelse = els.n;
        }
        break;
    }
    return root;
}

static struct template_node *parse_block_with_body(struct parser *p, struct template_node *n,
                                                   const char *end, bool in_loop)
{
    const char *ends[1] = {end};
    struct nodevec body = {0};
    int saved = p->loop_depth;
    if (!in_loop)
        p->loop_depth = 0;
    bool ok = parse_statements(p, ends, 1, true, &body);
    p->loop_depth = saved;
    if (!ok)
        return NULL;
    n->body = body.v;
    n->nbody = body.n;
    return n;
}

static struct template_node *parse_statement(struct parser *p)
{
    const struct template_token *t = cur(p);
    if (t->type != TEMPLATE_TOK_NAME) {
        char got[64];
        describe(t, got, sizeof got);
        fail_at(p, t, "expected a tag name, got %s", got);
        return NULL;
    }
    next(p);
    struct template_node *n = NULL;
    const char *opened = NULL;
    if (tok_is_name(t, "for")) {
        if (!open_tag(p, "for", t->line))
            return NULL;
        n = parse_for(p, t);
        opened = "for";
    } else if (tok_is_name(t, "if")) {
        if (!open_tag(p, "if", t->line))
            return NULL;
        n = parse_if(p, t);
        opened = "if";
    } else if (tok_is_name(t, "set")) {
        struct template_node *target = parse_assign_target(p, false, NULL, true);
        if (!target)
            return NULL;
        if (is_type(p, TEMPLATE_TOK_ASSIGN)) {
            next(p);
            n = new_node(p, TEMPLATE_N_SET, t);
            if (n && (n->a = target, !(n->b = parse_tuple(p, false, true, NULL, false))))
                n = NULL;
        } else {
            if (!open_tag(p, "set", t->line))
                return NULL;
            n = new_node(p, TEMPLATE_N_SET_BLOCK, t);
            if (n) {
                n->a = target;
                if (is_type(p, TEMPLATE_TOK_PIPE) && !(n->c = parse_filter(p, NULL, false)))
                    n = NULL;
            }
            if (n)
                n = parse_block_with_body(p, n, "endset", true);
            opened = "set";
        }
    } else if (tok_is_name(t, "macro")) {
        if (!open_tag(p, "macro", t->line))
            return NULL;
        n = new_node(p, TEMPLATE_N_MACRO, t);
        if (n && !is_type(p, TEMPLATE_TOK_NAME)) {
            fail_at(p, cur(p), "expected the macro's name");
            return NULL;
        }
        if (n) {
            const struct template_token *name = next(p);
            if (!copy_str(p, &n->name, name->s, name->len) || !parse_signature(p, n))
                return NULL;
            n = parse_block_with_body(p, n, "endmacro", false);
        }
        opened = "macro";
    } else if (tok_is_name(t, "call")) {
        if (!open_tag(p, "call", t->line))
            return NULL;
        n = new_node(p, TEMPLATE_N_CALL_BLOCK, t);
        if (n && is_type(p, TEMPLATE_TOK_LPAREN) && !parse_signature(p, n))
            return NULL;
        if (n) {
            n->a = parse_expression(p, true);
            if (!n->a)
                return NULL;
            if (n->a->kind != TEMPLATE_N_CALL) {
                fail_at(p, t, "expected a call after 'call'");
                return NULL;
            }
            n = parse_block_with_body(p, n, "endcall", false);
        }
        opened = "call";
    } else if (tok_is_name(t, "filter")) {
        if (!open_tag(p, "filter", t->line))
            return NULL;
        n = new_node(p, TEMPLATE_N_FILTER_BLOCK, t);
        if (n && !(n->c = parse_filter(p, NULL, true)))
            return NULL;
        if (n)
            n = parse_block_with_body(p, n, "endfilter", true);
        opened = "filter";
    } else if (tok_is_name(t, "with")) {
        if (!open_tag(p, "with", t->line))
            return NULL;
        n = new_node(p, TEMPLATE_N_WITH, t);
        struct nodevec vals = {0};
        struct template_str *names = NULL;
        size_t cap = 0, count = 0;
        while (n && !is_type(p, TEMPLATE_TOK_BLOCK_END)) {
            if (count && !expect(p, TEMPLATE_TOK_COMMA))
                return NULL;
            struct template_node *target = parse_assign_target(p, true, NULL, false);
            if (!target || !expect(p, TEMPLATE_TOK_ASSIGN))
                return NULL;
            struct template_node *v = parse_expression(p, true);
            if (!v)
                return NULL;
            if (count == cap) {
                size_t nc = cap ? cap * 2 : 4;
                struct template_str *a = template_pool_alloc(&p->prog->pool, nc * sizeof *a);
                if (!a) {
                    oom(p);
                    return NULL;
                }
                if (count)
                    memcpy(a, names, count * sizeof *a);
                names = a;
                cap = nc;
            }
            names[count++] = target->name;
            if (!vec_push(p, &vals, v))
                return NULL;
        }
        if (n) {
            n->params = names;
            n->defaults = vals.v;
            n->nparams = count;
            n = parse_block_with_body(p, n, "endwith", true);
        }
        opened = "with";
    } else if (tok_is_name(t, "generation")) {
        if (!open_tag(p, "generation", t->line))
            return NULL;
        n = new_node(p, TEMPLATE_N_SCOPE, t);
        if (n)
            n = parse_block_with_body(p, n, "endgeneration", true);
        opened = "generation";
    } else if (tok_is_name(t, "print")) {
        struct nodevec outs = {0};
        while (!is_type(p, TEMPLATE_TOK_BLOCK_END)) {
            if (outs.n && !expect(p, TEMPLATE_TOK_COMMA))
                return NULL;
            struct template_node *o = new_node(p, TEMPLATE_N_OUTPUT, cur(p));
            if (!o || !(o->a = parse_expression(p, true)) || !vec_push(p, &outs, o))
                return NULL;
        }
        n = new_node(p, TEMPLATE_N_SCOPE, t);
        if (n) {
            n->body = outs.v;
            n->nbody = outs.n;
        }
    } else if (tok_is_name(t, "break") || tok_is_name(t, "continue")) {
        if (p->loop_depth == 0) {
            fail_at(p, t, "'%.*s' outside of a for loop", (int)t->len, t->s);
            return NULL;
        }
        n = new_node(p, tok_is_name(t, "break") ? TEMPLATE_N_BREAK : TEMPLATE_N_CONTINUE, t);
    } else if (tok_is_name(t, "block") || tok_is_name(t, "extends") || tok_is_name(t, "include") ||
               tok_is_name(t, "import") || tok_is_name(t, "from") || tok_is_name(t, "autoescape") ||
               tok_is_name(t, "do")) {
        fail_at(p, t, "the '%.*s' tag is not supported in chat templates", (int)t->len, t->s);
        return NULL;
    } else {
        if (p->nopen > 0)
            fail_at(p, t, "unexpected tag '%.*s': the innermost open block is '%s' from line %u",
                    (int)(t->len > 40 ? 40 : t->len), t->s, p->open[p->nopen - 1].name,
                    p->open[p->nopen - 1].line);
        else
            fail_at(p, t, "unknown tag '%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s);
        return NULL;
    }
    if (opened && n)
        p->nopen--;
    return n;
}

static bool parse_body(struct parser *p, const char *const *ends, size_t nends, struct nodevec *out)
{
    for (;;) {
        const struct template_token *t = cur(p);
        switch (t->type) {
        case TEMPLATE_TOK_EOF:
            if (nends) {
                const char *blk = p->nopen ? p->open[p->nopen - 1].name : "?";
                uint32_t line = p->nopen ? p->open[p->nopen - 1].line : t->line;
                return fail_at(p, t, "unexpected end of template: the '%s' block from line %u is "
                               "never closed (expected '%s')", blk, line, ends[nends - 1]);
            }
            return true;
        case TEMPLATE_TOK_DATA: {
            next(p);
            struct template_node *n = new_node(p, TEMPLATE_N_TEXT, t);
            if (!n)
                return false;
            n->value = template_const_str(&p->prog->pool, t->s, t->len);
            if (!n->value || !vec_push(p, out, n))
                return n->value ? false : oom(p);
            break;
        }
        case TEMPLATE_TOK_VAR_BEGIN: {
            next(p);
            struct template_node *n = new_node(p, TEMPLATE_N_OUTPUT, t);
            if (!n || !(n->a = parse_tuple(p, false, true, NULL, false)) ||
                !expect(p, TEMPLATE_TOK_VAR_END) || !vec_push(p, out, n))
                return false;
            break;
        }
        case TEMPLATE_TOK_BLOCK_BEGIN: {
            next(p);
            for (size_t k = 0; k < nends; k++)
                if (is_name(p, ends[k]))
                    return true;
            struct template_node *n = parse_statement(p);
            if (!n || !expect(p, TEMPLATE_TOK_BLOCK_END) || !vec_push(p, out, n))
                return false;
            break;
        }
        default: {
            char got[64];
            describe(t, got, sizeof got);
            return fail_at(p, t, "unexpected %s", got);
        }
        }
    }
}

enum hr_status template_parse(const char *src, size_t len, struct template_program **out, char *err,
                              size_t errlen)
{
    *out = NULL;
    struct template_tokens toks;
    enum hr_status st = template_lex(src, len, &toks, err, errlen);
    if (st != HR_OK)
        return st;
    struct template_program *prog = calloc(1, sizeof *prog);
    if (!prog) {
        template_tokens_free(&toks);
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory parsing the template");
    }
    struct parser p = {.tok = toks.tok, .ntok = toks.n, .prog = prog, .err = err, .errlen = errlen,
                       .st = HR_OK};
    struct nodevec body = {0};
    bool ok = parse_body(&p, NULL, 0, &body);
    template_tokens_free(&toks);
    if (!ok) {
        template_program_free(prog);
        return p.st != HR_OK ? p.st : hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    }
    prog->body = body.v;
    prog->nbody = body.n;
    *out = prog;
    return HR_OK;
}

void template_program_free(struct template_program *p)
{
    if (!p)
        return;
    template_pool_free(&p->pool);
    free(p);
}
