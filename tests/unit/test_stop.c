/* Stop strings on streamed text: splits across deltas, byte-by-byte feeding, overlapping and
 * multiple candidates, UTF-8 held back whole, nothing emitted past a match. A naive reference
 * (scan every end position, check every stop string) checks random streams and random cuts. */
#include <stdint.h>
#include <string.h>

#include "engine/stop.h"
#include "test.h"

static char err[HR_ERRLEN];

/* Output accumulated over a stream. */
struct sink {
    char text[8192];
    size_t len;
    int pushes_after_stop_emitting;
};

static bool feed(struct stop_matcher *m, struct sink *k, const char *delta, size_t n)
{
    char out[8192];
    size_t len = 12345;
    bool was = m->stopped;
    HR_ASSERT(stop_matcher_out_cap(m, n) <= sizeof out);
    bool st = stop_matcher_push(m, delta, n, out, sizeof out, &len);
    if (was && len)
        k->pushes_after_stop_emitting++;
    HR_ASSERT(k->len + len <= sizeof k->text);
    memcpy(k->text + k->len, out, len);
    k->len += len;
    return st;
}

static void finish(struct stop_matcher *m, struct sink *k)
{
    char out[8192];
    size_t len = stop_matcher_flush(m, out, sizeof out);
    memcpy(k->text + k->len, out, len);
    k->len += len;
}

static void init(struct stop_matcher *m, const char *const *stops, int n)
{
    CHECK_OK(stop_matcher_init(m, stops, NULL, n, err, sizeof err), err);
}

#define EMITTED_IS(k, s) CHECK_MSG((k).len == strlen(s) && memcmp((k).text, s, (k).len) == 0, \
                                   "emitted '%.*s', want '%s'", (int)(k).len, (k).text, s)

static void test_whole_and_split(void)
{
    const char *stops[] = {"STOP"};
    struct stop_matcher m;
    struct sink k = {0};
    init(&m, stops, 1);
    CHECK(feed(&m, &k, "Hello STOP world", 16));
    EMITTED_IS(k, "Hello ");
    CHECK(stop_matcher_matched(&m) == 0);
    CHECK(feed(&m, &k, "more", 4)); /* nothing after a match */
    finish(&m, &k);
    EMITTED_IS(k, "Hello ");
    CHECK(k.pushes_after_stop_emitting == 0);
    stop_matcher_free(&m);

    /* Split across deltas: the partial "ST" is held, never shown. */
    init(&m, stops, 1);
    memset(&k, 0, sizeof k);
    CHECK(!feed(&m, &k, "Hel", 3));
    EMITTED_IS(k, "Hel");
    CHECK(!feed(&m, &k, "lo ST", 5));
    EMITTED_IS(k, "Hello ");
    CHECK(!feed(&m, &k, "O", 1));
    EMITTED_IS(k, "Hello ");
    CHECK(feed(&m, &k, "P wor", 5));
    EMITTED_IS(k, "Hello ");
    stop_matcher_free(&m);

    /* A false alarm releases the held text. */
    init(&m, stops, 1);
    memset(&k, 0, sizeof k);
    CHECK(!feed(&m, &k, "a ST", 4));
    EMITTED_IS(k, "a ");
    CHECK(!feed(&m, &k, "Ox", 2));
    EMITTED_IS(k, "a STOx");
    CHECK(stop_matcher_matched(&m) == -1);
    /* Held text at the end comes out with flush. */
    CHECK(!feed(&m, &k, " STO", 4));
    EMITTED_IS(k, "a STOx ");
    finish(&m, &k);
    EMITTED_IS(k, "a STOx STO");
    stop_matcher_free(&m);
}

static void test_byte_by_byte(void)
{
    const char *stops[] = {"</answer>", "\n\nUser:"};
    const char *text = "The answer is <b>42</b>.\n\nUser: next";
    struct stop_matcher m;
    struct sink k = {0};
    init(&m, stops, 2);
    bool st = false;
    for (size_t i = 0; text[i] && !st; i++)
        st = feed(&m, &k, text + i, 1);
    CHECK(st);
    EMITTED_IS(k, "The answer is <b>42</b>.");
    CHECK(stop_matcher_matched(&m) == 1);
    stop_matcher_free(&m);
}

static void test_overlapping(void)
{
    struct stop_matcher m;
    struct sink k = {0};
    /* "abc" is a live prefix of "abcd" until the 'e' turns it into "bce". */
    const char *a[] = {"abcd", "bce"};
    init(&m, a, 2);
    CHECK(!feed(&m, &k, "xab", 3));
    EMITTED_IS(k, "x");
    CHECK(!feed(&m, &k, "c", 1));
    EMITTED_IS(k, "x");
    CHECK(feed(&m, &k, "e", 1));
    EMITTED_IS(k, "xa");
    CHECK(stop_matcher_matched(&m) == 1);
    stop_matcher_free(&m);

    /* Self-overlap: "aab" inside "aaab" (the automaton must fall back, not restart). */
    const char *b[] = {"aab"};
    init(&m, b, 1);
    memset(&k, 0, sizeof k);
    CHECK(!feed(&m, &k, "a", 1));
    CHECK(!feed(&m, &k, "a", 1));
    CHECK(!feed(&m, &k, "a", 1));
    EMITTED_IS(k, "a");
    CHECK(feed(&m, &k, "b", 1));
    EMITTED_IS(k, "a");
    stop_matcher_free(&m);

    /* The first to complete wins, even if another would have started earlier. */
    const char *c[] = {"world", "lo w"};
    init(&m, c, 2);
    memset(&k, 0, sizeof k);
    CHECK(feed(&m, &k, "hello world", 11));
    EMITTED_IS(k, "hel");
    CHECK(stop_matcher_matched(&m) == 1);
    stop_matcher_free(&m);

    /* Completing at the same byte: the longest (earliest start) wins. */
    const char *d[] = {"b", "ab"};
    init(&m, d, 2);
    memset(&k, 0, sizeof k);
    CHECK(feed(&m, &k, "xab", 3));
    EMITTED_IS(k, "x");
    CHECK(stop_matcher_matched(&m) == 1);
    stop_matcher_free(&m);

    /* A stop string at the very start emits nothing. */
    const char *e[] = {"Q"};
    init(&m, e, 1);
    memset(&k, 0, sizeof k);
    CHECK(feed(&m, &k, "Qrest", 5));
    CHECK(k.len == 0);
    stop_matcher_free(&m);
}

static void test_utf8(void)
{
    struct stop_matcher m;
    struct sink k = {0};
    /* No stop strings: an incomplete character is held until complete. */
    init(&m, NULL, 0);
    CHECK(!feed(&m, &k, "caf\xC3", 4));
    EMITTED_IS(k, "caf");
    CHECK(!feed(&m, &k, "\xA9!", 2));
    EMITTED_IS(k, "caf\xC3\xA9!");
    CHECK(!feed(&m, &k, "\xF0\x9F", 2)); /* half an emoji */
    EMITTED_IS(k, "caf\xC3\xA9!");
    CHECK(!feed(&m, &k, "\x98", 1));
    EMITTED_IS(k, "caf\xC3\xA9!");
    CHECK(!feed(&m, &k, "\x80", 1));
    EMITTED_IS(k, "caf\xC3\xA9!\xF0\x9F\x98\x80");
    stop_matcher_free(&m);

    /* The stop string "€uro" (E2 82 AC ...) and the arrow → (E2 86 92) share a lead byte. */
    const char *s[] = {"\xE2\x82\xACuro"};
    init(&m, s, 1);
    memset(&k, 0, sizeof k);
    CHECK(!feed(&m, &k, "5 \xE2", 3));
    EMITTED_IS(k, "5 ");
    CHECK(!feed(&m, &k, "\x86", 1));
    EMITTED_IS(k, "5 "); /* no longer a stop prefix, but still half a character */
    CHECK(!feed(&m, &k, "\x92 \xE2\x82", 4));
    EMITTED_IS(k, "5 \xE2\x86\x92 ");
    CHECK(!feed(&m, &k, "\xAC", 1));
    CHECK(feed(&m, &k, "ur", 2) == false);
    EMITTED_IS(k, "5 \xE2\x86\x92 ");
    CHECK(feed(&m, &k, "o!", 2));
    EMITTED_IS(k, "5 \xE2\x86\x92 ");
    stop_matcher_free(&m);

    /* Flush releases even an incomplete character (the stream is over). */
    init(&m, NULL, 0);
    memset(&k, 0, sizeof k);
    CHECK(!feed(&m, &k, "x\xE2\x82", 3));
    EMITTED_IS(k, "x");
    finish(&m, &k);
    EMITTED_IS(k, "x\xE2\x82");
    stop_matcher_free(&m);
}

static void test_init_errors(void)
{
    struct stop_matcher m;
    const char *bad_utf8[] = {"ok", "\xC3("};
    CHECK(stop_matcher_init(&m, bad_utf8, NULL, 2, err, sizeof err) == HR_ERR_INVALID);
    CHECK_MSG(strstr(err, "stop[1]") && strstr(err, "UTF-8"), "%s", err);
    const char *overlong[] = {"\xC0\xAF"};
    CHECK(stop_matcher_init(&m, overlong, NULL, 1, err, sizeof err) == HR_ERR_INVALID);
    const char *surrogate[] = {"\xED\xA0\x80"};
    CHECK(stop_matcher_init(&m, surrogate, NULL, 1, err, sizeof err) == HR_ERR_INVALID);
    const char *nul[] = {"a", NULL};
    CHECK(stop_matcher_init(&m, nul, NULL, 2, err, sizeof err) == HR_ERR_INVALID);
    CHECK_MSG(strstr(err, "stop[1]"), "%s", err);
    static char longs[STOP_MAX_LEN + 2];
    memset(longs, 'x', STOP_MAX_LEN + 1);
    const char *too_long[] = {longs};
    CHECK(stop_matcher_init(&m, too_long, NULL, 1, err, sizeof err) == HR_ERR_INVALID);
    const char *many[STOP_MAX_STRINGS + 1];
    for (int i = 0; i <= STOP_MAX_STRINGS; i++)
        many[i] = "x";
    CHECK(stop_matcher_init(&m, many, NULL, STOP_MAX_STRINGS + 1, err, sizeof err) == HR_ERR_INVALID);
    stop_matcher_free(&m);
    stop_matcher_free(&m);
    stop_matcher_free(NULL);

    /* Empty strings are ignored; explicit lengths allow a NUL inside. */
    const char *with_empty[] = {"", "zz"};
    struct sink k = {0};
    init(&m, with_empty, 2);
    CHECK(feed(&m, &k, "abzzc", 5));
    EMITTED_IS(k, "ab");
    CHECK(stop_matcher_matched(&m) == 1);
    stop_matcher_reset(&m);
    CHECK(stop_matcher_matched(&m) == -1);
    memset(&k, 0, sizeof k);
    CHECK(!feed(&m, &k, "z", 1)); /* reset: matching starts afresh */
    CHECK(k.len == 0);
    stop_matcher_free(&m);

    const char *binary[] = {"a\0b"};
    size_t lens[] = {3};
    CHECK_OK(stop_matcher_init(&m, binary, lens, 1, err, sizeof err), err);
    memset(&k, 0, sizeof k);
    CHECK(!feed(&m, &k, "xa", 2));
    CHECK(feed(&m, &k, "\0b", 2));
    CHECK(k.len == 1 && k.text[0] == 'x');
    stop_matcher_free(&m);
}

/* ------------------------------------------------------------------------------------------ */
/* Random streams against a naive reference                                                    */

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(uint32_t n)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs % n);
}

/* Characters of 1..4 bytes, some sharing lead bytes, to build texts and stop strings from. */
static const char *const alphabet[] = {"a", "b", "c", " ", "\xC3\xA9", "\xC3\xA8", "\xE2\x82\xAC",
                                       "\xE2\x86\x92", "\xF0\x9F\x98\x80", "\xF0\x9F\x98\x81"};
enum { N_ALPHA = sizeof alphabet / sizeof alphabet[0] };

static size_t random_text(char *buf, int n_chars)
{
    size_t len = 0;
    for (int i = 0; i < n_chars; i++) {
        /* Mostly the first three letters, so that stop strings actually occur. */
        const char *c = alphabet[rnd(10) < 6 ? rnd(3) : rnd(N_ALPHA)];
        memcpy(buf + len, c, strlen(c));
        len += strlen(c);
    }
    return len;
}

/* Reference: the smallest end position of any occurrence; among equal ends the longest. */
static long reference_cut(const char *text, size_t len, char stops[][64], const size_t *sl, int ns, int *which)
{
    for (size_t end = 1; end <= len; end++) {
        size_t best = 0;
        *which = -1;
        for (int k = 0; k < ns; k++)
            if (sl[k] && sl[k] <= end && sl[k] > best && memcmp(text + end - sl[k], stops[k], sl[k]) == 0) {
                best = sl[k];
                *which = k;
            }
        if (best)
            return (long)(end - best);
    }
    *which = -1;
    return -1;
}

static int is_char_start(unsigned char c) { return (c & 0xC0) != 0x80; }

static void test_random_streams(void)
{
    char text[512], stops[4][64];
    const char *sp[4];
    size_t sl[4];
    int failures = 0, n_matched = 0, n_trials = 0;
    for (int trial = 0; trial < 3000 && failures < 5; trial++) {
        int ns = 1 + (int)rnd(4);
        for (int k = 0; k < ns; k++) {
            sl[k] = random_text(stops[k], 1 + (int)rnd(4));
            stops[k][sl[k]] = 0;
            sp[k] = stops[k];
        }
        size_t len = random_text(text, 5 + (int)rnd(60));
        if (rnd(3) == 0) { /* plant a stop string */
            int k = (int)rnd((uint32_t)ns);
            size_t at = 0;
            while (at < len && rnd(4))
                at++;
            while (at < len && !is_char_start((unsigned char)text[at]))
                at++;
            if (at + sl[k] < sizeof text - 1) {
                memmove(text + at + sl[k], text + at, len - at);
                memcpy(text + at, stops[k], sl[k]);
                len += sl[k];
            }
        }
        int want_which;
        long cut = reference_cut(text, len, stops, sl, ns, &want_which);
        n_trials++;
        n_matched += cut >= 0;

        struct stop_matcher m;
        CHECK_OK(stop_matcher_init(&m, sp, NULL, ns, err, sizeof err), err);
        struct sink k = {0};
        size_t pos = 0;
        bool st = false;
        int ok = 1;
        while (pos < len && !st) {
            size_t n = 1 + rnd(rnd(2) ? 3 : 12); /* cuts anywhere, inside characters too */
            if (n > len - pos)
                n = len - pos;
            size_t before = k.len;
            st = feed(&m, &k, text + pos, n);
            pos += n;
            /* Each chunk starts and ends on character boundaries. */
            if (k.len > before && (!is_char_start((unsigned char)k.text[before]) ||
                                   (k.len < len && !is_char_start((unsigned char)text[k.len]))))
                ok = 0;
            /* Nothing emitted at or past a match, even one that completes later. */
            if (cut >= 0 && (long)k.len > cut)
                ok = 0;
            /* Safety: no emitted byte may belong to an occurrence that the rest could complete:
             * every suffix of the text seen that is a prefix of a stop string lies in the held part. */
            if (!st)
                for (int q = 0; q < ns; q++)
                    for (size_t l = 1; l < sl[q] && l <= pos; l++)
                        if (memcmp(text + pos - l, stops[q], l) == 0 && pos - l < k.len)
                            ok = 0;
            /* What is emitted is a prefix of the text. */
            if (memcmp(k.text, text, k.len) != 0)
                ok = 0;
        }
        if (!st)
            finish(&m, &k);
        size_t want_len = cut >= 0 ? (size_t)cut : len;
        if (k.len != want_len || memcmp(k.text, text, want_len) != 0)
            ok = 0;
        if (st != (cut >= 0) || stop_matcher_matched(&m) != want_which)
            ok = 0;
        if (k.pushes_after_stop_emitting)
            ok = 0;
        if (!ok) {
            failures++;
            fprintf(stderr, "  trial %d: text '%.*s', %d stops (first '%s'), cut %ld/%d, emitted %zu '%.*s', "
                            "matched %d\n",
                    trial, (int)len, text, ns, stops[0], cut, want_which, k.len, (int)k.len, k.text,
                    stop_matcher_matched(&m));
        }
        CHECK(ok);
        stop_matcher_free(&m);
    }
    /* Both outcomes must be well represented for the check to mean anything. */
    CHECK_MSG(n_matched > n_trials / 5 && n_matched < n_trials * 4 / 5, "%d of %d streams matched", n_matched,
              n_trials);
}

int main(void)
{
    TEST_RUN(test_whole_and_split);
    TEST_RUN(test_byte_by_byte);
    TEST_RUN(test_overlapping);
    TEST_RUN(test_utf8);
    TEST_RUN(test_init_errors);
    TEST_RUN(test_random_streams);
    TEST_END();
}
