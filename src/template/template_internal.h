/* Internals of the chat-template engine shared by src/template/template_*.c.
 * Module prefix: template_ (the public API in template.h is chat_template_*).
 *
 * Pipeline: template_lex (source -> tokens, whitespace control) -> template_parse (tokens -> AST,
 * owned by a struct template_program) -> template_eval (AST + context -> output), with values in
 * template_value.c, filters and tests in template_filters.c, methods and global functions in
 * template_methods.c and text helpers (UTF-8, Python whitespace and case, number formatting) in
 * template_text.c.
 *
 * Errors inside a render are recorded once in the render state (first error wins) and signalled
 * by a NULL value or a false return; callers just propagate. */
#ifndef HEARTH_TEMPLATE_TEMPLATE_INTERNAL_H
#define HEARTH_TEMPLATE_TEMPLATE_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "template/template.h"

struct template_render;

/* ======================================================================== text (template_text.c) */

/* A growable byte buffer. With r set, its capacity counts against the render's memory and
 * its length against max_output; a failed append records the error in r. */
struct template_buf {
    char *data; /* [cap], NUL-terminated when len < cap */
    size_t len;
    size_t cap;
    struct template_render *r;
};

bool template_buf_put(struct template_buf *b, const char *s, size_t n);
bool template_buf_puts(struct template_buf *b, const char *s);
bool template_buf_putc(struct template_buf *b, char c);
bool template_buf_printf(struct template_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
bool template_buf_put_cp(struct template_buf *b, uint32_t cp); /* UTF-8 encode */
void template_buf_free(struct template_buf *b);
/* Hands the bytes over (NUL-terminated, never NULL on success) and resets b. */
char *template_buf_take(struct template_buf *b, size_t *len);

/* Decodes one UTF-8 sequence at s[0..n); invalid bytes decode as themselves (one byte,
 * code point 0xDC80 + byte, like Python's surrogateescape) so nothing is ever lost. */
uint32_t template_utf8_decode(const char *s, size_t n, size_t *adv);
size_t template_utf8_encode(uint32_t cp, char out[4]);
size_t template_utf8_count(const char *s, size_t n); /* code points */
/* Byte offset of code point index i (clamped to n). */
size_t template_utf8_offset(const char *s, size_t n, size_t i);

bool template_is_space(uint32_t cp); /* Python str.isspace() */
uint32_t template_to_upper(uint32_t cp);
uint32_t template_to_lower(uint32_t cp);
bool template_is_cased(uint32_t cp); /* has an upper/lower case mapping */
bool template_is_alpha(uint32_t cp);
bool template_is_digit(uint32_t cp);
bool template_is_word(uint32_t cp);  /* regex \w: alnum or _ */

/* Python repr(float): shortest round-trip digits, "1.0", "1e+16", "1.5e-05", "nan", "inf". */
void template_format_float(double x, char out[32]);
/* Python repr(str) into b. */
bool template_repr_str(struct template_buf *b, const char *s, size_t n);
/* JSON string literal (Python json.dumps): ensure_ascii escapes non-ASCII as \uXXXX. */
bool template_json_str(struct template_buf *b, const char *s, size_t n, bool ensure_ascii);

/* ======================================================================= lexer (template_lex.c) */

enum template_tok {
    TEMPLATE_TOK_EOF,
    TEMPLATE_TOK_DATA,
    TEMPLATE_TOK_VAR_BEGIN,
    TEMPLATE_TOK_VAR_END,
    TEMPLATE_TOK_BLOCK_BEGIN,
    TEMPLATE_TOK_BLOCK_END,
    TEMPLATE_TOK_NAME,
    TEMPLATE_TOK_STRING,
    TEMPLATE_TOK_INT,
    TEMPLATE_TOK_FLOAT,
    TEMPLATE_TOK_ADD,
    TEMPLATE_TOK_SUB,
    TEMPLATE_TOK_DIV,
    TEMPLATE_TOK_FLOORDIV,
    TEMPLATE_TOK_MUL,
    TEMPLATE_TOK_MOD,
    TEMPLATE_TOK_POW,
    TEMPLATE_TOK_TILDE,
    TEMPLATE_TOK_LBRACKET,
    TEMPLATE_TOK_RBRACKET,
    TEMPLATE_TOK_LPAREN,
    TEMPLATE_TOK_RPAREN,
    TEMPLATE_TOK_LBRACE,
    TEMPLATE_TOK_RBRACE,
    TEMPLATE_TOK_EQ,
    TEMPLATE_TOK_NE,
    TEMPLATE_TOK_GT,
    TEMPLATE_TOK_GTEQ,
    TEMPLATE_TOK_LT,
    TEMPLATE_TOK_LTEQ,
    TEMPLATE_TOK_ASSIGN,
    TEMPLATE_TOK_DOT,
    TEMPLATE_TOK_COLON,
    TEMPLATE_TOK_PIPE,
    TEMPLATE_TOK_COMMA,
    TEMPLATE_TOK_SEMICOLON,
};

struct template_token {
    enum template_tok type;
    uint32_t line, col;
    const char *s; /* [len] DATA / NAME / STRING text (unescaped), owned by the token list */
    size_t len;
    int64_t i;     /* INT */
    double f;      /* FLOAT */
};

struct template_tokens {
    struct template_token *tok; /* [n], ends with an EOF token */
    size_t n;
    char *text;                 /* [text_len] storage of the tokens' strings */
    size_t text_len;
};

/* Lexes with trim_blocks and lstrip_blocks on, newlines normalised and one trailing newline
 * removed (Jinja's defaults as Hugging Face configures them). HR_ERR_FORMAT with
 * "line L, column C: ..." on bad input. */
enum hr_status template_lex(const char *src, size_t len, struct template_tokens *out, char *err,
                            size_t errlen);
void template_tokens_free(struct template_tokens *t);
const char *template_tok_name(enum template_tok t);

/* ========================================================================== AST (template_parse.c) */

enum template_node_kind {
    /* statements */
    TEMPLATE_N_TEXT,         /* value: the text */
    TEMPLATE_N_OUTPUT,       /* a: expression to print */
    TEMPLATE_N_IF,           /* a: test; body; else_body (elif: a nested IF) */
    TEMPLATE_N_FOR,          /* a: target; b: iterable; c: filter or NULL; body; else_body */
    TEMPLATE_N_SET,          /* a: target (NAME, TUPLE or NSREF); b: value */
    TEMPLATE_N_SET_BLOCK,    /* a: target; c: filter chain (innermost operand NULL) or NULL; body */
    TEMPLATE_N_MACRO,        /* name; params (names/defaults); body */
    TEMPLATE_N_CALL_BLOCK,   /* a: the CALL; params of caller; body */
    TEMPLATE_N_FILTER_BLOCK, /* c: filter chain (innermost operand NULL); body */
    TEMPLATE_N_WITH,         /* params: targets with values in defaults; body */
    TEMPLATE_N_SCOPE,        /* body rendered as is ({% generation %}) */
    TEMPLATE_N_BREAK,
    TEMPLATE_N_CONTINUE,
    /* expressions */
    TEMPLATE_N_CONST,        /* value */
    TEMPLATE_N_NAME,         /* name */
    TEMPLATE_N_LIST,         /* items */
    TEMPLATE_N_TUPLE,        /* items */
    TEMPLATE_N_DICT,         /* items: keys; items2: values */
    TEMPLATE_N_GETATTR,      /* a: object; name */
    TEMPLATE_N_GETITEM,      /* a: object; b: key or SLICE */
    TEMPLATE_N_SLICE,        /* a, b, c: start, stop, step (each may be NULL) */
    TEMPLATE_N_CALL,         /* a: callee; args */
    TEMPLATE_N_FILTER,       /* a: operand (NULL in a filter block); name; args */
    TEMPLATE_N_TEST,         /* a: operand; name; args */
    TEMPLATE_N_NOT,          /* a */
    TEMPLATE_N_NEG,          /* a */
    TEMPLATE_N_POS,          /* a */
    TEMPLATE_N_AND,          /* a, b */
    TEMPLATE_N_OR,           /* a, b */
    TEMPLATE_N_BINOP,        /* op; a, b */
    TEMPLATE_N_CONCAT,       /* items */
    TEMPLATE_N_COMPARE,      /* a: first operand; items: the others; ops: one per item */
    TEMPLATE_N_COND,         /* a: test; b: then; c: else or NULL */
    TEMPLATE_N_NSREF,        /* name: namespace variable; name2: attribute (assignment target) */
};

enum template_op {
    TEMPLATE_OP_ADD,
    TEMPLATE_OP_SUB,
    TEMPLATE_OP_MUL,
    TEMPLATE_OP_DIV,
    TEMPLATE_OP_FLOORDIV,
    TEMPLATE_OP_MOD,
    TEMPLATE_OP_POW,
    TEMPLATE_OP_EQ,
    TEMPLATE_OP_NE,
    TEMPLATE_OP_LT,
    TEMPLATE_OP_LTEQ,
    TEMPLATE_OP_GT,
    TEMPLATE_OP_GTEQ,
    TEMPLATE_OP_IN,
    TEMPLATE_OP_NOTIN,
};

struct template_str {
    const char *s; /* [len], owned by the program */
    size_t len;
};

/* Call arguments, as written: f(a, b, k=v, *xs, **kw). */
struct template_args_node {
    struct template_node **pos;   /* [npos] */
    size_t npos;
    struct template_str *kwname;  /* [nkw] */
    struct template_node **kwval; /* [nkw] */
    size_t nkw;
    struct template_node *star;   /* *args or NULL */
    struct template_node *star2;  /* **kwargs or NULL */
};

struct template_node {
    enum template_node_kind kind;
    uint32_t line, col;
    enum template_op op;               /* BINOP */
    struct template_str name;          /* NAME, GETATTR, FILTER, TEST, MACRO, NSREF */
    struct template_str name2;         /* NSREF attribute */
    struct template_value *value;      /* CONST, TEXT (immortal, owned by the program) */
    struct template_node *a, *b, *c;
    struct template_node **items;      /* [nitems] LIST/TUPLE/DICT keys/CONCAT/COMPARE */
    size_t nitems;
    struct template_node **items2;     /* [nitems] DICT values */
    enum template_op *ops;             /* [nitems] COMPARE */
    struct template_node **body;       /* [nbody] */
    size_t nbody;
    struct template_node **else_body;  /* [nelse] */
    size_t nelse;
    struct template_str *params;       /* [nparams] MACRO/CALL_BLOCK/WITH */
    struct template_node **defaults;   /* [nparams], NULL where a parameter has none */
    size_t nparams;
    struct template_args_node args;    /* CALL/FILTER/TEST */
};

/* Chunked bump allocation for everything a program owns; freed at once. */
struct template_pool_chunk;
struct template_pool {
    struct template_pool_chunk *head;
};
void *template_pool_alloc(struct template_pool *p, size_t size);
void template_pool_free(struct template_pool *p);

struct template_program {
    struct template_pool pool;
    struct template_node **body; /* [nbody] top-level statements */
    size_t nbody;
};

/* Parses a whole template. HR_ERR_FORMAT with the line and column on a syntax error. */
enum hr_status template_parse(const char *src, size_t len, struct template_program **out,
                              char *err, size_t errlen);
void template_program_free(struct template_program *p);

/* ======================================================================= values (template_value.c) */

enum template_type {
    TEMPLATE_T_UNDEFINED,
    TEMPLATE_T_NONE,
    TEMPLATE_T_BOOL,
    TEMPLATE_T_INT,
    TEMPLATE_T_FLOAT,
    TEMPLATE_T_STR,
    TEMPLATE_T_LIST,      /* list or tuple (is_tuple), or a Python iterator / dict view (view) */
    TEMPLATE_T_DICT,      /* string keys, insertion-ordered */
    TEMPLATE_T_NAMESPACE, /* namespace(): the only mutable value */
    TEMPLATE_T_MACRO,
    TEMPLATE_T_BUILTIN,   /* range, namespace, dict, raise_exception, strftime_now */
    TEMPLATE_T_METHOD,    /* a bound method: self.name */
    TEMPLATE_T_LOOP,      /* the loop variable of a for loop */
};

enum template_builtin {
    TEMPLATE_BUILTIN_RANGE,
    TEMPLATE_BUILTIN_NAMESPACE,
    TEMPLATE_BUILTIN_DICT,
    TEMPLATE_BUILTIN_RAISE_EXCEPTION,
    TEMPLATE_BUILTIN_STRFTIME_NOW,
    TEMPLATE_BUILTIN_COUNT_,
};

/* What a list stands for when it is not a plain list: Jinja filters such as map and select
 * return generators (always true, no len, not subscriptable), reverse an iterator, and
 * dict.keys() / values() / items() views; they print and test the way Python's do. */
enum template_view {
    TEMPLATE_VIEW_NONE,
    TEMPLATE_VIEW_GENERATOR,
    TEMPLATE_VIEW_REVERSED,
    TEMPLATE_VIEW_REVERSED_KEYS,
    TEMPLATE_VIEW_KEYS,
    TEMPLATE_VIEW_VALUES,
    TEMPLATE_VIEW_ITEMS,
};

#define TEMPLATE_REFS_IMMORTAL UINT32_MAX

struct template_entry {
    struct template_value *key; /* a string */
    struct template_value *val;
};

struct template_scope;

struct template_value {
    enum template_type type;
    uint32_t refs;  /* TEMPLATE_REFS_IMMORTAL: shared constant, never counted nor freed */
    uint32_t depth; /* nesting of containers below (bounds recursion on values) */
    size_t acct;    /* bytes counted against the render's memory */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            char *s; /* [len] UTF-8, NUL-terminated */
            size_t len;
        } str;
        struct {
            struct template_value **items; /* [n] */
            size_t n, cap;
            bool is_tuple;
            uint8_t view;  /* enum template_view */
            char *pending; /* a generator's deferred error: raised when it is consumed */
        } list;
        struct {
            struct template_entry *e; /* [n] DICT and NAMESPACE */
            size_t n, cap;
        } dict;
        struct {
            const struct template_node *node;  /* MACRO or CALL_BLOCK */
            struct template_scope *closure;    /* kept alive until the render ends */
        } macro;
        enum template_builtin builtin;
        struct {
            struct template_value *self;
            const char *name; /* static method name */
        } method;
        struct {
            int64_t index0, length;
            struct template_value *items; /* the iterated list (previtem/nextitem) */
        } loop;
    } u;
};

/* Immortal singletons. */
extern struct template_value template_undefined, template_none, template_true, template_false;
struct template_value *template_builtin_value(enum template_builtin b);

struct template_value *template_ref(struct template_value *v);
void template_unref(struct template_render *r, struct template_value *v);

/* Constructors: a new reference, or NULL with the error recorded in r (memory limits).
 * template_value_new: a value of the type, its size (plus extra bytes it owns) counted
 * against the memory limit but not as a step; the typed ones that allocate count one. */
struct template_value *template_value_new(struct template_render *r, enum template_type type, size_t extra);
struct template_value *template_int(struct template_render *r, int64_t i);
struct template_value *template_float(struct template_render *r, double f);
struct template_value *template_bool(bool b);
struct template_value *template_str(struct template_render *r, const char *s, size_t n);
struct template_value *template_str_take(struct template_render *r, struct template_buf *b);
struct template_value *template_list(struct template_render *r, size_t cap);
/* Appends and takes the reference to v (released on failure). */
bool template_list_push(struct template_render *r, struct template_value *l, struct template_value *v);
struct template_value *template_dict(struct template_render *r, size_t cap);
struct template_value *template_namespace(struct template_render *r);
/* Sets d[key] (replacing), taking the reference to v; key is copied. */
bool template_dict_set(struct template_render *r, struct template_value *d, const char *key,
                       size_t klen, struct template_value *v);
/* Borrowed value of d[key] or NULL. */
struct template_value *template_dict_get(const struct template_value *d, const char *key, size_t klen);
/* Immortal constant for the parser (not counted; freed with the program's pool). */
struct template_value *template_const_str(struct template_pool *p, const char *s, size_t n);
struct template_value *template_const_num(struct template_pool *p, bool is_float, int64_t i, double f);

/* From JSON (copy); NULL with the error recorded on too-deep input or memory limits. */
struct template_value *template_from_json(struct template_render *r, const json_t *j, uint32_t depth);

const char *template_type_name(const struct template_value *v); /* Python type names */
bool template_truthy(const struct template_value *v);
/* A generator or iterator: no len(), no indexing (dict views have a len). */
bool template_is_iterator(const struct template_value *v);
/* Python ==; recursion bounded (cycles through namespaces compare unequal). */
bool template_equal(const struct template_value *a, const struct template_value *b);
/* needle in hay, Python semantics (undefined is an empty iterable): the `in`
 * operator and the `in` test. */
bool template_contains(struct template_render *r, const struct template_node *at, const struct template_value *needle,
                       const struct template_value *hay, bool *res);
/* Python ordering: sets *cmp to -1/0/1; false (error recorded, at names the node) when the
 * types cannot be ordered. case_insensitive lowers strings first (sort filters). */
bool template_compare(struct template_render *r, const struct template_node *at,
                      const struct template_value *a, const struct template_value *b,
                      bool case_insensitive, int *cmp);

/* Python str(v) appended to b (Undefined -> ""). */
bool template_to_str(struct template_render *r, struct template_buf *b, const struct template_value *v);
/* Python repr(v). */
bool template_to_repr(struct template_render *r, struct template_buf *b, const struct template_value *v);
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys) as HF's tojson filter. indent < 0:
 * none; indent_str overrides the spaces when non-NULL. item_sep/key_sep NULL: the defaults. */
struct template_json_opts {
    bool ensure_ascii;
    bool sort_keys;
    int indent;              /* -1: no indentation */
    const char *indent_str;  /* a string indent (Python indent="\t"), or NULL */
    const char *item_sep;
    const char *key_sep;
};
bool template_to_json(struct template_render *r, struct template_buf *b, const struct template_value *v,
                      const struct template_json_opts *o);

/* ==================================================================== render state (template_eval.c) */

enum template_flow { TEMPLATE_FLOW_NONE, TEMPLATE_FLOW_BREAK, TEMPLATE_FLOW_CONTINUE };

struct template_render {
    const struct chat_template_limits *lim;
    enum hr_status status;        /* HR_OK until the first error */
    bool limit_hit;               /* the error is a limit (never deferred into a generator) */
    char *err;
    size_t errlen;
    const struct template_node *at; /* the node being evaluated (for error lines) */
    uint64_t steps;
    uint64_t iterations;
    uint32_t depth;
    size_t mem;                   /* live bytes of values and buffers */
    enum template_flow flow;
    struct template_scope *global;
    struct template_scope **kept; /* [nkept] scopes captured by macros: freed at the end */
    size_t nkept, capkept;
    struct template_value **namespaces; /* [nns] owned refs: cleared at the end (cycles) */
    size_t nns, capns;
};

/* Records the first error: "line L, column C: message" using node at (or r->at). Returns false. */
bool template_fail(struct template_render *r, const struct template_node *at, enum hr_status st,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
bool template_failv(struct template_render *r, const struct template_node *at, enum hr_status st,
                    const char *fmt, va_list ap);
/* A limit of the render was exceeded (HR_ERR_INVALID): as template_fail, never deferred. */
bool template_limit(struct template_render *r, const struct template_node *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Fails with a generator's deferred error when v carries one. */
bool template_check_pending(struct template_render *r, const struct template_value *v);
/* Accounts bytes of memory (negative: released); false when over the limit. */
bool template_mem(struct template_render *r, ptrdiff_t bytes);
/* Charges string work (bytes touched) to the step budget. */
bool template_charge(struct template_render *r, size_t bytes);

/* Evaluated call arguments: borrowed values. */
struct template_kwarg {
    const char *name;
    size_t len;
    struct template_value *val;
};
struct template_callargs {
    struct template_value **pos; /* [npos] */
    size_t npos;
    struct template_kwarg *kw;   /* [nkw] */
    size_t nkw;
};

/* Binds args to params (Python keyword semantics): out[i] borrowed or NULL when not given.
 * Errors on unknown keywords, too many positionals, duplicates, and missing required ones
 * (the first nrequired params). what names the callee in messages. */
bool template_bind(struct template_render *r, const struct template_node *at, const char *what,
                   const struct template_callargs *a, const char *const *params, size_t nparams,
                   size_t nrequired, struct template_value **out);

/* Calls any callable value (macro, builtin, bound method). New reference or NULL. */
struct template_value *template_call_value(struct template_render *r, const struct template_node *at,
                                           struct template_value *fn, const struct template_callargs *a,
                                           struct template_value *caller);
/* Attribute lookup as Jinja's getattr (methods first, then items); NULL only on error. */
struct template_value *template_getattr(struct template_render *r, const struct template_node *at,
                                        struct template_value *obj, const char *name, size_t len);
/* Subscript as Jinja's getitem (items first, then attributes); NULL only on error. */
struct template_value *template_getitem(struct template_render *r, const struct template_node *at,
                                        struct template_value *obj, struct template_value *key);
/* Items of an iterable as a list (new reference): list/tuple itself, dict keys, string
 * characters, undefined -> empty. NULL with an error for others. */
struct template_value *template_iterate(struct template_render *r, const struct template_node *at,
                                        struct template_value *v);

/* ==================================================================== filters, tests, methods */

/* Applies filter name to v (template_filters.c). New reference or NULL. */
struct template_value *template_apply_filter(struct template_render *r, const struct template_node *at,
                                             const char *name, size_t len, struct template_value *v,
                                             const struct template_callargs *a);
/* Runs test name on v; false with an error recorded when the test fails to run. */
bool template_apply_test(struct template_render *r, const struct template_node *at, const char *name,
                         size_t len, struct template_value *v, const struct template_callargs *a,
                         bool *result);
bool template_filter_exists(const char *name, size_t len);
bool template_test_exists(const char *name, size_t len);

/* The static name of a method of v called name, or NULL (template_methods.c). */
const char *template_method_lookup(const struct template_value *v, const char *name, size_t len);
struct template_value *template_call_method(struct template_render *r, const struct template_node *at,
                                            struct template_value *self, const char *name,
                                            const struct template_callargs *a);
struct template_value *template_call_builtin(struct template_render *r, const struct template_node *at,
                                             enum template_builtin b, const struct template_callargs *a);
/* Shared string helpers used by filters and methods. */
struct template_value *template_str_strip(struct template_render *r, const struct template_value *s,
                                          const struct template_value *chars, bool left, bool right);
struct template_value *template_str_replace(struct template_render *r, const struct template_node *at,
                                            const struct template_value *s, const struct template_value *old,
                                            const struct template_value *new_, int64_t count);
struct template_value *template_str_case(struct template_render *r, const struct template_value *s,
                                         int mode); /* 0 lower, 1 upper, 2 capitalize, 3 str.title */

#endif
