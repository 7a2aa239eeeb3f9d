/* The batch: the single definition of what one forward step computes.
 *
 * Rows are sequences; each row brings query_len new tokens whose positions run
 * context_len .. kv_len-1 (kv_len = context_len + query_len).  Row r's tokens are
 * tokens[query_offset .. query_offset + query_len) (query_offset is the exclusive
 * prefix sum of query_len).  A position p of a row lives in KV slot
 * block_table[p / block_size] * block_size + p % block_size.
 *
 * The step's block copies (copy-on-write, every layer of src into dst) belong to the
 * batch too: the backend performs them, in list order, before any kernel of the step
 * reads or writes the store. */
#ifndef HEARTH_KV_BATCH_H
#define HEARTH_KV_BATCH_H

#include <stdint.h>

#include "base/status.h"

enum batch_logits {
    BATCH_LOGITS_NONE, /* no logits (a prefill chunk that does not end the prompt) */
    BATCH_LOGITS_LAST, /* logits of the row's last token (sampling) */
    BATCH_LOGITS_ALL,  /* logits of every token of the row (eval, echo logprobs) */
};

struct batch_row {
    int seq_id;
    int query_len;
    int context_len;
    int kv_len;                /* context_len + query_len */
    int query_offset;          /* exclusive prefix sum of query_len */
    const int32_t *block_table; /* [n_table] block ids; borrowed from the sequence */
    int n_table;
    enum batch_logits logits;
    int logit_offset;          /* first row of this row's logits in the output */
};

struct batch_copy {
    int32_t src, dst;          /* block ids */
};

struct batch {
    int block_size;
    int max_rows;
    int max_tok;
    int n_rows;
    int n_tok;
    int n_logits;              /* rows of logits the forward writes */
    struct batch_row *rows;    /* [max_rows] */
    int32_t *tokens;           /* [max_tok] */
    int32_t *positions;        /* [max_tok] */
    int64_t *slots;            /* [max_tok] */
    int32_t *tok_row;          /* [max_tok] row of each token */
    int32_t *logit_tok;        /* [max_tok] token index of each logits row */
    int max_copies;
    int n_copies;
    struct batch_copy *copies; /* [max_copies] in the order they must run */
};

/* Allocates room for max_rows rows and max_tok tokens, and for the copies a step can
 * need (start-up only). */
enum hr_status batch_init(struct batch *b, int block_size, int max_rows, int max_tok, char *err, size_t errlen);
void batch_free(struct batch *b);
/* Empties the rows and the copies. */
void batch_reset(struct batch *b);

/* Appends a block copy (it runs after those added before it). */
void batch_add_copy(struct batch *b, int src, int dst);

/* Appends a row: copies its query tokens, borrows its block table.  Fails (changing
 * nothing) when the batch is full. */
enum hr_status batch_add_row(struct batch *b, int seq_id, const int32_t *tokens, int query_len,
                             int context_len, const int32_t *block_table, int n_table,
                             enum batch_logits logits, char *err, size_t errlen);

/* Computes the derived arrays (offsets, positions, slots, tok_row, logit rows) from
 * the rows, then validates. */
enum hr_status batch_build(struct batch *b, int n_blocks, char *err, size_t errlen);

/* Checks every identity of the layout, that each block table covers kv_len with
 * block ids in [0, n_blocks), that no two tokens write the same slot, and that every
 * copy names two distinct blocks in [0, n_blocks).
 * A malformed batch is an error, never an assert. */
enum hr_status batch_validate(const struct batch *b, int n_blocks, char *err, size_t errlen);

#endif
