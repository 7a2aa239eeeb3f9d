/* The model's fingerprint: what identifies a checkpoint for the prefix cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "base/fileio.h"
#include "model/model.h"

/* config.json and generation_config.json as bytes, and every weight file's header
 * and size. */
enum hr_status model_fingerprint(const struct model *m, uint64_t *out, char *err, size_t errlen)
{
    uint64_t h = 0x68656172746855ull;
    const char *names[] = {"config.json", "generation_config.json"};
    for (int i = 0; i < 2; i++) {
        char path[PATH_MAX + 32], *buf;
        size_t len;
        snprintf(path, sizeof path, "%s/%s", m->dir, names[i]);
        if (!fileio_exists(path))
            continue;
        enum hr_status st = fileio_read_all(path, 16 << 20, &buf, &len, err, errlen);
        if (st != HR_OK)
            return st;
        h = XXH3_64bits_withSeed(buf, len, h);
        free(buf);
    }
    const struct safetensors *stf = &m->w.st;
    for (int i = 0; i < stf->n_files; i++) {
        const struct safetensors_file *f = &stf->files[i];
        uint64_t hlen = 0;
        if (f->map && f->size >= 8)
            memcpy(&hlen, f->map, 8);
        size_t n = f->map ? (size_t)(8 + (hlen < f->size - 8 ? hlen : f->size - 8)) : 0;
        h = XXH3_64bits_withSeed(f->map, n, h);
        h = XXH3_64bits_withSeed(&f->size, sizeof f->size, h);
    }
    if (m->w.dummy) /* no files: the same config with real weights is another model */
        h = XXH3_64bits_withSeed("load-format dummy", 17, h);
    *out = h;
    return HR_OK;
}
