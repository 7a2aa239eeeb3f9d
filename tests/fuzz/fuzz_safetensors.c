/* libFuzzer target: the safetensors header parser on arbitrary file images.
 * Built by tests/fuzz/build.sh; replayed over the corpus by tests/unit/test_fuzz_replay.c. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/safetensors.h"

/* Parses one image; on success checks what the parser promises (sorted names,
 * data inside the image, sizes that match the shapes) and touches every byte's
 * ends so that the sanitizers see any out-of-range pointer. */
static enum hr_status fuzz_safetensors_run(const uint8_t *data, size_t size)
{
    struct safetensors st;
    memset(&st, 0, sizeof st);
    char err[HR_ERRLEN];
    enum hr_status rc = safetensors_parse(&st, data, size, 0, "fuzz.safetensors", err, sizeof err);
    volatile uint8_t sink = 0;
    for (int i = 0; rc == HR_OK && i < st.n_tensors; i++) {
        const struct safetensors_tensor *t = &st.tensors[i];
        if (i > 0 && strcmp(st.tensors[i - 1].name, t->name) >= 0)
            __builtin_trap();
        if (safetensors_find(&st, t->name) != t)
            __builtin_trap();
        const uint8_t *p = t->data;
        if (p < data || p + t->nbytes > data + size ||
            (uint64_t)t->nbytes != (uint64_t)t->n_elems * safetensors_dtype_size(t->dtype))
            __builtin_trap();
        if (t->nbytes) {
            sink ^= p[0];
            sink ^= p[t->nbytes - 1];
        }
    }
    (void)sink;
    safetensors_free(&st);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_safetensors_run(data, size);
    return 0;
}
