/* Random-weight checkpoints with the real Qwen3 shapes, in the Hugging Face layout
 * (config.json, generation_config.json, model.safetensors or shards + index), for
 * benchmarks and tests.  `hearth mkmodel` is its command line. */
#ifndef HEARTH_MODEL_MKMODEL_H
#define HEARTH_MODEL_MKMODEL_H

#include <stdint.h>

#include "base/status.h"
#include <stdbool.h>

#include "model/config.h"
#include "model/safetensors.h"

#define MKMODEL_DEFAULT_SHARD_BYTES 2000000000ull

struct mkmodel_opts {
    const char *shape;             /* tiny | qwen3-0.6b | qwen3-8b | qwen3-30b-a3b */
    enum safetensors_dtype dtype;  /* SAFETENSORS_DTYPE_BF16 or _F32 */
    uint64_t seed;
    const char *out_dir;           /* created when missing (its parent must exist) */
    const char *tokenizer_dir;     /* NULL, or a directory with tokenizer.json (+ tokenizer_config.json) */
    uint64_t max_shard_bytes;      /* 0: MKMODEL_DEFAULT_SHARD_BYTES */
    bool config_only;              /* config files (and tokenizer) only: for --load-format dummy */
};

/* Space-separated list of the shape names, for help texts. */
const char *mkmodel_shape_names(void);

/* The config of a named shape (hub values for the real ones). */
enum hr_status mkmodel_shape_config(const char *shape, struct model_config *cfg, char *err, size_t errlen);

/* Writes the checkpoint.  With a tokenizer, vocab_size grows to cover every id of
 * its vocabulary and added tokens, and bos/eos come from <|endoftext|>/<|im_end|>.
 * Same options and seed: same bytes. */
enum hr_status mkmodel_write(const struct mkmodel_opts *o, char *err, size_t errlen);

#endif
