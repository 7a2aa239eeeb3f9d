/* Stop-string matching on streamed UTF-8 text; see stop.h for the semantics. */
#include "engine/stop.h"

#include <stdlib.h>
#include <string.h>

/* Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF). */
static bool utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0)
                lo = 0xA0;
            if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0)
                lo = 0x90;
            if (c == 0xF4)
                hi = 0x8F;
        } else {
            return false;
        }
        if (n - i < len)
            return false;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
        i += len;
    }
    return true;
}

enum hr_status stop_matcher_init(struct stop_matcher *m, const char *const *stops, const size_t *lens, int n,
                                 char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->matched = -1;
    if (n < 0 || n > STOP_MAX_STRINGS)
        return hr_err(err, errlen, HR_ERR_INVALID, "stop: at most %d stop strings, got %d", STOP_MAX_STRINGS, n);
    size_t cap = n > 0 ? (size_t)n : 1;
    m->stops = calloc(cap, sizeof *m->stops);
    m->stop_len = calloc(cap, sizeof *m->stop_len);
    m->fail = calloc(cap, sizeof *m->fail);
    m->state = calloc(cap, sizeof *m->state);
    m->orig_index = calloc(cap, sizeof *m->orig_index);
    if (!m->stops || !m->stop_len || !m->fail || !m->state || !m->orig_index)
        goto nomem;
    for (int i = 0; i < n; i++) {
        if (!stops[i]) {
            stop_matcher_free(m);
            return hr_err(err, errlen, HR_ERR_INVALID, "stop[%d] is missing", i);
        }
        size_t len = lens ? lens[i] : strlen(stops[i]);
        if (len == 0)
            continue;
        if (len > STOP_MAX_LEN) {
            stop_matcher_free(m);
            return hr_err(err, errlen, HR_ERR_INVALID, "stop[%d] is %zu bytes long; the limit is %d", i, len,
                          STOP_MAX_LEN);
        }
        if (!utf8_valid((const unsigned char *)stops[i], len)) {
            stop_matcher_free(m);
            return hr_err(err, errlen, HR_ERR_INVALID, "stop[%d] is not valid UTF-8", i);
        }
        int k = m->n_stops;
        m->stops[k] = malloc(len);
        m->fail[k] = malloc(len * sizeof *m->fail[k]);
        if (!m->stops[k] || !m->fail[k]) {
            m->n_stops++; /* so that free sees whichever half was allocated */
            goto nomem;
        }
        memcpy(m->stops[k], stops[i], len);
        m->stop_len[k] = len;
        m->orig_index[k] = i;
        /* fail[j]: length of the longest proper prefix of s[0..j] that is also its suffix. */
        const char *s = m->stops[k];
        int32_t *f = m->fail[k];
        f[0] = 0;
        size_t q = 0;
        for (size_t j = 1; j < len; j++) {
            while (q > 0 && s[j] != s[q])
                q = (size_t)f[q - 1];
            if (s[j] == s[q])
                q++;
            f[j] = (int32_t)q;
        }
        if (len > m->max_len)
            m->max_len = len;
        m->n_stops++;
    }
    /* Held back: a proper prefix of a stop string, plus up to 3 bytes of a split character. */
    m->held_cap = (m->max_len > 0 ? m->max_len - 1 : 0) + 3;
    m->held = malloc(m->held_cap);
    if (!m->held)
        goto nomem;
    return HR_OK;
nomem:
    stop_matcher_free(m);
    return hr_err(err, errlen, HR_ERR_NOMEM, "stop: out of memory");
}

void stop_matcher_free(struct stop_matcher *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_stops; i++) {
        if (m->stops)
            free(m->stops[i]);
        if (m->fail)
            free(m->fail[i]);
    }
    free(m->stops);
    free(m->stop_len);
    free(m->fail);
    free(m->state);
    free(m->orig_index);
    free(m->held);
    memset(m, 0, sizeof *m);
    m->matched = -1;
}

void stop_matcher_reset(struct stop_matcher *m)
{
    for (int i = 0; i < m->n_stops; i++)
        m->state[i] = 0;
    m->n_held = 0;
    m->stopped = false;
    m->matched = -1;
}

size_t stop_matcher_out_cap(const struct stop_matcher *m, size_t n) { return n + m->held_cap; }

/* Moves an emit boundary b in text[0..len) back so that it does not split a UTF-8 character:
 * not onto a continuation byte, and not after a lead byte whose character is incomplete. */
static size_t utf8_boundary(const unsigned char *text, size_t len, size_t b)
{
    size_t start = b;
    /* Find the start of the character that contains or ends at b. */
    while (start > 0 && b - start < 3 && (text[start - 1] & 0xC0) == 0x80)
        start--;
    if (start == 0 || (text[start - 1] & 0xC0) != 0xC0)
        return b; /* no lead byte right before the continuation run: ASCII or invalid, leave it */
    size_t lead = start - 1;
    unsigned c = text[lead];
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    /* Bytes of this character available in the whole text (continuations after lead). */
    size_t have = 1;
    while (lead + have < len && have < need && (text[lead + have] & 0xC0) == 0x80)
        have++;
    if (lead + need <= b && have == need)
        return b; /* the character ends at or before b */
    return lead;
}

bool stop_matcher_push(struct stop_matcher *m, const char *delta, size_t n, char *out, size_t cap,
                       size_t *out_len)
{
    *out_len = 0;
    if (m->stopped)
        return true;
    HR_ASSERT(cap >= m->n_held + n);
    size_t h = m->n_held;
    memcpy(out, m->held, h);
    memcpy(out + h, delta, n);
    size_t total = h + n;

    for (size_t i = h; i < total; i++) {
        char ch = out[i];
        size_t best = 0;
        int best_k = -1;
        for (int k = 0; k < m->n_stops; k++) {
            const char *s = m->stops[k];
            size_t q = m->state[k];
            while (q > 0 && s[q] != ch)
                q = (size_t)m->fail[k][q - 1];
            if (s[q] == ch)
                q++;
            if (q == m->stop_len[k]) {
                if (q > best) {
                    best = q;
                    best_k = k;
                }
                q = (size_t)m->fail[k][q - 1];
            }
            m->state[k] = q;
        }
        if (best_k >= 0) {
            *out_len = i + 1 - best;
            m->stopped = true;
            m->matched = m->orig_index[best_k];
            m->n_held = 0;
            return true;
        }
    }

    size_t hold = 0;
    for (int k = 0; k < m->n_stops; k++)
        if (m->state[k] > hold)
            hold = m->state[k];
    size_t b = utf8_boundary((const unsigned char *)out, total, total - hold);
    HR_ASSERT(total - b <= m->held_cap);
    memcpy(m->held, out + b, total - b);
    m->n_held = total - b;
    *out_len = b;
    return false;
}

size_t stop_matcher_flush(struct stop_matcher *m, char *out, size_t cap)
{
    size_t n = 0;
    if (!m->stopped) {
        HR_ASSERT(cap >= m->n_held);
        memcpy(out, m->held, m->n_held);
        n = m->n_held;
    }
    int matched = m->matched;
    bool stopped = m->stopped;
    stop_matcher_reset(m);
    /* The match stays visible to the caller after the end of the stream. */
    m->matched = matched;
    m->stopped = stopped;
    return n;
}

int stop_matcher_matched(const struct stop_matcher *m) { return m->matched; }
