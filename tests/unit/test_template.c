/* Chat templates: the Jinja language features (expected strings written by hand from Python
 * Jinja2's semantics with trim_blocks and lstrip_blocks, as Hugging Face renders), every error
 * kind, the limits, the model loader and context, and concurrent rendering. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "test.h"
#include "template/template.h"

/* Renders src with the JSON context ctx (NULL: none). Returns the output or NULL (status in *st). */
static char *render(const char *src, const char *ctx, const struct chat_template_limits *lim,
                    enum hr_status *st, char *err, size_t errlen)
{
    struct chat_template ct;
    *st = chat_template_init(&ct, src, err, errlen);
    if (*st != HR_OK)
        return NULL;
    if (lim)
        ct.limits = *lim;
    json_t *j = NULL;
    if (ctx) {
        json_error_t je;
        j = json_loads(ctx, 0, &je);
        if (!j) {
            snprintf(err, errlen, "bad test context: %s", je.text);
            *st = HR_ERR_INTERNAL;
            chat_template_free(&ct);
            return NULL;
        }
    }
    char *out = NULL;
    size_t len = 0;
    *st = chat_template_render(&ct, j, &out, &len, err, errlen);
    if (*st == HR_OK && strlen(out) != len) {
        *st = HR_ERR_INTERNAL;
        snprintf(err, errlen, "length mismatch");
    }
    json_decref(j);
    chat_template_free(&ct);
    return out;
}

static void expect(int line, const char *src, const char *ctx, const char *want)
{
    char err[HR_ERRLEN] = "";
    enum hr_status st;
    char *got = render(src, ctx, NULL, &st, err, sizeof err);
    CHECK_MSG(st == HR_OK, "line %d: %s: %s", line, hr_status_str(st), err);
    if (got)
        CHECK_MSG(!strcmp(got, want), "line %d:\n    template: %s\n    want: [%s]\n    got:  [%s]", line, src, want, got);
    free(got);
}

#define EXPECT(src, ctx, want) expect(__LINE__, src, ctx, want)

/* The render fails with status want_st and a message containing each non-NULL needle. */
static void expect_err(int line, const char *src, const char *ctx, const struct chat_template_limits *lim,
                       enum hr_status want_st, const char *needle1, const char *needle2)
{
    char err[HR_ERRLEN] = "";
    enum hr_status st;
    char *got = render(src, ctx, lim, &st, err, sizeof err);
    CHECK_MSG(st == want_st, "line %d: want %s, got %s (%s) output [%s]", line, hr_status_str(want_st),
              hr_status_str(st), err, got ? got : "");
    CHECK_MSG(got == NULL, "line %d: output on error", line);
    if (needle1)
        CHECK_MSG(strstr(err, needle1) != NULL, "line %d: message '%s' lacks '%s'", line, err, needle1);
    if (needle2)
        CHECK_MSG(strstr(err, needle2) != NULL, "line %d: message '%s' lacks '%s'", line, err, needle2);
    free(got);
}

#define EXPECT_ERR(src, ctx, st, n1, n2) expect_err(__LINE__, src, ctx, NULL, st, n1, n2)

/* =========================================================================== syntax */

static void test_text_and_whitespace(void)
{
    EXPECT("plain text", NULL, "plain text");
    EXPECT("", NULL, "");
    EXPECT("abc\n", NULL, "abc");           /* one trailing newline is dropped */
    EXPECT("abc\n\n", NULL, "abc\n");
    EXPECT("a\r\nb\rc", NULL, "a\nb\nc");   /* newlines normalised */
    /* trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before it */
    EXPECT("a\n{% if true %}\nb\n{% endif %}\nc", NULL, "a\nb\nc");
    EXPECT("x\n    {% if true %}y{% endif %}", NULL, "x\ny");
    EXPECT("x\n  \t{% for i in [1, 2] %}\n  {{ i }}\n  {% endfor %}\nz", NULL, "x\n  1\n  2\nz");
    /* lstrip_blocks leaves print tags alone, and text before a tag on the same line */
    EXPECT("x\n  {{ 'y' }}", NULL, "x\n  y");
    EXPECT("x  {% if true %}y{% endif %}", NULL, "x  y");
    /* explicit control */
    EXPECT("a  \n {{- 'b' -}} \n  c", NULL, "abc");
    EXPECT("a\n  {%- if true -%}\n  b  {%- endif %}", NULL, "ab");
    EXPECT("x\n  {%+ if true %}y{% endif %}", NULL, "x\n  y");
    EXPECT("{% if true +%}\ny{% endif %}", NULL, "\ny");
    /* comments strip like blocks */
    EXPECT("a{# comment #}b", NULL, "ab");
    EXPECT("a\n  {# comment #}\nb", NULL, "a\nb");
    EXPECT("a {#- c -#} b", NULL, "ab");
    /* raw */
    EXPECT("{% raw %}{{ x }}{% if %}{% endraw %}", NULL, "{{ x }}{% if %}");
    /* a dict literal may contain }} */
    EXPECT("{{ {'a': {'b': 1}}['a']['b'] }}", NULL, "1");
    /* HF's generation tag renders its body */
    EXPECT("{% generation %}x{% endgeneration %}", NULL, "x");
    EXPECT("{% print 'a', 1 %}", NULL, "a1");
}

static void test_literals_and_output(void)
{
    EXPECT("{{ 42 }}|{{ -7 }}|{{ 1.5 }}|{{ 1.0 }}|{{ 1e3 }}|{{ 0x1F }}|{{ 1_000 }}", NULL,
           "42|-7|1.5|1.0|1000.0|31|1000");
    EXPECT("{{ true }}|{{ False }}|{{ none }}|{{ None }}|{{ nothing }}", NULL, "True|False|None|None|");
    EXPECT("{{ 'a\\tb\\n' }}|{{ \"it's\" }}|{{ 'x' 'y' }}", NULL, "a\tb\n|it's|xy");
    EXPECT("{{ '\\x41\\u00e9\\\\\\q' }}", NULL, "A\xc3\xa9\\\\q");
    EXPECT("{{ [1, 'a', none, true, 1.5, [2]] }}", NULL, "[1, 'a', None, True, 1.5, [2]]");
    EXPECT("{{ {'a': 1, 'b': [2, 'c']} }}", NULL, "{'a': 1, 'b': [2, 'c']}");
    EXPECT("{{ (1,) }}|{{ (1, 2) }}|{{ () }}", NULL, "(1,)|(1, 2)|()");
    EXPECT("{{ [\"it's\", 'say \"hi\"', 'both \\' \"', '\\n'] }}", NULL,
           "[\"it's\", 'say \"hi\"', 'both \\' \"', '\\n']");
    EXPECT("{{ 1, 2 }}", NULL, "(1, 2)");
    EXPECT("{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ 1.5e-5 }}|{{ 0.0001 }}|{{ -0.0 }}|{{ 123456789.125 }}", NULL,
           "0.30000000000000004|1e+16|1.5e-05|0.0001|-0.0|123456789.125");
}

static void test_operators(void)
{
    EXPECT("{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 % -3 }}", NULL,
           "7|9|3|-4|2|-2");
    EXPECT("{{ 7 / 2 }}|{{ 4 / 2 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 2 ** 3 ** 2 }}|{{ 1.5 + 1 }}", NULL,
           "3.5|2.0|1024|0.5|64|2.5");
    EXPECT("{{ 7.5 // 2 }}|{{ -7.5 % 2 }}|{{ true + 1 }}|{{ -true }}", NULL, "3.0|0.5|2|-1");
    EXPECT("{{ 'a' + 'b' }}|{{ 'ab' * 3 }}|{{ 2 * 'x' }}|{{ [1] + [2, 3] }}|{{ [0] * 3 }}", NULL,
           "ab|ababab|xx|[1, 2, 3]|[0, 0, 0]");
    EXPECT("{{ 1 ~ 'a' ~ none ~ true ~ nothing ~ [1] }}", NULL, "1aNoneTrue[1]");
    /* ~ binds tighter than + and looser than *: (1 ~ 2) + (3 ~ 4) */
    EXPECT("{{ 'x' ~ 2 * 3 }}|{{ 1 ~ 2 + 3 ~ 4 }}", NULL, "x6|1234");
    EXPECT("{{ 1 < 2 < 3 }}|{{ 1 < 2 > 3 }}|{{ 'a' < 'b' }}|{{ [1, 2] < [1, 3] }}|{{ 2 >= 2.0 }}", NULL,
           "True|False|True|True|True");
    EXPECT("{{ [1, 2] == [1, 2] }}|{{ 1 == 1.0 }}|{{ '1' == 1 }}|{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}|"
           "{{ none == none }}|{{ 1 != 2 }}",
           NULL, "True|True|False|True|True|True");
    EXPECT("{{ 'a' in 'cat' }}|{{ 2 not in [1, 3] }}|{{ 'k' in {'k': 1} }}|{{ 1 in [1.0] }}|{{ 'x' in nothing }}",
           NULL, "True|True|True|True|False");
    EXPECT("{{ 0 or 'x' }}|{{ 'a' and 'b' }}|[{{ '' and 'b' }}]|{{ not 0 }}|{{ not [] }}|{{ none or false }}", NULL,
           "x|b|[]|True|True|False");
    EXPECT("{{ 'y' if 1 else 'n' }}|{{ 'y' if 0 else 'n' }}|[{{ 'y' if 0 }}]|{{ 'a' if 0 else 'b' if 1 else 'c' }}",
           NULL, "y|n|[]|b");
    EXPECT("{{ not 1 == 2 }}|{{ -2 ** 2 }}|{{ (-2) ** 2 }}", NULL, "True|4|4");
    EXPECT("{{ '%s=%d (%.2f) %r %%' % ('a', 3, 1.5, 'q') }}|{{ '%s!' % 'x' }}|{{ '%5s|%-3d|' % ('ab', 7) }}",
           NULL, "a=3 (1.50) 'q' %|x!|   ab|7  |");
}

static void test_access_and_slices(void)
{
    const char *ctx = "{\"d\": {\"a\": 1, \"b\": {\"c\": [10, 20]}, \"items\": \"key\"}, \"l\": [1, 2, 3, 4, 5], "
                      "\"s\": \"h\\u00e9llo\"}";
    EXPECT("{{ d.a }}|{{ d['a'] }}|{{ d.b.c[1] }}|{{ d.b.c.0 }}|{{ d.zz }}|{{ d.zz.yy }}", ctx, "1|1|20|10||");
    EXPECT("{{ d['items'] }}|{{ d.items() | list | length }}", ctx, "key|3");
    EXPECT("{{ l[-1] }}|{{ l[9] }}|{{ l[1:3] }}|{{ l[::2] }}|{{ l[::-1] }}|{{ l[3:0:-1] }}|{{ l[-2:] }}|{{ l[:-3] }}",
           ctx, "5||[2, 3]|[1, 3, 5]|[5, 4, 3, 2, 1]|[4, 3, 2]|[4, 5]|[1, 2]");
    EXPECT("{{ s[1] }}|{{ s[1:3] }}|{{ s[::-1] }}|{{ s[-1] }}|{{ s|length }}", ctx,
           "\xc3\xa9|\xc3\xa9l|oll\xc3\xa9h|o|5");
    EXPECT("{{ l[100:] }}|{{ l[-100:1] }}|{{ 'abc'[5:] }}|{{ (1, 2, 3)[1:] }}", ctx, "[]|[1]||(2, 3)");
    /* lenient where Python raises UndefinedError (as the npm oracle is): an attribute of undefined is undefined */
    EXPECT("{{ none.x }}|{{ nothing.x.y }}|{{ nothing[0] }}", NULL, "||");
}

static void test_string_methods(void)
{
    EXPECT("{{ 'hELLo wORLD'.title() }}|{{ \"they're bill's 1st\".title() }}|{{ 'hELLO'.capitalize() }}", NULL,
           "Hello World|They'Re Bill'S 1St|Hello");
    EXPECT("{{ 'Abc \xc3\x89t\xc3\xa9'.upper() }}|{{ 'ABC \xc3\x89T\xc3\x89'.lower() }}|{{ 'aB'.swapcase() }}", NULL,
           "ABC \xc3\x89T\xc3\x89|abc \xc3\xa9t\xc3\xa9|Ab");
    EXPECT("[{{ '  x \\n'.strip() }}]|[{{ 'xxhixx'.strip('x') }}]|[{{ '\\n\\n  a\\n'.lstrip('\\n') }}]|"
           "[{{ 'a \\n\\n'.rstrip('\\n') }}]|[{{ '  a  '.lstrip() }}]|[{{ 'ab'.strip('') }}]",
           NULL, "[x]|[hi]|[  a\n]|[a ]|[a  ]|[ab]");
    EXPECT("{{ 'a,b,,c'.split(',') }}|{{ '  a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ ''.split(',') }}",
           NULL, "['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['']");
    EXPECT("{{ 'a b c'.rsplit(' ', 1) }}|{{ '  a b c  '.rsplit(None, 1) }}|{{ '  a b  '.split(None, 1) }}", NULL,
           "['a b', 'c']|['  a b', 'c']|['a', 'b  ']");
    EXPECT("{{ 'x</think>\\n\\ny'.split('</think>')[-1].lstrip('\\n') }}", NULL, "y");
    EXPECT("{{ 'abc'.startswith('ab') }}|{{ 'abc'.startswith(('x', 'a')) }}|{{ 'abc'.endswith('bc') }}|"
           "{{ 'abc'.endswith(('x',)) }}",
           NULL, "True|True|True|False");
    EXPECT("{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'ab'.replace('', '-') }}|{{ 'abab'.replace('ab', '') }}", NULL,
           "bba|-a-b-|");
    EXPECT("{{ 'h\xc3\xa9llo'.find('l') }}|{{ 'hello'.rfind('l') }}|{{ 'hello'.find('z') }}|{{ 'banana'.count('an') }}|"
           "{{ 'hello'.index('e') }}",
           NULL, "2|3|-1|2|1");
    EXPECT("{{ ', '.join(['a', 'b']) }}|{{ '-'.join('xyz') }}", NULL, "a, b|x-y-z");
    EXPECT("{{ '{} is {}'.format('x', 1) }}|{{ '{name}!'.format(name='Bob') }}|{{ '{0}{0}'.format('a') }}|"
           "{{ '{{}}{:>4}|{:.2f}|{!r}'.format('ab', 3.14159, 'q') }}",
           NULL, "x is 1|Bob!|aa|{}  ab|3.14|'q'");
    EXPECT("{{ '42'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ ' '.isspace() }}|{{ 'ab'.islower() }}|{{ 'AB'.isupper() }}",
           NULL, "True|True|True|True|True");
    EXPECT("{{ '7'.zfill(3) }}|{{ 'ab'.center(6, '*') }}|{{ 'ab'.ljust(4) }}|{{ 'ab'.rjust(4) }}", NULL,
           "007|**ab**|ab  |  ab");
    EXPECT("{{ 'prefix_x'.removeprefix('prefix_') }}|{{ 'a=b=c'.partition('=') }}|{{ 'a=b=c'.rpartition('=') }}",
           NULL, "x|('a', '=', 'b=c')|('a=b', '=', 'c')");
    EXPECT("{{ 'a\\nb\\r\\nc'.splitlines() }}", NULL, "['a', 'b', 'c']");
}

static void test_dict_list_methods(void)
{
    const char *ctx = "{\"d\": {\"b\": 1, \"a\": 2}}";
    EXPECT("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", ctx, "b=1;a=2;");
    EXPECT("{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 0) }}",
           ctx, "['b', 'a']|[1, 2]|2|None|0");
    EXPECT("{% for k in d %}{{ k }}{% endfor %}", ctx, "ba");
    EXPECT("{{ [1, 2, 2].count(2) }}|{{ ['a', 'b'].index('b') }}", NULL, "2|1");
}

static void test_filters(void)
{
    const char *ctx = "{\"users\": [{\"name\": \"bob\", \"age\": 30, \"admin\": true}, "
                      "{\"name\": \"Alice\", \"age\": 25, \"admin\": false}, {\"name\": \"carol\", \"age\": 35}]}";
    EXPECT("{{ 'abc'|length }}|{{ [1, 2]|count }}|{{ {'a': 1}|length }}|{{ nothing|length }}", NULL, "3|2|1|0");
    EXPECT("{{ '  x  '|trim }}|{{ 'xax'|trim('x') }}|{{ 'ab'|upper }}|{{ 'AB'|lower }}|{{ 5|string ~ '!' }}", NULL,
           "x|a|AB|ab|5!");
    EXPECT("{{ [1, 2, 3]|join(', ') }}|{{ ['a', 'b']|join }}|{{ users|join(',', attribute='name') }}", ctx,
           "1, 2, 3|ab|bob,Alice,carol");
    EXPECT("{{ nothing|default('d') }}|{{ none|default('d') }}|{{ ''|default('d', true) }}|{{ ''|d('x', boolean=true) }}",
           NULL, "d|None|d|x");
    EXPECT("{{ [3, 1, 2]|first }}|{{ [3, 1, 2]|last }}|{{ 'abc'|first }}|[{{ []|first }}]", NULL, "3|2|a|[]");
    EXPECT("{{ '42'|int + 1 }}|{{ '4.7'|int }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ 3.9|int }}|{{ '0x1A'|int(0, 16) }}|{{ '1A'|int(base=16) }}|"
           "{{ ' 12 '|int }}",
           NULL, "43|4|0|7|3|26|26|12");
    EXPECT("{{ '1.5'|float }}|{{ 2|float }}|{{ 'x'|float }}", NULL, "1.5|2.0|0.0");
    EXPECT("{{ 'ab'|list }}|{{ {'a': 1}|list }}|{{ (1, 2)|list }}", NULL, "['a', 'b']|['a']|[1, 2]");
    EXPECT("{{ 'a-b-c'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 1) }}", NULL, "a+b+c|baa");
    EXPECT("{{ 'hELLO world'|capitalize }}|{{ 'hello wORLD-foo (bar)'|title }}", NULL,
           "Hello world|Hello World-Foo (Bar)");
    EXPECT("{{ '<a>'|safe }}|{{ '<a href=\"x\">&\\''|e }}", NULL, "<a>|&lt;a href=&#34;x&#34;&gt;&amp;&#39;");
    EXPECT("{{ users|map(attribute='name')|list }}|{{ ['a', 'b']|map('upper')|join }}|"
           "{{ users|map(attribute='admin', default='?')|list }}",
           ctx, "['bob', 'Alice', 'carol']|AB|[True, False, '?']");
    EXPECT("{{ users|selectattr('admin')|map(attribute='name')|list }}|"
           "{{ users|rejectattr('admin')|map(attribute='name')|list }}|"
           "{{ users|selectattr('age', 'gt', 28)|map(attribute='name')|join(',') }}|"
           "{{ users|selectattr('admin', 'defined')|list|length }}",
           ctx, "['bob']|['Alice', 'carol']|bob,carol|2");
    EXPECT("{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('odd')|list }}|{{ [0, 1, '']|select|list }}|"
           "{{ [1, 5, 9]|select('>', 3)|list }}",
           NULL, "[1, 3]|[2, 4]|[1]|[5, 9]");
    EXPECT("{{ [1, 2, 1, 3]|unique|list }}|{{ ['a', 'A', 'b']|unique|list }}|{{ ['a', 'A']|unique(true)|list }}", NULL,
           "[1, 2, 3]|['a', 'b']|['a', 'A']");
    EXPECT("{{ [1, 2, 3]|reverse|list }}|{{ 'abc'|reverse }}", NULL, "[3, 2, 1]|cba");
    EXPECT("{{ [3, 1, 2]|sort }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ ['b', 'A', 'c']|sort }}|"
           "{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}|{{ users|sort(attribute='age')|map(attribute='name')|join(',') }}",
           ctx, "[1, 2, 3]|[3, 2, 1]|['A', 'b', 'c']|['A', 'b', 'c']|Alice,bob,carol");
    EXPECT("{{ users|sort(attribute='name')|map(attribute='name')|join(',') }}", ctx, "Alice,bob,carol");
    EXPECT("{{ {'b': 1, 'a': 2}|dictsort }}|{{ {'b': 1, 'a': 2}|dictsort(by='value') }}|{{ {'a': 1}|items|list }}",
           NULL, "[('a', 2), ('b', 1)]|[('b', 1), ('a', 2)]|[('a', 1)]");
    EXPECT("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}|"
           "{{ 'a\\nb\\n'|indent(1) }}",
           NULL, "a\n    b\n\n    c|  a\n  b|a\n> \n> b|a\n b\n");
    EXPECT("{{ -3|abs }}|{{ (-2.5)|abs }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.567|round(2) }}|{{ 2.1|round(0, 'ceil') }}|"
           "{{ 7|round }}",
           NULL, "3|2.5|2.0|4.0|2.57|3.0|7");
    EXPECT("{{ [1, 2, 3]|sum }}|{{ users|sum(attribute='age') }}|{{ [1.5, 1]|sum }}|{{ [3, 1, 2]|max }}|"
           "{{ ['b', 'A']|min }}|{{ users|max(attribute='age')|attr('name') }}",
           ctx, "6|90|2.5|3|A|carol");
    EXPECT("{{ [1, 2, 3, 4, 5]|batch(2)|list }}|{{ [1, 2, 3]|batch(2, 0)|list }}", NULL,
           "[[1, 2], [3, 4], [5]]|[[1, 2], [3, 0]]");
    EXPECT("{{ 'one two\\tthree'|wordcount }}|[{{ 'ab'|center(6) }}]", NULL, "3|[  ab  ]");
}

static void test_tojson(void)
{
    EXPECT("{{ {'a': [1, 2.5, 'x', none, true, false]}|tojson }}", NULL,
           "{\"a\": [1, 2.5, \"x\", null, true, false]}");
    EXPECT("{{ {'a': [1, {}], 'b': [], 'c': {'d': 'e'}}|tojson(indent=2) }}", NULL,
           "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": [],\n  \"c\": {\n    \"d\": \"e\"\n  }\n}");
    EXPECT("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ [1, 2]|tojson(separators=(',', ':')) }}", NULL,
           "{\"a\": 2, \"b\": 1}|[1,2]");
    EXPECT("{{ '\xc3\xa9\xf0\x9f\x98\x80'|tojson }}|{{ '\xc3\xa9\xf0\x9f\x98\x80'|tojson(ensure_ascii=true) }}", NULL,
           "\"\xc3\xa9\xf0\x9f\x98\x80\"|\"\\u00e9\\ud83d\\ude00\"");
    EXPECT("{{ '\\x01\"\\\\\\n\\t/\\x7f'|tojson }}", NULL, "\"\\u0001\\\"\\\\\\n\\t/\x7f\"");
    EXPECT("{{ 1.0|tojson }}|{{ 1e16|tojson }}|{{ 0.5|tojson }}|{{ none|tojson }}|{{ (1, 'a')|tojson }}", NULL,
           "1.0|1e+16|0.5|null|[1, \"a\"]");
    /* lenient where Python raises (Undefined is not JSON serializable), as the npm oracle is */
    EXPECT("{{ nothing|tojson }}", NULL, "null");
    /* numbers from the JSON context keep their kind */
    EXPECT("{{ x|tojson }}", "{\"x\": {\"i\": 3, \"f\": 3.0, \"g\": -0.25, \"s\": \"\\u2028\"}}",
           "{\"i\": 3, \"f\": 3.0, \"g\": -0.25, \"s\": \"\xe2\x80\xa8\"}");
    EXPECT("{{ {'a': 1}|tojson(indent='\\t') }}", NULL, "{\n\t\"a\": 1\n}");
}

/* Jinja's map/select/... return generators and dict.keys() views: they print, test and fail
 * the way Python's do (expected strings checked against Python Jinja2 3.1). */
static void test_generators_and_views(void)
{
    EXPECT("{% if [] | select('odd') %}Y{% else %}N{% endif %}|{% if [] | select('odd') | list %}Y{% else %}N{% endif %}",
           NULL, "Y|N");
    EXPECT("{{ d.keys() }}|{{ d.values() }}|{{ d.items() }}|{{ d.keys() | length }}|[{{ d.keys()[0] }}]",
           "{\"d\": {\"b\": 1, \"a\": 2}}",
           "dict_keys(['b', 'a'])|dict_values([1, 2])|dict_items([('b', 1), ('a', 2)])|2|[]");
    /* tools may be None: a false input gives an empty generator, and errors wait until it is used */
    EXPECT("{% if none | selectattr('x') %}Y{% endif %}|{{ tools | selectattr('type', 'eq', 'function') | list }}|"
           "{{ none | map('upper') | list }}",
           "{\"tools\": null}", "Y|[]|[]");
    EXPECT("{{ (5 | batch(2)) is defined }}|{{ [3, 1] | reverse | list }}|{{ 1 | safe ~ '!' }}|{{ 'abc' % [1] }}|"
           "{{ nothing is callable }}",
           NULL, "True|[1, 3]|1!|abc|True");
    EXPECT("{{ [1, 2] | select('odd') | first }}|{{ {'a': 1} | reverse | list }}|{{ [1] | unique | list }}|"
           "[{{ 5[1:] }}]|[{{ 'abc'['x':] }}]",
           NULL, "1|['a']|[1]|[]|[]");
    EXPECT_ERR("{{ [1, 2] | select('odd') | length }}", NULL, HR_ERR_INVALID, "object of type 'generator' has no len()",
               NULL);
    EXPECT_ERR("{{ 5 | batch(2) | list }}", NULL, HR_ERR_INVALID, "'int' object is not iterable", NULL);
    EXPECT_ERR("{{ 'abc' % 1 }}", NULL, HR_ERR_INVALID, "not all arguments converted", NULL);
    EXPECT_ERR("{{ [1] | map('upper') | tojson }}", NULL, HR_ERR_INVALID, "not JSON serializable", NULL);
}

static void test_tests(void)
{
    EXPECT("{{ x is defined }}|{{ y is defined }}|{{ y is undefined }}|{{ x is not none }}|{{ n is none }}", "{\"x\": 1, \"n\": null}",
           "True|False|True|True|True");
    EXPECT("{{ 'a' is string }}|{{ 1 is string }}|{{ {} is mapping }}|{{ [] is mapping }}|{{ [] is iterable }}|"
           "{{ 'a' is sequence }}|{{ 1 is iterable }}",
           NULL, "True|False|True|False|True|True|False");
    EXPECT("{{ 1 is number }}|{{ 1.5 is number }}|{{ true is number }}|{{ 1 is integer }}|{{ true is integer }}|"
           "{{ 1.0 is float }}|{{ true is boolean }}|{{ 1 is boolean }}",
           NULL, "True|True|True|True|False|True|True|False");
    EXPECT("{{ true is true }}|{{ 1 is true }}|{{ false is false }}|{{ 0 is false }}", NULL, "True|False|True|False");
    EXPECT("{{ 3 is odd }}|{{ 3 is even }}|{{ 9 is divisibleby 3 }}|{{ 9 is divisibleby(4) }}|{{ -3 is odd }}|"
           "{{ 2.5 is odd }}|{{ 2.5 is even }}|{{ 3.0 is odd }}",
           NULL, "True|False|True|False|True|False|False|True");
    EXPECT("{{ 2 is eq 2 }}|{{ 2 is equalto(3) }}|{{ 'x' if 2 is eq 3 else 'y' }}", NULL, "True|False|y");
    EXPECT("{{ 2 is in [1, 2] }}|{{ 'ab' is lower }}|{{ 'Ab' is upper }}|{{ range is callable }}|{{ 1 is ne 2 }}", NULL,
           "True|True|False|True|True");
    EXPECT("{{ 'upper' is filter }}|{{ 'nope' is test }}|{{ none is sameas none }}", NULL, "True|False|True");
}

static void test_loops(void)
{
    EXPECT("{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
           "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
           NULL, "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;");
    EXPECT("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}", NULL, "-2|1-3|2-|");
    EXPECT("{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{% endfor %}", NULL, "aba");
    EXPECT("{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}{% else %}no{% endfor %}", NULL, "empty|");
    EXPECT("{% for x in range(10) if x is odd %}{{ x }}{{ '/' ~ loop.length if loop.last }}{% endfor %}", NULL,
           "13579/5");
    EXPECT("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}"
           "{% endfor %}",
           NULL, "0134");
    EXPECT("{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }},{% endfor %}|{% for a, (b, c) in [(1, 'xy')] %}{{ a }}{{ b }}{{ c }}{% endfor %}",
           NULL, "3,7,|1xy");
    EXPECT("{% for c in 'h\xc3\xa9' %}[{{ c }}]{% endfor %}|{% for x in nothing %}x{% endfor %}", NULL,
           "[h][\xc3\xa9]|");
    EXPECT("{% for i in [1, 2] %}{% for j in [3, 4] %}{{ i * j }}{{ ',' if not loop.last }}{% endfor %};"
           "{{ loop.index }}|{% endfor %}",
           NULL, "3,4;1|6,8;2|");
    EXPECT("{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}",
           "{\"messages\": [{\"role\": \"user\"}, {\"role\": \"assistant\"}]}", "au");
}

static void test_set_and_scoping(void)
{
    EXPECT("{% set x = 1 %}{% set a, b = 2, 3 %}{{ x }}{{ a }}{{ b }}", NULL, "123");
    EXPECT("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", NULL, "21");
    EXPECT("{% if true %}{% set y = 5 %}{% endif %}{{ y }}", NULL, "5");
    /* every iteration starts afresh: what one sets, the next does not see (Python Jinja2) */
    EXPECT("{% for i in [1, 2] %}{% if i == 1 %}{% set k = 'set' %}{% endif %}{{ k }};{% endfor %}", NULL, "set;;");
    EXPECT("{% set k = 'outer' %}{% for i in [1, 2] %}{% if i == 1 %}{% set k = 'set' %}{% endif %}{{ k }};"
           "{% endfor %}{{ k }}",
           NULL, "set;outer;outer");
    EXPECT("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}", NULL, "12121");
    EXPECT("{% for i in [] %}{% else %}{% set e = 1 %}{{ e }}{% endfor %}[{{ e }}]", NULL, "1[]");
    EXPECT("{% for a in [1] %}{% for b in [2] %}{% set c = 3 %}{% endfor %}[{{ c }}]{% endfor %}", NULL, "[]");
    EXPECT("{% for i in [1, 2] %}{% set x = loop.index %}{% for j in [1] %}{{ x }}{% endfor %}{% endfor %}", NULL, "12");
    EXPECT("{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
           "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}",
           NULL, "6 0123");
    EXPECT("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns.c }}", NULL, "12");
    EXPECT("{% set t %}a{{ 1 + 1 }}b{% endset %}[{{ t }}]|{% set u | upper %}x{% endset %}{{ u }}", NULL, "[a2b]|X");
    EXPECT("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", NULL, "3[]");
    EXPECT("{% filter upper %}abc{{ 'd' }}{% endfilter %}|{% filter trim|upper %}  x  {% endfilter %}", NULL, "ABCD|X");
    EXPECT("{% set d = dict(a=1, b='x') %}{{ d }}|{{ dict({'z': 1}) }}", NULL, "{'a': 1, 'b': 'x'}|{'z': 1}");
    /* a namespace that refers to itself: no leak, no crash */
    EXPECT("{% set ns = namespace() %}{% set ns.self = ns %}{% set ns.l = [ns] %}ok", NULL, "ok");
}

static void test_macros(void)
{
    EXPECT("{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}{{ m() }}",
           NULL, "[1B][12][43][B]");
    EXPECT("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}", NULL, "<in>");
    EXPECT("{% macro w(n) %}{{ caller(n * 2) }}{% endmacro %}{% call(x) w(5) %}x={{ x }}{% endcall %}", NULL, "x=10");
    EXPECT("{% macro f(n) %}{% if n <= 1 %}1{% else %}{{ n * f(n - 1)|int }}{% endif %}{% endmacro %}{{ f(5) }}",
           NULL, "120");
    EXPECT("{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}{% set g = 'H' %}{{ m() }}", NULL, "GH");
    EXPECT("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, k=2) }}", NULL, "(1,){'k': 2}");
    EXPECT("{% macro m(a, b=a * 2) %}{{ b }}{% endmacro %}{{ m(3) }}", NULL, "6");
    EXPECT("{% for i in [1, 2] %}{% macro show() %}{{ i }}{% endmacro %}{{ show() }}{% endfor %}", NULL, "12");
    EXPECT("{% macro m() %}x{% endmacro %}{{ m.name }}|{{ m }}", NULL, "m|<Macro 'm'>");
}

static void test_globals(void)
{
    EXPECT("{{ range(3)|list }}|{{ range(1, 10, 3)|list }}|{{ range(3, 0, -1)|list }}|{{ range(0)|list }}", NULL,
           "[0, 1, 2]|[1, 4, 7]|[3, 2, 1]|[]");
    EXPECT("{{ strftime_now('%Y')|length }}", NULL, "4");
    EXPECT("{% set range = 'shadowed' %}{{ range }}", NULL, "shadowed");
}

/* ============================================================================ errors */

static void test_syntax_errors(void)
{
    EXPECT_ERR("{% if x %}\nnever closed", NULL, HR_ERR_FORMAT, "line 2", "'if' block from line 1 is never closed");
    EXPECT_ERR("a\n{{ 1 + }}", NULL, HR_ERR_FORMAT, "line 2, column 8", "unexpected '}}'");
    EXPECT_ERR("{% foo %}", NULL, HR_ERR_FORMAT, "line 1", "unknown tag 'foo'");
    EXPECT_ERR("{% for x in y %}\n{% endif %}", NULL, HR_ERR_FORMAT, "line 2", "innermost open block is 'for'");
    EXPECT_ERR("{% endif %}", NULL, HR_ERR_FORMAT, "unknown tag 'endif'", NULL);
    EXPECT_ERR("{{ 'abc }}", NULL, HR_ERR_FORMAT, "line 1, column 4", "unterminated string");
    EXPECT_ERR("x\n{# never", NULL, HR_ERR_FORMAT, "line 2", "missing end of comment");
    EXPECT_ERR("{{ x", NULL, HR_ERR_FORMAT, "never closed", NULL);
    EXPECT_ERR("{{ (1 }}", NULL, HR_ERR_FORMAT, "unexpected '}'", NULL);
    EXPECT_ERR("{{ 1 ] }}", NULL, HR_ERR_FORMAT, "unexpected ']'", NULL);
    EXPECT_ERR("{{ a $ b }}", NULL, HR_ERR_FORMAT, "unexpected character '$'", NULL);
    EXPECT_ERR("{% break %}", NULL, HR_ERR_FORMAT, "outside of a for loop", NULL);
    EXPECT_ERR("{% for x in y %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}", NULL, HR_ERR_FORMAT,
               "outside of a for loop", NULL);
    EXPECT_ERR("{% macro m(a=1, b) %}{% endmacro %}", NULL, HR_ERR_FORMAT, "non-default argument", NULL);
    EXPECT_ERR("{% set 1 = 2 %}", NULL, HR_ERR_FORMAT, "cannot assign", NULL);
    EXPECT_ERR("{% include 'x' %}", NULL, HR_ERR_FORMAT, "not supported", NULL);
    EXPECT_ERR("{{ 'a' is 1 }}", NULL, HR_ERR_FORMAT, "expected a name", NULL);
    EXPECT_ERR("{{ '\\u12' }}", NULL, HR_ERR_FORMAT, "truncated", NULL);
    EXPECT_ERR("{{ 99999999999999999999 }}", NULL, HR_ERR_FORMAT, "too large", NULL);
    EXPECT_ERR("{% raw %}abc", NULL, HR_ERR_FORMAT, "raw", NULL);
    /* deep nesting is refused, not a stack overflow */
    char deep[2048];
    size_t n = 0;
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{{ ");
    for (int i = 0; i < 600; i++)
        deep[n++] = '(';
    deep[n++] = '1';
    for (int i = 0; i < 600; i++)
        deep[n++] = ')';
    snprintf(deep + n, sizeof deep - n, " }}");
    EXPECT_ERR(deep, NULL, HR_ERR_FORMAT, "nested too deeply", NULL);
    char deep2[4096];
    n = 0;
    for (int i = 0; i < 200; i++)
        n += (size_t)snprintf(deep2 + n, sizeof deep2 - n, "{%% if 1 %%}");
    EXPECT_ERR(deep2, NULL, HR_ERR_FORMAT, "nested too deeply", NULL);
}

static void test_runtime_errors(void)
{
    EXPECT_ERR("a\nb\n{{ x | nosuch }}", "{\"x\": 1}", HR_ERR_INVALID, "line 3", "no filter named 'nosuch'");
    EXPECT_ERR("{% if x is nosuch %}{% endif %}", NULL, HR_ERR_INVALID, "line 1", "no test named 'nosuch'");
    EXPECT_ERR("\n  {{ 'a'.nosuch() }}", NULL, HR_ERR_INVALID, "line 2", "has no method 'nosuch'");
    EXPECT_ERR("{{ nosuch() }}", NULL, HR_ERR_INVALID, "'nosuch' is undefined", NULL);
    EXPECT_ERR("x\n{{ raise_exception('Conversation roles must alternate') }}", NULL, HR_ERR_INVALID, "line 2",
               "Conversation roles must alternate");
    EXPECT_ERR("{{ 'a' + 1 }}", NULL, HR_ERR_INVALID, "unsupported operand type(s) for +: 'str' and 'int'", NULL);
    EXPECT_ERR("{{ 1 + 2 ~ 3 }}", NULL, HR_ERR_INVALID, "unsupported operand type(s) for +: 'int' and 'str'", NULL);
    EXPECT_ERR("{{ x + 1 }}", NULL, HR_ERR_INVALID, "undefined", NULL);
    EXPECT_ERR("{{ 1 / 0 }}", NULL, HR_ERR_INVALID, "division by zero", NULL);
    EXPECT_ERR("{{ 1 // 0 }}", NULL, HR_ERR_INVALID, "division by zero", NULL);
    EXPECT_ERR("{{ 9223372036854775807 + 1 }}", NULL, HR_ERR_INVALID, "integer overflow", NULL);
    EXPECT_ERR("{{ 10 ** 20 }}", NULL, HR_ERR_INVALID, "integer overflow", NULL);
    EXPECT_ERR("{{ 1 < 'a' }}", NULL, HR_ERR_INVALID, "cannot order", NULL);
    EXPECT_ERR("{{ [1].append(2) }}", NULL, HR_ERR_INVALID, "unsafe", NULL);
    EXPECT_ERR("{{ 1 in 2 }}", NULL, HR_ERR_INVALID, "not iterable", NULL);
    EXPECT_ERR("{% for x in 5 %}{% endfor %}", NULL, HR_ERR_INVALID, "'int' object is not iterable", NULL);
    EXPECT_ERR("{% for a, b in [[1, 2, 3]] %}{% endfor %}", NULL, HR_ERR_INVALID, "too many values to unpack", NULL);
    EXPECT_ERR("{% set ns = 1 %}{% set ns.x = 2 %}", NULL, HR_ERR_INVALID, "not a namespace", NULL);
    EXPECT_ERR("{{ 'abc'[::0] }}", NULL, HR_ERR_INVALID, "slice step cannot be zero", NULL);
    EXPECT_ERR("{{ 'a'.split('') }}", NULL, HR_ERR_INVALID, "empty separator", NULL);
    EXPECT_ERR("{{ range(1000000)|length }}", NULL, HR_ERR_INVALID, "range() too big", NULL);
    EXPECT_ERR("{% macro m(a) %}{% endmacro %}{{ m(1, a=2) }}", NULL, HR_ERR_INVALID, "multiple values", NULL);
    EXPECT_ERR("{{ 'x'|replace('a') }}", NULL, HR_ERR_INVALID, "missing required argument 'new'", NULL);
    EXPECT_ERR("{{ 'x'|trim(foo=1) }}", NULL, HR_ERR_INVALID, "unexpected keyword argument 'foo'", NULL);
    EXPECT_ERR("{{ 5|length }}", NULL, HR_ERR_INVALID, "has no len()", NULL);
    EXPECT_ERR("{{ {1: 2} }}", NULL, HR_ERR_UNSUPPORTED, "dict keys must be strings", NULL);
    EXPECT_ERR("{{ range|tojson }}", NULL, HR_ERR_INVALID, "not JSON serializable", NULL);
    EXPECT_ERR("{{ 3 is divisibleby(0) }}", NULL, HR_ERR_INVALID, "division by zero", NULL);
    EXPECT_ERR("{{ '%d' % 'x' }}", NULL, HR_ERR_INVALID, "number is required", NULL);
    EXPECT_ERR("{{ '{}'.format() }}", NULL, HR_ERR_INVALID, "out of range", NULL);
}

static void test_limits(void)
{
    struct chat_template_limits lim;
    chat_template_limits_default(&lim);
    lim.max_loop_iterations = 10000;
    expect_err(__LINE__, "{% for i in range(100000) %}\n{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL,
               &lim, HR_ERR_INVALID, "loop iterations", "line 2");
    chat_template_limits_default(&lim);
    expect_err(__LINE__, "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &lim, HR_ERR_INVALID,
               "nested more than", NULL);
    lim.max_output = 1000;
    expect_err(__LINE__, "{% for i in range(2000) %}x{% endfor %}", NULL, &lim, HR_ERR_INVALID, "exceeds the limit",
               NULL);
    expect_err(__LINE__, "{{ 'x' * 5000 }}", NULL, &lim, HR_ERR_INVALID, "limit", NULL);
    chat_template_limits_default(&lim);
    lim.max_memory = 256 << 10;
    expect_err(__LINE__, "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}"
                         "{% endfor %}",
               NULL, &lim, HR_ERR_INVALID, "memory", NULL);
    chat_template_limits_default(&lim);
    lim.max_steps = 5000;
    expect_err(__LINE__, "{% for i in range(100000) %}{{ i }}{% endfor %}", NULL, &lim, HR_ERR_INVALID, "steps", NULL);
    /* exponential growth is stopped by the string limit */
    chat_template_limits_default(&lim);
    lim.max_output = 1 << 20;
    expect_err(__LINE__, "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                         "{% endfor %}",
               NULL, &lim, HR_ERR_INVALID, "limit", NULL);
    /* values nested deeper than the limit */
    expect_err(__LINE__, "{% set ns = namespace(v=[]) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}"
                         "{% endfor %}",
               NULL, &lim, HR_ERR_INVALID, "nested", NULL);
    /* a cycle through a namespace is caught when printed */
    expect_err(__LINE__, "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}", NULL, &lim, HR_ERR_INVALID,
               "nested too deeply", NULL);
}

static void test_untrusted_bytes(void)
{
    /* invalid UTF-8 in the template and the context passes through untouched */
    EXPECT("a\xff\xfe{{ 'b\xc3' }}", NULL, "a\xff\xfe" "b\xc3");
    EXPECT("{{ x|length }}|{{ x[::-1]|length }}|{{ x|upper }}", "{\"x\": \"ab\"}", "2|2|AB");
    char err[HR_ERRLEN];
    struct chat_template ct;
    CHECK(chat_template_init_n(&ct, "a\0b{{ 1 }}", 10, err, sizeof err) == HR_OK);
    char *out;
    size_t len;
    CHECK_OK(chat_template_render(&ct, NULL, &out, &len, err, sizeof err), err);
    CHECK(len == 4 && !memcmp(out, "a\0b1", 4));
    free(out);
    json_t *arr = json_array();
    CHECK(chat_template_render(&ct, arr, &out, &len, err, sizeof err) == HR_ERR_INVALID);
    CHECK(out == NULL);
    json_decref(arr);
    chat_template_free(&ct);
    chat_template_free(&ct); /* freeing twice (zeroed) is a no-op */
    chat_template_free(NULL);
    CHECK(chat_template_init(&ct, NULL, err, sizeof err) == HR_ERR_INVALID);
    CHECK(chat_template_render(&ct, NULL, &out, &len, err, sizeof err) == HR_ERR_INVALID);
}

/* ===================================================================== model templates */

static char *read_text(const char *rel)
{
    char path[1024], err[HR_ERRLEN];
    char *buf = NULL;
    size_t len;
    test_path(path, sizeof path, test_data_dir(), rel);
    if (fileio_read_all(path, 0, &buf, &len, err, sizeof err) != HR_OK)
        fprintf(stderr, "  %s\n", err);
    return buf;
}

static json_t *load_json_rel(const char *rel)
{
    char path[1024];
    json_error_t je;
    test_path(path, sizeof path, test_data_dir(), rel);
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        fprintf(stderr, "  %s: %s\n", path, je.text);
    return j;
}

/* The chat cases of vectors.json (rendered by @huggingface/jinja 0.5.11, stored). */
static void test_vectors_chat_cases(void)
{
    char err[HR_ERRLEN] = "", dir[1024];
    struct chat_template_model m;
    test_path(dir, sizeof dir, test_data_dir(), "qwen3");
    CHECK_OK(chat_template_model_load(&m, dir, err, sizeof err), err);
    CHECK(m.bos_token == NULL);
    CHECK(m.eos_token && !strcmp(m.eos_token, "<|im_end|>"));
    CHECK(m.pad_token && !strcmp(m.pad_token, "<|endoftext|>"));
    json_t *v = load_json_rel("qwen3/vectors.json");
    json_t *cases = json_object_get(v, "chat_template_vectors");
    CHECK(json_array_size(cases) >= 3);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        struct chat_template_request req = {
            .messages = json_object_get(c, "messages"),
            .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
            .enable_thinking = -1,
        };
        const json_t *et = json_object_get(c, "enable_thinking");
        if (json_is_boolean(et))
            req.enable_thinking = json_is_true(et);
        char *out = NULL;
        size_t len;
        CHECK_OK(chat_template_model_render(&m, &req, &out, &len, err, sizeof err), err);
        const char *want = json_string_value(json_object_get(c, "rendered"));
        CHECK_MSG(out && want && !strcmp(out, want), "case %zu: got [%s] want [%s]", i, out ? out : "", want);
        free(out);
    }
    json_decref(v);
    chat_template_model_free(&m);
}

/* Renders messages (JSON text) with the upstream Qwen3 template. */
static char *render_upstream(const char *messages, int enable_thinking, bool gen)
{
    char err[HR_ERRLEN] = "";
    struct chat_template_model m;
    char *src = read_text("qwen3/chat_template_upstream.jinja");
    json_t *cfg = load_json_rel("qwen3/tokenizer_config.json");
    CHECK_OK(chat_template_model_from_config(&m, cfg, src, "upstream", err, sizeof err), err);
    json_error_t je;
    json_t *msgs = json_loads(messages, 0, &je);
    CHECK_MSG(msgs != NULL, "%s", je.text);
    struct chat_template_request req = {.messages = msgs, .add_generation_prompt = gen, .enable_thinking = enable_thinking};
    char *out = NULL;
    size_t len;
    CHECK_OK(chat_template_model_render(&m, &req, &out, &len, err, sizeof err), err);
    json_decref(msgs);
    json_decref(cfg);
    free(src);
    chat_template_model_free(&m);
    return out;
}

/* Python's str.strip('\n') strips newlines only (the npm oracle strips all whitespace here). */
static void test_qwen3_python_strip_semantics(void)
{
    char *out = render_upstream("[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                                "\"content\": \"<think>\\n  indented\\n</think>\\n\\n answer\"}]",
                                -1, false);
    const char *want = "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n  indented\n</think>\n\n"
                       " answer<|im_end|>\n";
    CHECK_MSG(out && !strcmp(out, want), "got [%s]", out ? out : "");
    free(out);
    /* reasoning_content given separately, with spaces at its edges */
    out = render_upstream("[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                          "\"content\": \"\\n\\na\", \"reasoning_content\": \"\\n r \\n\"}]",
                          0, true);
    want = "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n r \n</think>\n\na<|im_end|>\n"
           "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    CHECK_MSG(out && !strcmp(out, want), "got [%s]", out ? out : "");
    free(out);
}

/* Tool calls: arguments as an object (tojson) or as a string (verbatim); tool results grouped. */
static void test_qwen3_tools(void)
{
    char *out = render_upstream(
        "[{\"role\": \"user\", \"content\": \"weather?\"},"
        " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": ["
        "   {\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get\", \"arguments\": {\"city\": \"Paris\", \"n\": 2}}},"
        "   {\"id\": \"c2\", \"type\": \"function\", \"function\": {\"name\": \"get\", \"arguments\": \"{\\\"city\\\":\\\"Rome\\\"}\"}}]},"
        " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"sunny\"},"
        " {\"role\": \"tool\", \"tool_call_id\": \"c2\", \"content\": [{\"type\": \"text\", \"text\": \"rain\"}]}]",
        -1, true);
    const char *want =
        "<|im_start|>user\nweather?<|im_end|>\n<|im_start|>assistant\n"
        "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\", \"n\": 2}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\":\"Rome\"}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrain\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n";
    CHECK_MSG(out && !strcmp(out, want), "got [%s]", out ? out : "");
    free(out);
}

static void test_model_config_forms(void)
{
    char err[HR_ERRLEN] = "";
    struct chat_template_model m;
    json_error_t je;
    json_t *cfg = json_loads("{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\","
                             " \"chat_template\": [{\"name\": \"default\", \"template\": \"D{{ bos_token }}{{ messages|length }}\"},"
                             " {\"name\": \"tool_use\", \"template\": \"T{{ tools|length }}\"},"
                             " {\"name\": \"rag\", \"template\": \"R\"}]}",
                             0, &je);
    CHECK_OK(chat_template_model_from_config(&m, cfg, NULL, "cfg", err, sizeof err), err);
    CHECK(m.bos_token && !strcmp(m.bos_token, "<s>") && m.eos_token && !strcmp(m.eos_token, "</s>"));
    CHECK(m.has_tool_use);
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \"x\"}]", 0, &je);
    json_t *tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", 0, &je);
    struct chat_template_request req = {.messages = msgs, .enable_thinking = -1};
    char *out;
    size_t len;
    CHECK_OK(chat_template_model_render(&m, &req, &out, &len, err, sizeof err), err);
    CHECK(out && !strcmp(out, "D<s>1"));
    free(out);
    req.tools = tools;
    CHECK_OK(chat_template_model_render(&m, &req, &out, &len, err, sizeof err), err);
    CHECK(out && !strcmp(out, "T1"));
    free(out);
    chat_template_model_free(&m);
    chat_template_model_free(&m);
    json_decref(cfg);

    /* no template: a clear error */
    cfg = json_loads("{\"eos_token\": \"</s>\"}", 0, &je);
    CHECK(chat_template_model_from_config(&m, cfg, NULL, "cfg", err, sizeof err) == HR_ERR_NOT_FOUND);
    CHECK(strstr(err, "no chat template") != NULL);
    json_decref(cfg);
    cfg = json_loads("{\"chat_template\": [{\"name\": \"rag\", \"template\": \"R\"}]}", 0, &je);
    CHECK(chat_template_model_from_config(&m, cfg, NULL, "cfg", err, sizeof err) == HR_ERR_NOT_FOUND);
    CHECK(strstr(err, "'default'") && strstr(err, "'rag'"));
    json_decref(cfg);
    cfg = json_loads("{\"chat_template\": 5}", 0, &je);
    CHECK(chat_template_model_from_config(&m, cfg, NULL, "cfg", err, sizeof err) == HR_ERR_FORMAT);
    json_decref(cfg);
    cfg = json_loads("{\"chat_template\": \"{% if %}\"}", 0, &je);
    CHECK(chat_template_model_from_config(&m, cfg, NULL, "cfg", err, sizeof err) == HR_ERR_FORMAT);
    CHECK_MSG(strstr(err, "cfg: chat template: line 1") != NULL, "%s", err);
    json_decref(cfg);
    cfg = json_loads("{\"bos_token\": 3, \"chat_template\": \"x\"}", 0, &je);
    CHECK(chat_template_model_from_config(&m, cfg, NULL, "cfg", err, sizeof err) == HR_ERR_FORMAT);
    json_decref(cfg);
    json_decref(msgs);
    json_decref(tools);

    /* directories: none, config without template, chat_template.jinja */
    char tmp[] = "/tmp/hearth_template_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    CHECK(chat_template_model_load(&m, tmp, err, sizeof err) == HR_ERR_NOT_FOUND);
    CHECK(strstr(err, "no chat template") != NULL);
    char p[1200];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", tmp);
    CHECK(fileio_write_all(p, "{\"eos_token\": \"E\"}", 18, err, sizeof err) == HR_OK);
    CHECK(chat_template_model_load(&m, tmp, err, sizeof err) == HR_ERR_NOT_FOUND);
    char p2[1200];
    snprintf(p2, sizeof p2, "%s/chat_template.jinja", tmp);
    CHECK(fileio_write_all(p2, "J{{ eos_token }}\n", 17, err, sizeof err) == HR_OK);
    CHECK_OK(chat_template_model_load(&m, tmp, err, sizeof err), err);
    msgs = json_loads("[]", 0, &je);
    req = (struct chat_template_request){.messages = msgs, .enable_thinking = -1};
    CHECK_OK(chat_template_model_render(&m, &req, &out, &len, err, sizeof err), err);
    CHECK(out && !strcmp(out, "JE"));
    free(out);
    json_decref(msgs);
    chat_template_model_free(&m);
    CHECK(fileio_write_all(p, "{not json", 9, err, sizeof err) == HR_OK);
    CHECK(chat_template_model_load(&m, tmp, err, sizeof err) == HR_ERR_FORMAT);
    unlink(p);
    unlink(p2);
    rmdir(tmp);
}

static void test_context(void)
{
    char err[HR_ERRLEN] = "";
    struct chat_template_model m;
    json_error_t je;
    json_t *cfg = json_loads("{\"eos_token\": \"E\", \"chat_template\": \"{{ messages|tojson }}|{{ tools }}|"
                             "{{ add_generation_prompt }}|{{ enable_thinking }}|{{ extra }}|{{ bos_token is defined }}\"}",
                             0, &je);
    CHECK_OK(chat_template_model_from_config(&m, cfg, NULL, "cfg", err, sizeof err), err);
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
                              "{\"type\": \"text\", \"text\": \"b\"}], \"name\": \"n\"}, {\"role\": \"assistant\", "
                              "\"content\": null}, {\"role\": \"assistant\"}]",
                              0, &je);
    json_t *kw = json_loads("{\"extra\": 7, \"enable_thinking\": true, \"messages\": \"ignored\"}", 0, &je);
    struct chat_template_request req = {.messages = msgs, .add_generation_prompt = true, .enable_thinking = 0,
                                        .kwargs = kw};
    char *out;
    size_t len;
    CHECK_OK(chat_template_model_render(&m, &req, &out, &len, err, sizeof err), err);
    const char *want = "[{\"role\": \"user\", \"content\": \"a\\nb\", \"name\": \"n\"}, {\"role\": \"assistant\", "
                       "\"content\": \"\"}, {\"role\": \"assistant\", \"content\": \"\"}]|None|True|False|7|False";
    CHECK_MSG(out && !strcmp(out, want), "got [%s]", out ? out : "");
    free(out);

    json_t *bad = json_loads("[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]", 0, &je);
    req.messages = bad;
    CHECK(chat_template_model_render(&m, &req, &out, &len, err, sizeof err) == HR_ERR_UNSUPPORTED);
    CHECK(strstr(err, "messages[0].content[0]") && strstr(err, "image_url"));
    json_decref(bad);
    bad = json_loads("[{\"content\": \"x\"}]", 0, &je);
    req.messages = bad;
    CHECK(chat_template_model_render(&m, &req, &out, &len, err, sizeof err) == HR_ERR_INVALID);
    CHECK(strstr(err, "messages[0].role") != NULL);
    json_decref(bad);
    bad = json_loads("[{\"role\": \"assistant\", \"tool_calls\": {}}]", 0, &je);
    req.messages = bad;
    CHECK(chat_template_model_render(&m, &req, &out, &len, err, sizeof err) == HR_ERR_INVALID);
    json_decref(bad);
    bad = json_loads("{\"role\": \"user\"}", 0, &je);
    req.messages = bad;
    CHECK(chat_template_model_render(&m, &req, &out, &len, err, sizeof err) == HR_ERR_INVALID);
    CHECK(strstr(err, "messages must be an array") != NULL);
    json_decref(bad);
    req.messages = msgs;
    json_t *tools = json_loads("{}", 0, &je);
    req.tools = tools;
    CHECK(chat_template_model_render(&m, &req, &out, &len, err, sizeof err) == HR_ERR_INVALID);
    json_decref(tools);
    json_decref(kw);
    json_decref(msgs);
    json_decref(cfg);
    chat_template_model_free(&m);
}

/* One parsed template, several threads rendering at once. */
struct thread_arg {
    const struct chat_template *ct;
    const json_t *ctx;
    const char *want;
    int bad;
};

static void *render_thread(void *p)
{
    struct thread_arg *a = p;
    char err[HR_ERRLEN];
    for (int i = 0; i < 200; i++) {
        char *out;
        size_t len;
        if (chat_template_render(a->ct, a->ctx, &out, &len, err, sizeof err) != HR_OK || strcmp(out, a->want))
            a->bad++;
        free(out);
    }
    return NULL;
}

static void test_concurrent_renders(void)
{
    char err[HR_ERRLEN] = "";
    struct chat_template ct;
    CHECK_OK(chat_template_init(&ct, "{% set ns = namespace(s='') %}{% for m in messages %}"
                                     "{% set ns.s = ns.s ~ m.content|upper %}{% endfor %}{{ ns.s }}{{ 'x'|tojson }}",
                                err, sizeof err),
             err);
    json_error_t je;
    json_t *ctx = json_loads("{\"messages\": [{\"content\": \"a\"}, {\"content\": \"b\"}]}", 0, &je);
    struct thread_arg args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){.ct = &ct, .ctx = ctx, .want = "AB\"x\""};
        pthread_create(&th[i], NULL, render_thread, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].bad == 0);
    }
    json_decref(ctx);
    chat_template_free(&ct);
}

int main(void)
{
    TEST_RUN(test_text_and_whitespace);
    TEST_RUN(test_literals_and_output);
    TEST_RUN(test_operators);
    TEST_RUN(test_access_and_slices);
    TEST_RUN(test_string_methods);
    TEST_RUN(test_dict_list_methods);
    TEST_RUN(test_filters);
    TEST_RUN(test_tojson);
    TEST_RUN(test_generators_and_views);
    TEST_RUN(test_tests);
    TEST_RUN(test_loops);
    TEST_RUN(test_set_and_scoping);
    TEST_RUN(test_macros);
    TEST_RUN(test_globals);
    TEST_RUN(test_syntax_errors);
    TEST_RUN(test_runtime_errors);
    TEST_RUN(test_limits);
    TEST_RUN(test_untrusted_bytes);
    TEST_RUN(test_vectors_chat_cases);
    TEST_RUN(test_qwen3_python_strip_semantics);
    TEST_RUN(test_qwen3_tools);
    TEST_RUN(test_model_config_forms);
    TEST_RUN(test_context);
    TEST_RUN(test_concurrent_renders);
    TEST_END();
}
