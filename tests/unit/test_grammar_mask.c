/* Token masks, checked by brute force: for small grammars whose whole language the test
 * lists itself, at random prefixes of random sentences, a token is allowed exactly when the
 * prefix followed by the token's bytes begins some sentence, and the state is accepting
 * exactly when the prefix is a sentence. For an infinite grammar (JSON), the mask is
 * compared with a plain byte-by-byte run of the matcher from the state, token by token, and
 * sentences drawn through the masks parse as JSON (jansson). */
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/grammar_mask.h"
#include "test.h"

static char err[HR_ERRLEN];

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

struct lang {
    char **s;
    int n, cap;
};

static void lang_add(struct lang *l, const char *s)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->s[i], s) == 0)
            return;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->s = realloc(l->s, (size_t)l->cap * sizeof *l->s);
    }
    l->s[l->n++] = strdup(s);
}

static void lang_free(struct lang *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->s[i]);
    free(l->s);
}

/* A small vocabulary: every string of 1 or 2 bytes over an alphabet, and some of 3. */
static void make_vocab(struct grammar_vocab *v, const char *alpha, int extra3)
{
    int na = (int)strlen(alpha);
    int n = na + na * na + extra3;
    char **b = calloc((size_t)n + 3, sizeof *b); /* 3 ids without bytes at the end */
    size_t *lens = calloc((size_t)n + 3, sizeof *lens);
    int k = 0;
    for (int i = 0; i < na; i++) {
        b[k] = malloc(1);
        b[k][0] = alpha[i];
        lens[k++] = 1;
    }
    for (int i = 0; i < na; i++)
        for (int j = 0; j < na; j++) {
            b[k] = malloc(2);
            b[k][0] = alpha[i];
            b[k][1] = alpha[j];
            lens[k++] = 2;
        }
    for (int e = 0; e < extra3; e++) {
        b[k] = malloc(3);
        for (int q = 0; q < 3; q++)
            b[k][q] = alpha[rnd() % (unsigned)na];
        lens[k++] = 3;
    }
    CHECK_OK(grammar_vocab_init(v, n + 3, (const char *const *)b, lens, NULL, err, sizeof err), err);
    for (int i = 0; i < n; i++)
        free(b[i]);
    free(b);
    free(lens);
}

static bool lang_has_prefix(const struct lang *l, const char *p, size_t n)
{
    for (int i = 0; i < l->n; i++)
        if (strlen(l->s[i]) >= n && memcmp(l->s[i], p, n) == 0)
            return true;
    return false;
}

static bool lang_has(const struct lang *l, const char *p, size_t n)
{
    for (int i = 0; i < l->n; i++)
        if (strlen(l->s[i]) == n && memcmp(l->s[i], p, n) == 0)
            return true;
    return false;
}

/* The brute-force check of one grammar against its listed language. */
static void check_finite(const char *gbnf, const struct lang *l, const char *alpha, int rounds)
{
    struct grammar g;
    enum hr_status st = gbnf_parse(gbnf, strlen(gbnf), &g, err, sizeof err);
    CHECK_MSG(st == HR_OK, "%s: %s", gbnf, err);
    if (st != HR_OK)
        return;
    struct grammar_vocab v;
    make_vocab(&v, alpha, 40);
    struct grammar_compiled *c;
    CHECK_OK(grammar_compile(&g, &v, 0, &c, err, sizeof err), err);
    struct matcher_set cur, tmp;
    matcher_set_init(&cur, MATCHER_SET_INTS, err, sizeof err);
    matcher_set_init(&tmp, MATCHER_SET_INTS, err, sizeof err);
    uint64_t *bits = calloc((size_t)c->words, 8);
    int bad = 0;
    for (int r = 0; r < rounds && bad < 5; r++) {
        const char *s = l->s[rnd() % (unsigned)l->n];
        size_t cut = rnd() % (strlen(s) + 1);
        matcher_start(&c->g, &cur);
        bool alive = true;
        for (size_t i = 0; i < cut && alive; i++) {
            alive = matcher_advance(&c->g, &cur, (uint8_t)s[i], &tmp);
            struct matcher_set t = cur;
            cur = tmp;
            tmp = t;
        }
        CHECK(alive);
        CHECK(matcher_accepting(&cur) == lang_has(l, s, cut));
        grammar_compiled_mask(c, &cur, bits);
        for (int t = 0; t < v.n_vocab; t++) {
            bool allowed = (bits[t >> 6] >> (t & 63)) & 1;
            bool expect = false;
            int rk = v.rank[t];
            if (rk >= 0) {
                char buf[64];
                memcpy(buf, s, cut);
                memcpy(buf + cut, grammar_vocab_bytes(&v, rk), v.len[rk]);
                expect = lang_has_prefix(l, buf, cut + v.len[rk]);
            }
            if (allowed != expect && bad++ < 5)
                fprintf(stderr, "  %s: prefix '%.*s' token %d '%.*s': mask %d, language %d\n", gbnf, (int)cut, s, t,
                        rk >= 0 ? v.len[rk] : 0, rk >= 0 ? (const char *)grammar_vocab_bytes(&v, rk) : "", allowed,
                        expect);
        }
    }
    CHECK(bad == 0);
    free(bits);
    matcher_set_free(&cur);
    matcher_set_free(&tmp);
    grammar_compiled_unref(c);
    grammar_vocab_free(&v);
}

static void test_finite_alternatives(void)
{
    struct lang l = {0};
    const char *w[] = {"ab", "a", "abc", "abx", "ax", "abcx"};
    for (int i = 0; i < 6; i++)
        lang_add(&l, w[i]);
    check_finite("root ::= (\"ab\" | \"a\" | \"abc\") \"x\"?", &l, "abcxy", 300);
    lang_free(&l);
}

static void test_finite_repeat(void)
{
    struct lang l = {0};
    const char *al = "abc";
    char s[4] = {0};
    for (int n = 1; n <= 3; n++) {
        int total = 1;
        for (int k = 0; k < n; k++)
            total *= 3;
        for (int x = 0; x < total; x++) {
            int y = x;
            for (int k = 0; k < n; k++) {
                s[k] = al[y % 3];
                y /= 3;
            }
            s[n] = 0;
            lang_add(&l, s);
        }
    }
    check_finite("root ::= [a-c]{1,3}", &l, "abcd", 400);
    lang_free(&l);
}

static void test_finite_nullable_rules(void)
{
    /* (x|)(|y|yy)(x|) */
    struct lang l = {0};
    const char *a[] = {"x", ""}, *b[] = {"", "y", "yy"};
    char s[8];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 2; k++) {
                snprintf(s, sizeof s, "%s%s%s", a[i], b[j], a[k]);
                lang_add(&l, s);
            }
    check_finite("root ::= a b a\na ::= \"x\" | \"\"\nb ::= \"y\"{0,2}\n", &l, "xyz", 300);
    lang_free(&l);
}

/* Repeated groups of nullable alternatives: every repetition may end either way, so the
 * matcher's paths through them double at each one; it must still expand them (it skips a
 * path that reaches the stack another one already expanded), and the masks agree. */
static void test_finite_nullable_repeat(void)
{
    struct lang l = {0};
    lang_add(&l, "o");
    lang_add(&l, "ox");
    check_finite("root ::= \"o\" (\"\" | \"\"){40} \"x\"?", &l, "oxa", 200);
    lang_free(&l);
    struct lang m = {0};
    char s[32] = "o";
    for (int n = 0; n <= 20; n++) {
        s[1 + n] = 0;
        lang_add(&m, s);
        s[1 + n] = 'a';
    }
    check_finite("root ::= \"o\" (\"a\"? | \"a\"?){20}", &m, "oax", 300);
    lang_free(&m);
    struct lang k = {0};
    char t[16];
    for (int n = 0; n <= 8; n++)
        for (int x = 0; x < (1 << n); x++) {
            for (int i = 0; i < n; i++)
                t[i] = (x >> i) & 1 ? 'b' : 'a';
            t[n] = '.';
            t[n + 1] = 0;
            lang_add(&k, t);
        }
    check_finite("root ::= (\"a\"? | \"b\"?){8} \".\"", &k, "ab.", 300);
    lang_free(&k);
}

static void test_finite_utf8(void)
{
    /* é = C3 A9, ê = C3 AA, ü = C3 BC; the vocabulary splits them. */
    struct lang l = {0};
    const char *w[] = {"\xC3\xA9", "\xC3\xAA", "\xC3\xBC", "q\xC3\xA9", "q\xC3\xAA", "q\xC3\xBC"};
    for (int i = 0; i < 6; i++)
        lang_add(&l, w[i]);
    check_finite("root ::= \"q\"? ([é-ê] | \"ü\")", &l, "q\xC3\xA9\xAA\xBC", 300);
    lang_free(&l);
}

static void test_finite_nested_rules(void)
{
    /* A rule's end inside a token: "k" then v then ")" with v ending mid-token. */
    struct lang l = {0};
    const char *w[] = {"(k=1)", "(k=22)", "(k=1);", "(k=22);", "()", "();"};
    for (int i = 0; i < 6; i++)
        lang_add(&l, w[i]);
    check_finite("root ::= \"(\" kv? \")\" \";\"?\nkv ::= \"k=\" val\nval ::= \"1\" | \"22\"\n", &l, "(k=12);)", 500);
    lang_free(&l);
}

static const char *json_gbnf =
    "root ::= value\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws (pair (\",\" ws pair)*)? \"}\" ws\n"
    "pair ::= string \":\" ws value\n"
    "array ::= \"[\" ws (value (\",\" ws value)*)? \"]\" ws\n"
    "string ::= \"\\\"\" ([^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}))* \"\\\"\" ws\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,2})? ws\n"
    "ws ::= [ ]?\n";

/* A JSON-ish vocabulary: punctuation, digits, words, pieces with quotes and brackets. */
static void json_vocab(struct grammar_vocab *v)
{
    const char *toks[] = {"{", "}", "[", "]", ",", ":", "\"", " ", "\":", "\",", "\"}", "{\"", "[\"", "[{",
                          "}]", "},", "],", "0", "1", "2", "9", "12", "-", ".", "e", "E", "+", "true", "false",
                          "null", "tr", "ue", "fa", "lse", "nu", "ll", "a", "b", "ab", "name", "\\", "\\n", "\\u",
                          "00e9", "\\\"", "\xC3", "\xA9", "\xC3\xA9", "\n", "\x01", "x", " \"", "\": ", ", ",
                          "\"a\"", "1.5", "-0", "3e", "{}", "[]", "\"\"", "}}", "]]", "nulls", "true,",
                          "@", "c", "y", ".0", "ab@", "a.", "@x", "\"v\":", "\"k\":[", "v", "k", "\"b\\\"c\"",
                          "-3", "-1", "\"c\":[\"", "ab\"", "z@a.bc", "@a", "1,", "2]", "\"]", "c@", "bc"};
    int n = (int)(sizeof toks / sizeof toks[0]);
    const char *all[160] = {0};
    size_t lens[160] = {0};
    memcpy(all, toks, sizeof toks);
    for (int i = 0; i < n; i++)
        lens[i] = strlen(toks[i]);
    CHECK_OK(grammar_vocab_init(v, n + 2, all, lens, NULL, err, sizeof err), err);
}

/* A token is allowed iff the matcher takes all its bytes from the state. */
static bool direct_allowed(const struct grammar *g, const struct matcher_set *state, const uint8_t *b, int n)
{
    struct matcher_set x, y;
    matcher_set_init(&x, MATCHER_SET_INTS, err, sizeof err);
    matcher_set_init(&y, MATCHER_SET_INTS, err, sizeof err);
    matcher_set_copy(&x, state);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        ok = matcher_advance(g, &x, b[i], &y);
        struct matcher_set t = x;
        x = y;
        y = t;
    }
    matcher_set_free(&x);
    matcher_set_free(&y);
    return ok;
}

/* Masks against the plain matcher at every step of random walks through the masks; complete
 * sentences must parse as JSON when json is set. */
static void check_walks(const char *gbnf, bool json, int rounds, int min_complete)
{
    struct grammar g;
    enum hr_status pst = gbnf_parse(gbnf, strlen(gbnf), &g, err, sizeof err);
    CHECK_MSG(pst == HR_OK, "%s", err);
    if (pst != HR_OK)
        return;
    struct grammar_vocab v;
    json_vocab(&v);
    struct grammar_compiled *c;
    CHECK_OK(grammar_compile(&g, &v, 0, &c, err, sizeof err), err);
    struct grammar_seq s;
    int32_t eos = v.n_vocab - 1;
    int bad = 0, complete = 0;
    for (int round = 0; round < rounds; round++) {
        CHECK_OK(grammar_seq_init(&s, c, -1, err, sizeof err), err);
        char out[4096];
        size_t len = 0;
        for (int step = 0; step < 200; step++) {
            float logits[160];
            for (int t = 0; t < v.n_vocab; t++)
                logits[t] = 0.0f;
            enum hr_status st = grammar_mask_apply(&s, logits, v.n_vocab, &eos, 1, err, sizeof err);
            CHECK_MSG(st == HR_OK, "%s", err);
            if (st != HR_OK)
                break;
            for (int t = 0; t < v.n_vocab - 2; t++) {
                int rk = v.rank[t];
                bool want = direct_allowed(&c->g, &s.cur, grammar_vocab_bytes(&v, rk), v.len[rk]);
                if ((logits[t] == 0.0f) != want && bad++ < 5)
                    fprintf(stderr, "  json: after '%.*s' token '%.*s': mask %d, matcher %d\n", (int)len, out,
                            v.len[rk], grammar_vocab_bytes(&v, rk), logits[t] == 0.0f, want);
            }
            CHECK((logits[eos] == 0.0f) == matcher_accepting(&s.cur));
            CHECK(logits[v.n_vocab - 2] != 0.0f); /* a token without bytes never */
            /* Draw: after 20 steps prefer closing tokens so sentences end. */
            int cand[160], nc = 0;
            for (int t = 0; t < v.n_vocab; t++)
                if (logits[t] == 0.0f)
                    cand[nc++] = t;
            CHECK(nc > 0);
            if (nc == 0)
                break;
            int pick = cand[rnd() % (unsigned)nc];
            if (step > 20) {
                for (int q = 0; q < nc; q++) {
                    int rk = v.rank[cand[q]];
                    if (cand[q] == eos || (rk >= 0 && strchr("}]\"0", grammar_vocab_bytes(&v, rk)[0]))) {
                        pick = cand[q];
                        if (cand[q] == eos)
                            break;
                    }
                }
            }
            if (pick == eos) {
                out[len] = 0;
                if (json) {
                    json_error_t je;
                    json_t *j = json_loadb(out, len, JSON_DECODE_ANY, &je);
                    CHECK_MSG(j != NULL, "'%s' is not JSON: %s", out, je.text);
                    json_decref(j);
                }
                complete++;
                break;
            }
            int rk = v.rank[pick];
            memcpy(out + len, grammar_vocab_bytes(&v, rk), v.len[rk]);
            len += v.len[rk];
            CHECK_OK(grammar_seq_advance(&s, pick, false, err, sizeof err), err);
        }
        grammar_seq_free(&s);
    }
    CHECK(bad == 0);
    CHECK_MSG(complete >= min_complete, "%d sentences complete", complete);
    CHECK(c->stats.cache_hits > 0);
    grammar_compiled_unref(c);
    grammar_vocab_free(&v);
}

static void test_json_masks_and_sentences(void)
{
    check_walks(json_gbnf, true, 200, 150);
}

/* Schema grammars: bounded strings (chains), shared and recursive rules, several return
 * positions per rule: the per-context precomputation against the plain matcher. */
static void test_schema_masks(void)
{
    const char *schemas[] = {
        ("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":3},"
        "\"b\":{\"type\":\"string\",\"maxLength\":3},\"c\":{\"type\":\"array\",\"items\":{\"type\":"
        "\"string\",\"minLength\":1,\"maxLength\":2},\"maxItems\":3}},\"required\":[\"a\"]}"),
        ("{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\",\"minimum\":0,"
        "\"maximum\":12},\"k\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},\"maxItems\":2}},"
        "\"required\":[\"v\"]}},\"$ref\":\"#/$defs/n\"}"),
        ("{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"string\",\"format\":\"email\"},{\"type\":\"null\"},"
        "{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\\\"c\"]}}]}"),
        "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\",\"maximum\":-3}}",
    };
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++) {
        char *g = NULL;
        CHECK_OK(json_schema_text_to_gbnf(schemas[i], strlen(schemas[i]), &g, err, sizeof err), err);
        if (g)
            check_walks(g, true, 60, 20);
        free(g);
    }
    /* A regex with bounded repetitions inside a group repeated a bounded number of times. */
    char *g = NULL;
    const char *re = "([a-c]{1,3}(\\.[0-2]{1,2}){0,2}@){1,2}[xy]";
    CHECK_OK(regex_grammar(re, strlen(re), &g, err, sizeof err), err);
    if (g)
        check_walks(g, false, 60, 20);
    free(g);
}

/* The constraint of a reasoning model starts after its </think> token: nothing is masked
 * before, and the grammar then runs from its start. */
static void test_after_think(void)
{
    const char *text = "root ::= \"ab\"";
    struct grammar g;
    CHECK_OK(gbnf_parse(text, strlen(text), &g, err, sizeof err), err);
    struct grammar_vocab v;
    make_vocab(&v, "abt", 0);
    struct grammar_compiled *c;
    CHECK_OK(grammar_compile(&g, &v, 0, &c, err, sizeof err), err);
    int32_t think = v.ids[v.n_tok - 1], eos = v.n_vocab - 1; /* "tt" plays </think> */
    struct grammar_seq s;
    CHECK_OK(grammar_seq_init(&s, c, think, err, sizeof err), err);
    float logits[64];
    for (int round = 0; round < 2; round++) {
        for (int t = 0; t < v.n_vocab; t++)
            logits[t] = 1.0f;
        CHECK_OK(grammar_mask_apply(&s, logits, v.n_vocab, &eos, 1, err, sizeof err), err);
        bool all = true;
        for (int t = 0; t < v.n_vocab; t++)
            all = all && logits[t] == 1.0f;
        CHECK(all); /* before </think>: unconstrained */
        CHECK(grammar_seq_accepting(&s));
        CHECK_OK(grammar_seq_advance(&s, v.ids[0], false, err, sizeof err), err); /* any text while thinking */
    }
    CHECK_OK(grammar_seq_advance(&s, think, false, err, sizeof err), err);
    for (int t = 0; t < v.n_vocab; t++)
        logits[t] = 1.0f;
    CHECK_OK(grammar_mask_apply(&s, logits, v.n_vocab, &eos, 1, err, sizeof err), err);
    int allowed = 0;
    for (int t = 0; t < v.n_vocab; t++)
        allowed += logits[t] == 1.0f;
    int32_t ab = -1;
    for (int k = 0; k < v.n_tok; k++)
        if (v.len[k] == 2 && !memcmp(grammar_vocab_bytes(&v, k), "ab", 2))
            ab = v.ids[k];
    CHECK(allowed == 2 && logits[ab] == 1.0f && logits[eos] != 1.0f); /* "a" and "ab" */
    CHECK(!grammar_seq_accepting(&s));
    CHECK_OK(grammar_seq_advance(&s, ab, false, err, sizeof err), err);
    CHECK(grammar_seq_accepting(&s));
    for (int t = 0; t < v.n_vocab; t++)
        logits[t] = 1.0f;
    CHECK_OK(grammar_mask_apply(&s, logits, v.n_vocab, &eos, 1, err, sizeof err), err);
    CHECK(logits[eos] == 1.0f && logits[ab] != 1.0f);
    CHECK(grammar_mask_apply(&s, logits, v.n_vocab, NULL, 0, err, sizeof err) == HR_ERR_NOT_FOUND);
    CHECK(grammar_seq_advance(&s, ab, false, err, sizeof err) == HR_ERR_INVALID && strstr(err, "not allowed"));
    grammar_seq_free(&s);
    grammar_compiled_unref(c);
    grammar_vocab_free(&v);
}

/* The limit on grammar positions: a grammar needing exactly max_positions compiles, one more
 * is refused before any precomputation, with a message naming the limit. */
static void test_position_limit(void)
{
    const char *text = "root ::= \"a\" item \"b\" item (\"c\" item)*\nitem ::= \"xy\" ([p-t] \"-\" [0-9])* \"z\"\n";
    struct grammar_vocab v;
    make_vocab(&v, "abcxyzpqrst-0123456789", 0);
    struct grammar g;
    struct grammar_compiled *c = NULL;
    CHECK_OK(gbnf_parse(text, strlen(text), &g, err, sizeof err), err);
    CHECK_OK(grammar_compile(&g, &v, 0, &c, err, sizeof err), err);
    int need = 0, bytes = 0;
    for (int p = 0; c && p < c->g.n_elems; p++)
        if (c->g.elems[p].kind == GRAMMAR_ELEM_BYTES) {
            need += c->pos[p].n;
            bytes++;
        }
    CHECK_MSG(need > bytes, "%d positions, %d bytes: the test wants some position with several contexts", need, bytes);
    grammar_compiled_unref(c);
    for (int d = 0; d < 2; d++) {
        c = NULL;
        CHECK_OK(gbnf_parse(text, strlen(text), &g, err, sizeof err), err);
        enum hr_status st = grammar_compile(&g, &v, need - d, &c, err, sizeof err);
        char want[64];
        snprintf(want, sizeof want, "limit on grammar positions is %d", need - d);
        if (d == 0)
            CHECK_MSG(st == HR_OK && c, "%s", err);
        else
            CHECK_MSG(st == HR_ERR_INVALID && !c && strstr(err, want), "%s", err);
        grammar_compiled_unref(c);
        CHECK(g.elems == NULL); /* owned either way */
    }
    grammar_vocab_free(&v);
}

int main(void)
{
    TEST_RUN(test_finite_alternatives);
    TEST_RUN(test_finite_repeat);
    TEST_RUN(test_finite_nullable_rules);
    TEST_RUN(test_finite_nullable_repeat);
    TEST_RUN(test_finite_utf8);
    TEST_RUN(test_finite_nested_rules);
    TEST_RUN(test_json_masks_and_sentences);
    TEST_RUN(test_schema_masks);
    TEST_RUN(test_after_think);
    TEST_RUN(test_position_limit);
    TEST_END();
}
