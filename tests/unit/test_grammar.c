/* The grammar front ends: GBNF (syntax errors with line and column, undefined rules, left
 * recursion, empty languages, limits), JSON Schema (the language of each keyword, checked by
 * running the matcher over strings the test lists or enumerates; unsupported keywords named
 * with their path), regex (translation and refusals), and the grammar cache. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "grammar/gbnf.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "server/structured.h"
#include "test.h"

static char err[HR_ERRLEN];

/* Whether the grammar accepts s exactly. */
static bool accepts(const struct grammar *g, const char *s, size_t n)
{
    struct matcher_set a, b;
    matcher_set_init(&a, MATCHER_SET_INTS, err, sizeof err);
    matcher_set_init(&b, MATCHER_SET_INTS, err, sizeof err);
    matcher_start(g, &a);
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        ok = matcher_advance(g, &a, (uint8_t)s[i], &b);
        struct matcher_set t = a;
        a = b;
        b = t;
    }
    ok = ok && matcher_accepting(&a);
    matcher_set_free(&a);
    matcher_set_free(&b);
    return ok;
}

static bool schema_grammar(const char *schema, struct grammar *g)
{
    char *text = NULL;
    enum hr_status st = json_schema_text_to_gbnf(schema, strlen(schema), &text, err, sizeof err);
    if (st == HR_OK)
        st = gbnf_parse(text, strlen(text), g, err, sizeof err);
    free(text);
    CHECK_MSG(st == HR_OK, "%s: %s", schema, err);
    return st == HR_OK;
}

static void gbnf_fails(const char *text, const char *want)
{
    struct grammar g;
    enum hr_status st = gbnf_parse(text, strlen(text), &g, err, sizeof err);
    CHECK_MSG(st == HR_ERR_INVALID && strstr(err, want), "'%s': %s (want '%s')", text, err, want);
    if (st == HR_OK)
        grammar_free(&g);
}

static void test_gbnf_errors(void)
{
    gbnf_fails("root ::= \"a\"\nitem ::= [a-z\n", "line 2, column 14: unterminated character class");
    gbnf_fails("root ::= \"a\n", "line 1, column 12: unterminated string literal");
    gbnf_fails("root ::= \"a\" )\n", "line 1, column 14: unexpected ')'");
    gbnf_fails("root ::= x\n\n  # c\nx ::= (\"a\" | \"b\"\ny ::= \"c\"\n", "line 5, column 1: a '(' is not closed");
    gbnf_fails("root = \"a\"", "line 1, column 6: expected '::='");
    gbnf_fails("root ::= \"\\q\"", "unknown escape");
    gbnf_fails("root ::= [z-a]", "backwards");
    gbnf_fails("root ::= \"a\"{3,1}", "below the minimum");
    gbnf_fails("root ::= \"a\"{20000}", "above 10000");
    gbnf_fails("root ::= *", "nothing before it to repeat");
    gbnf_fails("root ::= a\n", "rule 'a' is used but never defined");
    gbnf_fails("root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule 'root' is defined twice");
    gbnf_fails("start ::= \"a\"", "no rule named 'root'");
    gbnf_fails("root ::= a \"x\"\na ::= b | \"y\"\nb ::= \"\" root\n", "left recursion");
    gbnf_fails("root ::= \"a\" root", "accepts nothing");
    gbnf_fails("root ::= [^\\x00-\\U0010FFFF]", "accepts nothing");
    gbnf_fails("root ::= []", "accepts nothing"); /* an empty class matches no character */
    gbnf_fails("root ::= \"\xC3\"", "invalid UTF-8");
    char nul[] = "root ::= \"a\"\0";
    struct grammar g;
    CHECK(gbnf_parse(nul, sizeof nul - 1, &g, err, sizeof err) == HR_ERR_INVALID && strstr(err, "NUL"));
}

static void test_gbnf_language(void)
{
    const char *text = "root ::= (item \",\")* item? # trailing comment\n"
                       "item ::= [a-c] [0-9]{1,2} | \"é\" | \"\\u00e8\" | .\n";
    struct grammar g;
    CHECK_OK(gbnf_parse(text, strlen(text), &g, err, sizeof err), err);
    CHECK(accepts(&g, "", 0));
    CHECK(accepts(&g, "a1,b22,c3", 9));
    CHECK(accepts(&g, "a1,", 3));
    CHECK(!accepts(&g, "a123", 4));
    CHECK(accepts(&g, "\xC3\xA9,\xC3\xA8", 5));
    CHECK(accepts(&g, "\xE2\x82\xAC", 3)); /* . takes one character, of any length */
    CHECK(!accepts(&g, "\xE2\x82", 2));
    CHECK(!accepts(&g, "\xED\xA0\x80", 3)); /* no surrogates */
    grammar_free(&g);
}

/* Empty classes: [] matches no character, [^] any one. */
static void test_gbnf_empty_class(void)
{
    struct grammar g;
    const char *text = "root ::= \"a\" | [] \"b\" | \"c\" [^]";
    CHECK_OK(gbnf_parse(text, strlen(text), &g, err, sizeof err), err);
    CHECK(accepts(&g, "a", 1));
    CHECK(!accepts(&g, "b", 1));
    CHECK(accepts(&g, "cz", 2));
    CHECK(accepts(&g, "c\xC3\xA9", 3));
    CHECK(!accepts(&g, "c", 1));
    grammar_free(&g);
}

static void test_schema_integers(void)
{
    static const struct {
        const char *schema;
        long lo, hi;
    } cases[] = {
        {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", -12, 305},
        {"{\"type\":\"integer\",\"minimum\":7,\"maximum\":7}", 7, 7},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":-3,\"exclusiveMaximum\":100}", -2, 99},
        {"{\"type\":\"integer\",\"minimum\":95}", 95, 1L << 40},
        {"{\"type\":\"integer\",\"maximum\":-31}", -(1L << 40), -31},
        {"{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":20.5}", 2, 20},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct grammar g;
        if (!schema_grammar(cases[k].schema, &g))
            continue;
        int bad = 0;
        for (long x = -1100; x <= 1100; x++) {
            char s[32];
            int n = snprintf(s, sizeof s, "%ld", x);
            bool want = x >= cases[k].lo && x <= cases[k].hi;
            if (accepts(&g, s, (size_t)n) != want && bad++ < 3)
                fprintf(stderr, "  %s: %ld\n", cases[k].schema, x);
        }
        CHECK(bad == 0);
        CHECK(!accepts(&g, "007", 3) && !accepts(&g, "-0", 2) && !accepts(&g, "1.0", 3));
        grammar_free(&g);
    }
}

static void test_schema_strings_and_values(void)
{
    struct grammar g;
    if (schema_grammar("{\"type\":\"string\",\"minLength\":1,\"maxLength\":3}", &g)) {
        CHECK(!accepts(&g, "\"\"", 2));
        CHECK(accepts(&g, "\"a\"", 3) && accepts(&g, "\"abc\"", 5) && !accepts(&g, "\"abcd\"", 6));
        CHECK(accepts(&g, "\"\xC3\xA9\xC3\xA9\xC3\xA9\"", 8));    /* characters, not bytes */
        CHECK(accepts(&g, "\"\\n\\u00e9\\\"\"", 12));               /* an escape is one character */
        CHECK(!accepts(&g, "\"\n\"", 3) && !accepts(&g, "\"\\x\"", 4)); /* no raw controls, no bad escapes */
        grammar_free(&g);
    }
    if (schema_grammar("{\"enum\":[\"a\\\"b\",1,null,{\"k\":[true]}]}", &g)) {
        CHECK(accepts(&g, "\"a\\\"b\"", 6) && accepts(&g, "1", 1) && accepts(&g, "null", 4));
        CHECK(accepts(&g, "{\"k\":[true]}", 12) && !accepts(&g, "\"ab\"", 4) && !accepts(&g, "2", 1));
        grammar_free(&g);
    }
    if (schema_grammar("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"},"
                       "\"c\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}},\"required\":[\"b\"]}",
                       &g)) {
        const char *yes[] = {"{\"b\":null}", "{\"a\":true,\"b\":null}", "{\"b\":null,\"c\":3}",
                             "{\"a\":false,\"b\":null,\"c\":0}"};
        const char *no[] = {"{}", "{\"a\":true}", "{\"b\":null,\"a\":true}", "{\"b\":null,\"d\":1}",
                            "{\"b\":null,}", "{ \"b\":null}", "{\"a\":true,,\"b\":null}"};
        for (size_t i = 0; i < 4; i++)
            CHECK_MSG(accepts(&g, yes[i], strlen(yes[i])), "%s", yes[i]);
        for (size_t i = 0; i < 7; i++)
            CHECK_MSG(!accepts(&g, no[i], strlen(no[i])), "%s", no[i]);
        grammar_free(&g);
    }
    if (schema_grammar("{\"type\":\"array\",\"prefixItems\":[{\"const\":1},{\"const\":2}],\"items\":{\"const\":0},"
                       "\"minItems\":1,\"maxItems\":4}",
                       &g)) {
        const char *yes[] = {"[1]", "[1,2]", "[1,2,0]", "[1,2,0,0]"};
        const char *no[] = {"[]", "[2]", "[1,0]", "[1,2,0,0,0]", "[1,2,3]"};
        for (size_t i = 0; i < 4; i++)
            CHECK_MSG(accepts(&g, yes[i], strlen(yes[i])), "%s", yes[i]);
        for (size_t i = 0; i < 5; i++)
            CHECK_MSG(!accepts(&g, no[i], strlen(no[i])), "%s", no[i]);
        grammar_free(&g);
    }
    if (schema_grammar("{\"type\":\"string\",\"format\":\"date\"}", &g)) {
        CHECK(accepts(&g, "\"2024-02-28\"", 12) && accepts(&g, "\"1999-12-31\"", 12));
        CHECK(!accepts(&g, "\"2024-13-01\"", 12) && !accepts(&g, "\"2024-04-31\"", 12) &&
              !accepts(&g, "\"2024-02-30\"", 12));
        grammar_free(&g);
    }
    if (schema_grammar("{\"$defs\":{\"l\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"array\",\"prefixItems\":"
                       "[{\"const\":1},{\"$ref\":\"#/$defs/l\"}],\"items\":false,\"minItems\":2}]}},\"$ref\":\"#/$defs/l\"}",
                       &g)) {
        CHECK(accepts(&g, "null", 4) && accepts(&g, "[1,null]", 8) && accepts(&g, "[1,[1,[1,null]]]", 16));
        CHECK(!accepts(&g, "[1]", 3) && !accepts(&g, "[1,[1]]", 7));
        grammar_free(&g);
    }
    if (schema_grammar("{\"type\":\"string\",\"pattern\":\"^a\\\"?[0-9]+$\"}", &g)) {
        CHECK(accepts(&g, "\"a\\\"12\"", 7) && accepts(&g, "\"a0\"", 4) && !accepts(&g, "\"a\"12\"", 6));
        grammar_free(&g);
    }
}

static void schema_fails(const char *schema, const char *want)
{
    char *text = NULL;
    enum hr_status st = json_schema_text_to_gbnf(schema, strlen(schema), &text, err, sizeof err);
    CHECK_MSG(st == HR_ERR_INVALID && strstr(err, want), "%s: %s (want '%s')", schema, err, want);
    free(text);
}

static void test_schema_errors(void)
{
    schema_fails("{\"type\": ", "not valid JSON");
    schema_fails("{\"type\":\"object\",\"minProperties\":1}", "unsupported keyword 'minProperties' at #");
    schema_fails("{\"properties\":{\"a\":{\"items\":{\"uniqueItems\":true}}}}",
                 "unsupported keyword 'uniqueItems' at #/properties/a/items");
    schema_fails("{\"not\":{}}", "unsupported keyword 'not'");
    schema_fails("{\"type\":\"string\",\"format\":\"ipv4\"}", "unsupported string format 'ipv4'");
    schema_fails("{\"type\":\"number\",\"minimum\":0}", "'minimum' at # on type number");
    schema_fails("{\"type\":\"integer\",\"minimum\":3,\"maximum\":2}", "no integer");
    schema_fails("{\"$ref\":\"#/$defs/missing\"}", "names nothing");
    schema_fails("{\"$ref\":\"http://example.com/s.json\"}", "only references into this schema");
    schema_fails("{\"type\":\"object\",\"required\":[\"x\"]}", "'x' is not in 'properties'");
    schema_fails("{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}", "no array satisfies");
    schema_fails("{\"type\":\"string\",\"maxLength\":100000}", "at most 512");
    schema_fails("{\"type\":\"wat\"}", "unknown type 'wat'");
    schema_fails("false", "nothing is valid");
    schema_fails("{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":2}]}", "allOf of object schemas");
    schema_fails("{\"type\":\"string\",\"pattern\":\"(a\"}", "'pattern' at #: regex error");
    char deep[4096] = {0};
    size_t n = 0;
    for (int i = 0; i < 100; i++)
        n += (size_t)snprintf(deep + n, sizeof deep - n, "{\"items\":");
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{}");
    for (int i = 0; i < 100; i++)
        deep[n++] = '}';
    schema_fails(deep, "nested deeper than");
}

/* Each string of yes is accepted, each of no refused (strings are JSON texts). */
static void schema_lang(const char *schema, const char *const *yes, const char *const *no)
{
    struct grammar g;
    if (!schema_grammar(schema, &g))
        return;
    for (int i = 0; yes[i]; i++)
        CHECK_MSG(accepts(&g, yes[i], strlen(yes[i])), "%s should accept %s", schema, yes[i]);
    for (int i = 0; no[i]; i++)
        CHECK_MSG(!accepts(&g, no[i], strlen(no[i])), "%s should refuse %s", schema, no[i]);
    grammar_free(&g);
}

/* Keywords in combination: each is enforced (the outputs are exactly the intersection) or the
 * combination is refused by name; none is dropped. */
static void test_schema_combinations(void)
{
    /* enum/const filtered by type */
    schema_lang("{\"type\":\"string\",\"enum\":[\"a\",1,null,\"b\"]}", (const char *[]){"\"a\"", "\"b\"", NULL},
                (const char *[]){"1", "null", NULL});
    schema_lang("{\"type\":[\"integer\",\"null\"],\"enum\":[1,2.5,\"x\",3,null,4.0]}",
                (const char *[]){"1", "3", "null", "4.0", NULL}, (const char *[]){"2.5", "\"x\"", NULL});
    schema_lang("{\"const\":\"a\",\"enum\":[\"a\",\"b\"]}", (const char *[]){"\"a\"", NULL},
                (const char *[]){"\"b\"", NULL});
    schema_fails("{\"type\":\"string\",\"const\":5}", "no value of 'const' satisfies 'type'");
    schema_fails("{\"type\":\"boolean\",\"enum\":[1,\"x\"]}", "no value of 'enum' satisfies 'type'");
    schema_fails("{\"const\":\"c\",\"enum\":[\"a\"]}", "satisfies both 'const' and 'enum'");
    schema_fails("{\"enum\":[\"a\",\"bbb\"],\"maxLength\":2}", "'enum' together with 'maxLength' at #");
    schema_fails("{\"const\":1,\"anyOf\":[{\"type\":\"integer\"}]}", "'const' together with 'anyOf' at #");
    schema_fails("{\"type\":\"strin\",\"enum\":[\"a\"]}", "unknown type 'strin'");
    /* anyOf/oneOf with keywords beside it: each branch intersected with them */
    schema_lang("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},"
                "\"b\":{\"type\":\"boolean\"}},\"anyOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}",
                (const char *[]){"{\"a\":1}", "{\"b\":true}", "{\"a\":1,\"b\":false}", NULL},
                (const char *[]){"{}", "{\"a\":10}", "{\"c\":1}", NULL});
    schema_lang("{\"type\":\"string\",\"oneOf\":[{\"maxLength\":2},{\"pattern\":\"^x+$\"}]}",
                (const char *[]){"\"ab\"", "\"xxxx\"", "\"\"", NULL},
                (const char *[]){"5", "\"abc\"", "null", "[]", NULL});
    schema_lang("{\"type\":[\"integer\",\"null\"],\"anyOf\":[{\"type\":\"number\"},{\"type\":\"string\"}]}",
                (const char *[]){"3", "-2", NULL}, (const char *[]){"null", "\"s\"", "1.5", NULL});
    schema_lang("{\"type\":\"object\",\"properties\":{\"k\":{\"const\":1}},\"required\":[\"k\"],"
                "\"anyOf\":[{\"properties\":{\"x\":{\"type\":\"boolean\"}},\"required\":[\"x\"]},{\"properties\":"
                "{\"k\":{\"const\":1}}}]}",
                (const char *[]){"{\"x\":true,\"k\":1}", "{\"k\":1}", NULL},
                (const char *[]){"{\"x\":true}", "{}", "{\"k\":2}", NULL});
    /* anyOf with allOf: each branch merged with the allOf */
    schema_lang("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"}},\"required\":[\"a\"]}],"
                "\"anyOf\":[{\"properties\":{\"b\":{\"const\":1}},\"required\":[\"b\"]},{\"properties\":{\"c\":"
                "{\"const\":2}},\"required\":[\"c\"]}]}",
                (const char *[]){"{\"a\":true,\"b\":1}", "{\"a\":false,\"c\":2}", NULL},
                (const char *[]){"{\"a\":true}", "{\"b\":1}", "{\"c\":2}", "{\"a\":true,\"b\":2}", NULL});
    schema_fails("{\"anyOf\":[{\"type\":\"string\"}],\"oneOf\":[{\"type\":\"integer\"}]}",
                 "'anyOf' together with 'oneOf' at #");
    schema_fails("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":3}],\"maxLength\":5}",
                 "'maxLength' both beside 'anyOf' and in its branch 0");
    schema_fails("{\"properties\":{\"a\":{\"type\":\"string\"}},\"anyOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}}}]}",
                 "property 'a' is defined both beside 'anyOf' and in its branch 0");
    schema_fails("{\"properties\":{\"a\":{\"type\":\"boolean\"}},\"additionalProperties\":false,\"anyOf\":[{\"properties\":"
                 "{\"b\":{\"type\":\"null\"}},\"required\":[\"b\"]}]}",
                 "property 'b' of branch 0 of 'anyOf' is not allowed by the additionalProperties beside it");
    schema_fails("{\"properties\":{\"a\":{\"type\":\"boolean\"}},\"oneOf\":[{\"properties\":{\"b\":{\"type\":\"null\"}},"
                 "\"additionalProperties\":false}]}",
                 "property 'a' beside 'oneOf' is not allowed by the additionalProperties of its branch 0");
    schema_lang("{\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"}},\"additionalProperties\":false,"
                "\"anyOf\":[{\"properties\":{\"b\":{\"type\":\"null\"}},\"required\":[\"b\"]},{\"required\":[\"a\"]}]}",
                (const char *[]){"{\"b\":null}", "{\"a\":true}", "{\"a\":true,\"b\":null}", NULL},
                (const char *[]){"{}", "{\"c\":1}", NULL});
    schema_fails("{\"type\":\"string\",\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}]}",
                 "no branch of 'anyOf' is compatible");
    /* a branch that refers back to its own schema: refused, quickly, not expanded forever */
    schema_fails("{\"$defs\":{\"x\":{\"type\":\"object\",\"anyOf\":[{\"$ref\":\"#/$defs/x\"},{\"$ref\":\"#/$defs/x\"}]}},"
                 "\"$ref\":\"#/$defs/x\"}",
                 "json schema: ");
    /* allOf: only an exact merge */
    schema_fails("{\"type\":\"string\",\"allOf\":[{\"properties\":{}}]}", "only allOf of object schemas");
    schema_fails("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"}},\"additionalProperties\":"
                 "false},{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"boolean\"}}}]}",
                 "additionalProperties false and another adds property 'b'");
    schema_fails("{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"boolean\"}}},{\"properties\":{\"a\":{\"type\":\"null\"}}}]}",
                 "property 'a' is defined differently by two parts");
    schema_fails("{\"allOf\":[{\"type\":\"object\",\"allOf\":[{\"properties\":{\"a\":{}}}]},{\"required\":[\"a\"]}]}",
                 "a nested 'allOf' in part 0");
    schema_lang("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"}},\"additionalProperties\":"
                "false},{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"}},\"required\":[\"a\"]}]}",
                (const char *[]){"{\"a\":true}", NULL}, (const char *[]){"{}", "{\"a\":true,\"b\":1}", NULL});
    /* no type: keywords of one type restrict the output to that type */
    schema_lang("{\"minLength\":2}", (const char *[]){"\"ab\"", NULL}, (const char *[]){"5", "\"a\"", "{}", NULL});
    schema_lang("{\"maxItems\":1}", (const char *[]){"[]", "[1]", NULL}, (const char *[]){"[1,2]", "1", NULL});
    schema_lang("{\"minimum\":3,\"maximum\":4}", (const char *[]){"3", "4", NULL},
                (const char *[]){"2", "5", "\"3\"", NULL});
    schema_fails("{\"minLength\":2,\"minItems\":1}", "keywords of different types ('minLength' and 'minItems')");
}

/* structured_outputs keys hearth would ignore are refused by name. */
static void test_structured_keys(void)
{
    static const struct {
        const char *body;
        const char *want; /* NULL: accepted */
    } cases[] = {
        {"{\"structured_outputs\":{\"json\":{\"type\":\"integer\"},\"disable_any_whitespace\":true}}", NULL},
        {"{\"structured_outputs\":{\"regex\":\"a+\",\"disable_fallback\":false}}", NULL},
        {"{\"structured_outputs\":{\"structural_tag\":\"{}\"}}", "'structured_outputs.structural_tag' is not supported"},
        {"{\"structured_outputs\":{\"json\":{},\"whitespace_pattern\":\" \"}}",
         "'structured_outputs.whitespace_pattern' is not supported"},
        {"{\"structured_outputs\":{\"disable_fallback\":\"yes\"}}", "'structured_outputs.disable_fallback'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_error_t je;
        json_t *root = json_loads(cases[i].body, 0, &je);
        struct structured_spec spec;
        char param[128] = "";
        enum hr_status st = structured_parse(root, false, NULL, &spec, param, sizeof param, err, sizeof err);
        if (!cases[i].want)
            CHECK_MSG(st == HR_OK, "%s: %s", cases[i].body, err);
        else
            CHECK_MSG(st == HR_ERR_INVALID && strstr(err, cases[i].want) && !strncmp(param, "structured_outputs.", 19),
                      "%s: %s (param %s)", cases[i].body, err, param);
        if (st == HR_OK)
            structured_free(&spec);
        json_decref(root);
    }
}

static void regex_fails(const char *re, const char *want)
{
    char *g = NULL;
    enum hr_status st = regex_grammar(re, strlen(re), &g, err, sizeof err);
    CHECK_MSG(st == HR_ERR_INVALID && strstr(err, want), "%s: %s (want '%s')", re, err, want);
    free(g);
}

static void test_regex(void)
{
    char *text = NULL;
    const char *re = "^(?:ab|c\\d{2,3})+[^\\sx]?\\.\\u00e9$";
    CHECK_OK(regex_grammar(re, strlen(re), &text, err, sizeof err), err);
    struct grammar g;
    if (text && gbnf_parse(text, strlen(text), &g, err, sizeof err) == HR_OK) {
        CHECK(accepts(&g, "ab.\xC3\xA9", 5) && accepts(&g, "c12abz.\xC3\xA9", 9) && accepts(&g, "c123.\xC3\xA9", 7));
        CHECK(!accepts(&g, "c1.\xC3\xA9", 5) && !accepts(&g, "abx.\xC3\xA9", 6) && !accepts(&g, "ab .\xC3\xA9", 6));
        CHECK(!accepts(&g, "ab\xC2\xA0.\xC3\xA9", 7)); /* \s holds U+00A0 */
        grammar_free(&g);
    }
    free(text);
    regex_fails("(ab", "missing ')'");
    regex_fails("ab)", "unmatched ')'");
    regex_fails("(a)\\1", "backreferences");
    regex_fails("a(?!b)", "lookaround");
    regex_fails("\\bword", "word boundaries");
    regex_fails("\\p{L}", "Unicode property");
    regex_fails("a**", "a quantifier after a quantifier");
    regex_fails("a{2,1}", "out of order");
    regex_fails("x^y", "'^' is supported only at the start");
    regex_fails("[b-a]", "out of order");
}

static void test_cache(void)
{
    /* A vocabulary of single bytes, through the cache with no tokenizer: built by hand. */
    struct grammar_cache c;
    grammar_cache_init(&c, NULL, 300, 2, 0);
    struct grammar_compiled *a = NULL;
    CHECK(grammar_cache_get(&c, HEARTH_GRAMMAR_REGEX, "a+", 2, &a, err, sizeof err) == HR_ERR_INVALID &&
          strstr(err, "no tokenizer"));
    grammar_cache_free(&c);
    grammar_cache_init(&c, NULL, 256, 2, 0);
    const char *bytes[256];
    size_t lens[256];
    char pool[256];
    for (int i = 0; i < 256; i++) {
        pool[i] = (char)i;
        bytes[i] = &pool[i];
        lens[i] = 1;
    }
    CHECK_OK(grammar_vocab_init(&c.vocab, 256, bytes, lens, NULL, err, sizeof err), err);
    c.vocab_ready = true;
    struct grammar_compiled *b = NULL, *x = NULL, *y = NULL;
    CHECK_OK(grammar_cache_get(&c, HEARTH_GRAMMAR_REGEX, "a+", 2, &a, err, sizeof err), err);
    CHECK_OK(grammar_cache_get(&c, HEARTH_GRAMMAR_REGEX, "a+", 2, &b, err, sizeof err), err);
    CHECK(a == b && c.hits == 1 && c.misses == 1);
    CHECK_OK(grammar_cache_get(&c, HEARTH_GRAMMAR_GBNF, "root ::= \"a\"", 12, &x, err, sizeof err), err);
    CHECK_OK(grammar_cache_get(&c, HEARTH_GRAMMAR_CHOICE, "[\"q\",\"r\"]", 9, &y, err, sizeof err), err);
    CHECK(c.n == 2); /* the least recently used went, its holders keep it */
    CHECK(atomic_load(&a->refs) == 2);
    CHECK(grammar_cache_get(&c, HEARTH_GRAMMAR_GBNF, "root ::= (", 10, &x, err, sizeof err) == HR_ERR_INVALID);
    CHECK(grammar_cache_get(&c, HEARTH_GRAMMAR_CHOICE, "[1]", 3, &x, err, sizeof err) == HR_ERR_INVALID &&
          strstr(err, "not a string"));
    grammar_compiled_unref(a);
    grammar_compiled_unref(b);
    grammar_cache_get(&c, HEARTH_GRAMMAR_GBNF, "root ::= \"a\"", 12, &x, err, sizeof err);
    grammar_compiled_unref(x);
    grammar_compiled_unref(x);
    grammar_compiled_unref(y);
    /* The default limit on grammar positions: a literal of GRAMMAR_MAX_POSITIONS bytes
     * compiles, one byte more is a clear error. */
    char want[192];
    snprintf(want, sizeof want, "%d token-mask positions (byte positions, each per context it is reached from), "
             "and the limit on grammar positions is %d", GRAMMAR_MAX_POSITIONS + 1, GRAMMAR_MAX_POSITIONS);
    for (int extra = 0; extra < 2; extra++) {
        size_t n = GRAMMAR_MAX_POSITIONS + (size_t)extra;
        char *src = malloc(n + 16);
        memcpy(src, "root ::= \"", 10);
        memset(src + 10, 'q', n);
        memcpy(src + 10 + n, "\"", 2);
        x = NULL;
        enum hr_status st = grammar_cache_get(&c, HEARTH_GRAMMAR_GBNF, src, strlen(src), &x, err, sizeof err);
        if (extra == 0)
            CHECK_MSG(st == HR_OK, "%s", err);
        else
            CHECK_MSG(st == HR_ERR_INVALID && strstr(err, want), "%s", err);
        grammar_compiled_unref(x);
        free(src);
    }
    grammar_cache_free(&c);
}

/* Forced tool calls: with parallel_tool_calls the grammar takes up to STRUCTURED_MAX_TOOL_CALLS
 * calls separated by a newline; without, exactly one; a named tool only that tool. */
static void test_tool_grammar(void)
{
    json_error_t je;
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
                               "\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}},"
                               "\"required\":[\"a\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]",
                               0, &je);
    CHECK(tools != NULL);
    const char *f1 = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":3}}\n</tool_call>";
    const char *g1 = "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
    char two[512], many[4096];
    snprintf(two, sizeof two, "%s\n%s", f1, g1);
    size_t n = 0;
    for (int i = 0; i <= STRUCTURED_MAX_TOOL_CALLS; i++)
        n += (size_t)snprintf(many + n, sizeof many - n, "%s%s", i ? "\n" : "", f1);
    size_t n_max = n - strlen(f1) - 1; /* exactly STRUCTURED_MAX_TOOL_CALLS calls */
    for (int mode = 0; mode < 3; mode++) {
        char *text = NULL;
        CHECK_OK(structured_tool_grammar(tools, mode == 2 ? "f" : NULL, mode == 0, &text, err, sizeof err), err);
        struct grammar g;
        if (!text || gbnf_parse(text, strlen(text), &g, err, sizeof err) != HR_OK) {
            CHECK_MSG(false, "tool grammar: %s", err);
            free(text);
            continue;
        }
        CHECK(accepts(&g, f1, strlen(f1)));
        CHECK(accepts(&g, g1, strlen(g1)) == (mode != 2));
        CHECK(!accepts(&g, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", 55)); /* a required */
        CHECK_MSG(accepts(&g, two, strlen(two)) == (mode == 0), "mode %d: two calls", mode);
        CHECK_MSG(accepts(&g, many, n_max) == (mode == 0), "mode %d: %d calls", mode, STRUCTURED_MAX_TOOL_CALLS);
        CHECK(!accepts(&g, many, n));
        CHECK(!accepts(&g, two, strlen(f1) + 1)); /* a dangling separator */
        grammar_free(&g);
        free(text);
    }
    json_decref(tools);
}

/* test_grammar --check-prefixes FILE: FILE is a JSON array of {"schema": S, "text": T}; each T
 * must be a prefix of a document the grammar of S accepts (the matcher over T's bytes stays
 * alive). For tests/e2e/structured.mjs: outputs cut by max_tokens, checked by the same
 * grammar the server masked with. Prints "ok"/"FAIL" lines and RESULT. */
static int check_prefixes(const char *path)
{
    json_error_t je;
    json_t *items = json_load_file(path, 0, &je);
    if (!json_is_array(items)) {
        printf("FAIL %s: %s (line %d)\nRESULT passed=0 failed=1\n", path, je.text, je.line);
        return 1;
    }
    int passed = 0, failed = 0;
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) {
        const char *text = json_string_value(json_object_get(it, "text"));
        char *gbnf = NULL;
        struct grammar g;
        enum hr_status st = text ? json_schema_to_gbnf(json_object_get(it, "schema"), &gbnf, err, sizeof err)
                                 : hr_err(err, sizeof err, HR_ERR_INVALID, "no text");
        if (st == HR_OK)
            st = gbnf_parse(gbnf, strlen(gbnf), &g, err, sizeof err);
        free(gbnf);
        if (st != HR_OK) {
            failed++;
            printf("FAIL prefix %zu: %s\n", i, err);
            continue;
        }
        struct matcher_set a, b;
        matcher_set_init(&a, MATCHER_SET_INTS, err, sizeof err);
        matcher_set_init(&b, MATCHER_SET_INTS, err, sizeof err);
        matcher_start(&g, &a);
        size_t n = strlen(text), k = 0;
        bool alive = true;
        for (; k < n && alive; k++) {
            alive = matcher_advance(&g, &a, (uint8_t)text[k], &b);
            struct matcher_set t = a;
            a = b;
            b = t;
        }
        if (alive) {
            passed++;
            printf("ok   prefix %zu (%zu bytes%s)\n", i, n, matcher_accepting(&a) ? ", complete" : "");
        } else {
            failed++;
            printf("FAIL prefix %zu: byte %zu of %s is not allowed\n", i, k - 1, text);
        }
        matcher_set_free(&a);
        matcher_set_free(&b);
        grammar_free(&g);
    }
    json_decref(items);
    printf("RESULT passed=%d failed=%d\n", passed, failed);
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--check-prefixes") == 0)
        return check_prefixes(argv[2]);
    TEST_RUN(test_gbnf_errors);
    TEST_RUN(test_gbnf_language);
    TEST_RUN(test_gbnf_empty_class);
    TEST_RUN(test_schema_integers);
    TEST_RUN(test_schema_strings_and_values);
    TEST_RUN(test_schema_errors);
    TEST_RUN(test_schema_combinations);
    TEST_RUN(test_structured_keys);
    TEST_RUN(test_regex);
    TEST_RUN(test_cache);
    TEST_RUN(test_tool_grammar);
    TEST_END();
}
