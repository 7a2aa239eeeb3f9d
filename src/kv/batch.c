/* Batch layout: building the derived arrays and validating every identity. */
#include "kv/batch.h"

#include <stdlib.h>
#include <string.h>

enum hr_status batch_init(struct batch *b, int block_size, int max_rows, int max_tok, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    if (block_size < 1 || max_rows < 1 || max_tok < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "batch: block_size, max_rows and max_tok must be >= 1");
    b->block_size = block_size;
    b->max_rows = max_rows;
    b->max_tok = max_tok;
    b->rows = calloc((size_t)max_rows, sizeof *b->rows);
    b->tokens = calloc((size_t)max_tok, sizeof *b->tokens);
    b->positions = calloc((size_t)max_tok, sizeof *b->positions);
    b->slots = calloc((size_t)max_tok, sizeof *b->slots);
    b->tok_row = calloc((size_t)max_tok, sizeof *b->tok_row);
    b->logit_tok = calloc((size_t)max_tok, sizeof *b->logit_tok);
    /* A row copies at most the blocks its chunk touches, and a row dropped by a
     * preemption keeps its copies in the list (they are harmless: see block_pool.h), so
     * a step can hold at most max_rows such sets for each row slot. */
    b->max_copies = max_rows * (max_tok / block_size + 2);
    b->copies = calloc((size_t)b->max_copies, sizeof *b->copies);
    if (!b->rows || !b->tokens || !b->positions || !b->slots || !b->tok_row || !b->logit_tok || !b->copies) {
        batch_free(b);
        return hr_err(err, errlen, HR_ERR_NOMEM, "batch: out of memory");
    }
    return HR_OK;
}

void batch_free(struct batch *b)
{
    if (!b)
        return;
    free(b->rows);
    free(b->tokens);
    free(b->positions);
    free(b->slots);
    free(b->tok_row);
    free(b->logit_tok);
    free(b->copies);
    memset(b, 0, sizeof *b);
}

void batch_reset(struct batch *b)
{
    b->n_rows = 0;
    b->n_tok = 0;
    b->n_logits = 0;
    b->n_copies = 0;
}

void batch_add_copy(struct batch *b, int src, int dst)
{
    HR_ASSERT(b->n_copies < b->max_copies); /* bounded in batch_init */
    b->copies[b->n_copies++] = (struct batch_copy){.src = src, .dst = dst};
}

enum hr_status batch_add_row(struct batch *b, int seq_id, const int32_t *tokens, int query_len,
                             int context_len, const int32_t *block_table, int n_table,
                             enum batch_logits logits, char *err, size_t errlen)
{
    if (b->n_rows >= b->max_rows)
        return hr_err(err, errlen, HR_ERR_FULL, "batch: more than %d rows", b->max_rows);
    if (query_len < 1 || query_len > b->max_tok - b->n_tok)
        return hr_err(err, errlen, HR_ERR_FULL, "batch: row of %d tokens does not fit (%d of %d used)",
                      query_len, b->n_tok, b->max_tok);
    struct batch_row *r = &b->rows[b->n_rows++];
    r->seq_id = seq_id;
    r->query_len = query_len;
    r->context_len = context_len;
    r->kv_len = context_len + query_len;
    r->query_offset = b->n_tok;
    r->block_table = block_table;
    r->n_table = n_table;
    r->logits = logits;
    r->logit_offset = 0;
    memcpy(b->tokens + b->n_tok, tokens, (size_t)query_len * sizeof *tokens);
    b->n_tok += query_len;
    return HR_OK;
}

enum hr_status batch_build(struct batch *b, int n_blocks, char *err, size_t errlen)
{
    int off = 0, nlog = 0;
    for (int i = 0; i < b->n_rows; i++) {
        struct batch_row *r = &b->rows[i];
        if (r->query_len < 1 || r->context_len < 0 || r->query_len > b->max_tok - off)
            return hr_err(err, errlen, HR_ERR_INVALID, "batch row %d: bad lengths (query %d, context %d)",
                          i, r->query_len, r->context_len);
        r->query_offset = off;
        r->kv_len = r->context_len + r->query_len;
        r->logit_offset = nlog;
        if ((int64_t)r->n_table * b->block_size < r->kv_len || !r->block_table)
            return hr_err(err, errlen, HR_ERR_INVALID,
                          "batch row %d: block table of %d blocks does not cover kv_len %d", i, r->n_table,
                          r->kv_len);
        for (int t = 0; t < r->query_len; t++) {
            int pos = r->context_len + t;
            int blk = r->block_table[pos / b->block_size];
            b->positions[off + t] = pos;
            b->tok_row[off + t] = i;
            b->slots[off + t] = (int64_t)blk * b->block_size + pos % b->block_size;
        }
        if (r->logits == BATCH_LOGITS_LAST)
            b->logit_tok[nlog++] = off + r->query_len - 1;
        else if (r->logits == BATCH_LOGITS_ALL)
            for (int t = 0; t < r->query_len; t++)
                b->logit_tok[nlog++] = off + t;
        off += r->query_len;
    }
    b->n_tok = off;
    b->n_logits = nlog;
    return batch_validate(b, n_blocks, err, errlen);
}

static int batch_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

enum hr_status batch_validate(const struct batch *b, int n_blocks, char *err, size_t errlen)
{
    if (b->block_size < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "batch: block size %d", b->block_size);
    if (b->n_rows < 0 || b->n_rows > b->max_rows || b->n_tok < 0 || b->n_tok > b->max_tok)
        return hr_err(err, errlen, HR_ERR_INVALID, "batch: %d rows / %d tokens exceed capacity", b->n_rows,
                      b->n_tok);
    int off = 0, nlog = 0;
    for (int i = 0; i < b->n_rows; i++) {
        const struct batch_row *r = &b->rows[i];
        if (r->query_len < 1)
            return hr_err(err, errlen, HR_ERR_INVALID, "batch row %d: query_len %d < 1", i, r->query_len);
        if (r->context_len < 0)
            return hr_err(err, errlen, HR_ERR_INVALID, "batch row %d: context_len %d < 0", i, r->context_len);
        if (r->kv_len != r->context_len + r->query_len)
            return hr_err(err, errlen, HR_ERR_INVALID, "batch row %d: kv_len %d != context %d + query %d", i,
                          r->kv_len, r->context_len, r->query_len);
        if (r->query_offset != off)
            return hr_err(err, errlen, HR_ERR_INVALID, "batch row %d: query_offset %d, expected %d", i,
                          r->query_offset, off);
        if (r->query_len > b->n_tok - off)
            return hr_err(err, errlen, HR_ERR_INVALID, "batch row %d: runs past the batch's %d tokens", i,
                          b->n_tok);
        if (!r->block_table || r->n_table < 0 || (int64_t)r->n_table * b->block_size < r->kv_len)
            return hr_err(err, errlen, HR_ERR_INVALID,
                          "batch row %d: block table of %d blocks does not cover kv_len %d", i, r->n_table,
                          r->kv_len);
        int need = (r->kv_len + b->block_size - 1) / b->block_size;
        for (int j = 0; j < need; j++)
            if (r->block_table[j] < 0 || r->block_table[j] >= n_blocks)
                return hr_err(err, errlen, HR_ERR_INVALID, "batch row %d: block id %d outside the pool (%d)", i,
                              r->block_table[j], n_blocks);
        for (int t = 0; t < r->query_len; t++) {
            int pos = r->context_len + t;
            int64_t slot = (int64_t)r->block_table[pos / b->block_size] * b->block_size + pos % b->block_size;
            if (b->positions[off + t] != pos || b->slots[off + t] != slot || b->tok_row[off + t] != i)
                return hr_err(err, errlen, HR_ERR_INVALID,
                              "batch row %d token %d: position/slot/row do not match the layout", i, t);
        }
        if (r->logits != BATCH_LOGITS_NONE && r->logit_offset != nlog)
            return hr_err(err, errlen, HR_ERR_INVALID, "batch row %d: logit_offset %d, expected %d", i,
                          r->logit_offset, nlog);
        if (r->logits == BATCH_LOGITS_LAST) {
            if (b->logit_tok[nlog++] != off + r->query_len - 1)
                return hr_err(err, errlen, HR_ERR_INVALID, "batch row %d: logits row points elsewhere", i);
        } else if (r->logits == BATCH_LOGITS_ALL) {
            for (int t = 0; t < r->query_len; t++)
                if (b->logit_tok[nlog++] != off + t)
                    return hr_err(err, errlen, HR_ERR_INVALID, "batch row %d: logits row points elsewhere", i);
        } else if (r->logits != BATCH_LOGITS_NONE) {
            return hr_err(err, errlen, HR_ERR_INVALID, "batch row %d: bad logits mode %d", i, (int)r->logits);
        }
        off += r->query_len;
    }
    if (off != b->n_tok)
        return hr_err(err, errlen, HR_ERR_INVALID, "batch: rows hold %d tokens, batch says %d", off, b->n_tok);
    if (nlog != b->n_logits)
        return hr_err(err, errlen, HR_ERR_INVALID, "batch: %d logits rows, batch says %d", nlog, b->n_logits);
    /* No two tokens may write one slot.  Checked for step-sized batches (a sort of
     * a stack copy); larger ones are not made by the engine. */
    if (b->n_tok <= 4096) {
        int64_t tmp[4096];
        memcpy(tmp, b->slots, (size_t)b->n_tok * sizeof *tmp);
        qsort(tmp, (size_t)b->n_tok, sizeof *tmp, batch_cmp_i64);
        for (int i = 1; i < b->n_tok; i++)
            if (tmp[i] == tmp[i - 1])
                return hr_err(err, errlen, HR_ERR_INVALID, "batch: two tokens write KV slot %lld",
                              (long long)tmp[i]);
    }
    if (b->n_copies < 0 || b->n_copies > b->max_copies)
        return hr_err(err, errlen, HR_ERR_INVALID, "batch: %d block copies (room for %d)", b->n_copies,
                      b->max_copies);
    for (int i = 0; i < b->n_copies; i++) {
        const struct batch_copy *c = &b->copies[i];
        if (c->src < 0 || c->src >= n_blocks || c->dst < 0 || c->dst >= n_blocks || c->src == c->dst)
            return hr_err(err, errlen, HR_ERR_INVALID, "batch copy %d: blocks %d -> %d (pool of %d)", i, c->src,
                          c->dst, n_blocks);
    }
    return HR_OK;
}
