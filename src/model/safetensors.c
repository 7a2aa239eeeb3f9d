/* safetensors: bounds-checked header parsing, read-only mmap of one file or of the
 * shards of an index, lookup by name, and writing.
 *
 * Layout of a file: an 8-byte little-endian header length N, N bytes of JSON (an
 * object: tensor name -> {dtype, shape, data_offsets}, plus an optional
 * "__metadata__"), then the data section; data_offsets are relative to its start. */
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"

/* The reference implementation refuses headers above 100 MB; so do we. */
#define SAFETENSORS_HEADER_MAX (100u * 1024u * 1024u)
#define SAFETENSORS_INDEX_MAX (64u * 1024u * 1024u)

/* ---------------------------------------------------------------- dtypes */

static const struct {
    enum safetensors_dtype dt;
    const char *name;
    size_t size;
} dtype_table[] = {
    {SAFETENSORS_DTYPE_F32, "F32", 4}, {SAFETENSORS_DTYPE_BF16, "BF16", 2},
    {SAFETENSORS_DTYPE_F16, "F16", 2}, {SAFETENSORS_DTYPE_I32, "I32", 4},
    {SAFETENSORS_DTYPE_I64, "I64", 8}, {SAFETENSORS_DTYPE_F64, "F64", 8},
};
#define N_DTYPES ((int)(sizeof dtype_table / sizeof dtype_table[0]))

size_t safetensors_dtype_size(enum safetensors_dtype dt)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (dtype_table[i].dt == dt)
            return dtype_table[i].size;
    return 0;
}

const char *safetensors_dtype_name(enum safetensors_dtype dt)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (dtype_table[i].dt == dt)
            return dtype_table[i].name;
    return "?";
}

bool safetensors_dtype_parse(const char *s, enum safetensors_dtype *out)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (!strcmp(dtype_table[i].name, s)) {
            *out = dtype_table[i].dt;
            return true;
        }
    return false;
}

/* ---------------------------------------------------------------- lookup */

static int tensor_cmp(const void *a, const void *b)
{
    const struct safetensors_tensor *x = a, *y = b;
    return strcmp(x->name, y->name);
}

static int tensor_key_cmp(const void *key, const void *elem)
{
    const struct safetensors_tensor *t = elem;
    return strcmp((const char *)key, t->name);
}

const struct safetensors_tensor *safetensors_find(const struct safetensors *st, const char *name)
{
    if (!st || !st->tensors || st->n_tensors == 0)
        return NULL;
    return bsearch(name, st->tensors, (size_t)st->n_tensors, sizeof st->tensors[0], tensor_key_cmp);
}

/* ---------------------------------------------------------------- header parsing */

static uint64_t read_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* A JSON integer in [0, INT64_MAX]. */
static bool json_nonneg_int(const json_t *v, int64_t *out)
{
    if (!json_is_integer(v))
        return false;
    json_int_t x = json_integer_value(v);
    if (x < 0)
        return false;
    *out = (int64_t)x;
    return true;
}

/* Fills t (name not set) from one header entry; data section of dsize bytes at data. */
static enum hr_status parse_entry(struct safetensors_tensor *t, const char *key, json_t *val,
                                  const uint8_t *data, size_t dsize, const char *name, char *err,
                                  size_t errlen)
{
    if (!json_is_object(val))
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", name, key);

    json_t *jd = json_object_get(val, "dtype");
    if (!jd)
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: tensor '%s': missing 'dtype'", name, key);
    if (!json_is_string(jd))
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: tensor '%s': 'dtype' is not a string", name, key);
    if (!safetensors_dtype_parse(json_string_value(jd), &t->dtype)) {
        /* dtypes of the format that hearth has no use for (quantised checkpoints) */
        static const char *const other[] = {"BOOL", "U8", "I8", "I16", "U16", "U32", "U64",
                                            "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4"};
        for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
            if (!strcmp(json_string_value(jd), other[i]))
                return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "%s: tensor '%s': dtype %s is not supported", name,
                              key, other[i]);
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s'", name, key,
                      json_string_value(jd));
    }
    size_t esize = safetensors_dtype_size(t->dtype);

    json_t *js = json_object_get(val, "shape");
    if (!js)
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: tensor '%s': missing 'shape'", name, key);
    if (!json_is_array(js))
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: tensor '%s': 'shape' is not an array", name, key);
    size_t nd = json_array_size(js);
    if (nd > SAFETENSORS_MAX_DIMS)
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: tensor '%s': %zu dimensions (at most %d supported)",
                      name, key, nd, SAFETENSORS_MAX_DIMS);
    t->n_dims = (int)nd;
    int64_t n = 1;
    for (size_t i = 0; i < nd; i++) {
        int64_t d;
        if (!json_nonneg_int(json_array_get(js, i), &d))
            return hr_err(err, errlen, HR_ERR_FORMAT,
                          "%s: tensor '%s': shape[%zu] is not a non-negative integer", name, key, i);
        t->shape[i] = d;
        if (__builtin_mul_overflow(n, d, &n))
            return hr_err(err, errlen, HR_ERR_FORMAT, "%s: tensor '%s': shape product overflows", name, key);
    }
    t->n_elems = n;
    uint64_t nbytes;
    if (__builtin_mul_overflow((uint64_t)n, (uint64_t)esize, &nbytes) || nbytes > (uint64_t)SIZE_MAX)
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: tensor '%s': byte size overflows", name, key);

    json_t *jo = json_object_get(val, "data_offsets");
    if (!jo)
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: tensor '%s': missing 'data_offsets'", name, key);
    int64_t b, e;
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_nonneg_int(json_array_get(jo, 0), &b) ||
        !json_nonneg_int(json_array_get(jo, 1), &e))
        return hr_err(err, errlen, HR_ERR_FORMAT,
                      "%s: tensor '%s': 'data_offsets' is not a pair of non-negative integers", name, key);
    if (b > e)
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] are reversed",
                      name, key, (long long)b, (long long)e);
    if ((uint64_t)e > (uint64_t)dsize)
        return hr_err(err, errlen, HR_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets [%lld, %lld] extend beyond the data section "
                      "(%zu bytes; file truncated?)",
                      name, key, (long long)b, (long long)e, dsize);
    if ((uint64_t)(e - b) != nbytes)
        return hr_err(err, errlen, HR_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets [%lld, %lld] hold %lld bytes, but the shape and "
                      "dtype need %llu",
                      name, key, (long long)b, (long long)e, (long long)(e - b), (unsigned long long)nbytes);
    t->nbytes = (size_t)nbytes;
    t->data = data + b;
    return HR_OK;
}

struct span {
    size_t begin, end;
    const char *name;
};

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Non-empty byte ranges of the new tensors must not share a byte. */
static enum hr_status check_overlap(const struct safetensors_tensor *ts, int n, const uint8_t *data,
                                    const char *name, char *err, size_t errlen)
{
    if (n < 2)
        return HR_OK;
    struct span *sp = malloc((size_t)n * sizeof *sp);
    if (!sp)
        return hr_err(err, errlen, HR_ERR_NOMEM, "%s: out of memory checking offsets", name);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (ts[i].nbytes == 0)
            continue;
        size_t b = (size_t)((const uint8_t *)ts[i].data - data);
        sp[m++] = (struct span){b, b + ts[i].nbytes, ts[i].name};
    }
    qsort(sp, (size_t)m, sizeof *sp, span_cmp);
    enum hr_status st = HR_OK;
    for (int i = 1; i < m; i++) {
        if (sp[i].begin < sp[i - 1].end) {
            st = hr_err(err, errlen, HR_ERR_FORMAT,
                        "%s: tensor '%s' (bytes %zu..%zu) overlaps tensor '%s' (bytes %zu..%zu)", name,
                        sp[i].name, sp[i].begin, sp[i].end, sp[i - 1].name, sp[i - 1].begin, sp[i - 1].end);
            break;
        }
    }
    free(sp);
    return st;
}

enum hr_status safetensors_parse(struct safetensors *st, const uint8_t *buf, size_t size, int file,
                                 const char *name, char *err, size_t errlen)
{
    if (size < 8)
        return hr_err(err, errlen, HR_ERR_FORMAT,
                      "%s: %zu bytes, too short for the 8-byte header length (truncated?)", name, size);
    uint64_t hlen = read_le64(buf);
    if (hlen > (uint64_t)(size - 8))
        return hr_err(err, errlen, HR_ERR_FORMAT,
                      "%s: header length %llu extends beyond the file (%zu bytes; truncated?)", name,
                      (unsigned long long)hlen, size);
    if (hlen > SAFETENSORS_HEADER_MAX)
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: header length %llu exceeds the %u-byte limit", name,
                      (unsigned long long)hlen, SAFETENSORS_HEADER_MAX);
    const uint8_t *data = buf + 8 + hlen;
    size_t dsize = size - 8 - (size_t)hlen;

    json_error_t je;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: header is not valid JSON: %s (line %d, column %d)",
                      name, je.text, je.line, je.column);
    if (!json_is_object(root)) {
        json_decref(root);
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: header is not a JSON object", name);
    }

    size_t n_new = json_object_size(root);
    if (json_object_get(root, "__metadata__"))
        n_new--;
    if ((size_t)st->n_tensors + n_new > (size_t)(1 << 24)) {
        json_decref(root);
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: too many tensors (%zu)", name, n_new);
    }
    if (n_new > 0) {
        struct safetensors_tensor *nt =
            realloc(st->tensors, ((size_t)st->n_tensors + n_new) * sizeof *st->tensors);
        if (!nt) {
            json_decref(root);
            return hr_err(err, errlen, HR_ERR_NOMEM, "%s: out of memory for %zu tensors", name, n_new);
        }
        st->tensors = nt;
    }

    int base = st->n_tensors, added = 0;
    enum hr_status rc = HR_OK;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__"))
            continue; /* free-form string map; nothing we need */
        /* st->n_tensors still counts only the earlier (sorted) files */
        const struct safetensors_tensor *dup = safetensors_find(st, key);
        if (dup) {
            rc = hr_err(err, errlen, HR_ERR_FORMAT, "%s: tensor '%s' also appears in %s", name, key,
                        dup->file >= 0 && dup->file < st->n_files ? st->files[dup->file].path
                                                                  : "another file");
            break;
        }
        struct safetensors_tensor *t = &st->tensors[base + added];
        memset(t, 0, sizeof *t);
        rc = parse_entry(t, key, val, data, dsize, name, err, errlen);
        if (rc != HR_OK)
            break;
        t->name = strdup(key);
        if (!t->name) {
            rc = hr_err(err, errlen, HR_ERR_NOMEM, "%s: out of memory", name);
            break;
        }
        t->file = file;
        added++;
    }
    json_decref(root);
    if (rc == HR_OK && added > 1)
        rc = check_overlap(st->tensors + base, added, data, name, err, errlen);
    if (rc != HR_OK) {
        for (int i = 0; i < added; i++)
            free(st->tensors[base + i].name);
        return rc;
    }
    st->n_tensors = base + added;
    if (st->n_tensors > 1)
        qsort(st->tensors, (size_t)st->n_tensors, sizeof *st->tensors, tensor_cmp);
    return HR_OK;
}

/* ---------------------------------------------------------------- files */

/* --no-mmap, per thread (the thread that loads a model sets it). */
static _Thread_local bool safetensors_read_mode;

void safetensors_set_read_into_memory(bool on)
{
    safetensors_read_mode = on;
}

enum hr_status safetensors_check_unchanged(const struct safetensors *st, char *err, size_t errlen)
{
    for (int i = 0; i < st->n_files; i++) {
        const struct safetensors_file *f = &st->files[i];
        if (!f->path || (!f->map && !f->size))
            continue;
        struct stat sb;
        if (stat(f->path, &sb) != 0)
            return hr_err(err, errlen, HR_ERR_IO, "%s: gone while it was loaded (%s); replace weight files by rename",
                          f->path, strerror(errno));
        int64_t mt = (int64_t)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
        if ((size_t)sb.st_size != f->size || mt != f->mtime_ns)
            return hr_err(err, errlen, HR_ERR_IO,
                          "%s: changed while it was loaded (%zu bytes then, %lld now); replace weight files by "
                          "rename, not in place",
                          f->path, f->size, (long long)sb.st_size);
    }
    return HR_OK;
}

/* Maps path read-only (or reads it, see safetensors_set_read_into_memory), parses it
 * and appends it as a new file of st. */
static enum hr_status open_one(struct safetensors *st, const char *path, char *err, size_t errlen)
{
    struct safetensors_file *nf = realloc(st->files, ((size_t)st->n_files + 1) * sizeof *st->files);
    if (!nf)
        return hr_err(err, errlen, HR_ERR_NOMEM, "%s: out of memory", path);
    st->files = nf;
    struct safetensors_file *f = &st->files[st->n_files];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path)
        return hr_err(err, errlen, HR_ERR_NOMEM, "%s: out of memory", path);

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        free(f->path);
        return hr_err(err, errlen, errno == ENOENT ? HR_ERR_NOT_FOUND : HR_ERR_IO, "%s: %s", path,
                      strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        free(f->path);
        return hr_err(err, errlen, HR_ERR_IO, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        close(fd);
        free(f->path);
        return hr_err(err, errlen, HR_ERR_FORMAT,
                      "%s: %zu bytes, too short for the 8-byte header length (truncated?)", path, size);
    }
    f->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
    if (safetensors_read_mode) {
        uint8_t *buf = malloc(size);
        if (!buf) {
            close(fd);
            free(f->path);
            return hr_err(err, errlen, HR_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, size);
        }
        size_t got = 0;
        while (got < size) {
            ssize_t r = pread(fd, buf + got, size - got, (off_t)got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                int e = r < 0 ? errno : 0;
                close(fd);
                free(buf);
                free(f->path);
                return hr_err(err, errlen, HR_ERR_IO, "%s: read failed at byte %zu of %zu: %s", path, got, size,
                              e ? strerror(e) : "the file got shorter");
            }
            got += (size_t)r;
        }
        close(fd);
        f->map = buf;
        f->size = size;
        f->in_memory = true;
        st->n_files++; /* from here on safetensors_free releases it */
        return safetensors_parse(st, f->map, f->size, st->n_files - 1, path, err, errlen);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int mmap_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        free(f->path);
        return hr_err(err, errlen, HR_ERR_IO, "%s: mmap failed: %s", path, strerror(mmap_errno));
    }
    f->map = map;
    f->size = size;
    st->n_files++; /* from here on safetensors_free releases it */
    return safetensors_parse(st, f->map, f->size, st->n_files - 1, path, err, errlen);
}

enum hr_status safetensors_open_file(struct safetensors *st, const char *path, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    enum hr_status rc = open_one(st, path, err, errlen);
    if (rc != HR_OK)
        safetensors_free(st);
    return rc;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The shards of model.safetensors.index.json: weight_map tensor -> file name. */
static enum hr_status open_index(struct safetensors *st, const char *dir, const char *ipath, char *err,
                                 size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    enum hr_status rc = fileio_read_all(ipath, SAFETENSORS_INDEX_MAX, &text, &len, err, errlen);
    if (rc != HR_OK)
        return rc;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root)
        return hr_err(err, errlen, HR_ERR_FORMAT, "%s: not valid JSON: %s (line %d, column %d)", ipath,
                      je.text, je.line, je.column);
    const char **names = NULL;
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(root)) {
        rc = hr_err(err, errlen, HR_ERR_FORMAT, "%s: not a JSON object", ipath);
        goto out;
    }
    if (!wm) {
        rc = hr_err(err, errlen, HR_ERR_FORMAT, "%s: missing key 'weight_map'", ipath);
        goto out;
    }
    if (!json_is_object(wm)) {
        rc = hr_err(err, errlen, HR_ERR_FORMAT, "%s: 'weight_map' is not an object", ipath);
        goto out;
    }
    size_t n = json_object_size(wm);
    if (n == 0) {
        rc = hr_err(err, errlen, HR_ERR_FORMAT, "%s: 'weight_map' lists no tensors", ipath);
        goto out;
    }
    names = malloc(n * sizeof *names);
    if (!names) {
        rc = hr_err(err, errlen, HR_ERR_NOMEM, "%s: out of memory", ipath);
        goto out;
    }
    size_t k = 0;
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val) {
        const char *fn = json_string_value(val);
        if (!fn) {
            rc = hr_err(err, errlen, HR_ERR_FORMAT, "%s: weight_map['%s'] is not a string", ipath, key);
            goto out;
        }
        /* Shards live next to the index: a path would let a file point anywhere. */
        if (!*fn || strchr(fn, '/') || !strcmp(fn, ".") || !strcmp(fn, "..")) {
            rc = hr_err(err, errlen, HR_ERR_FORMAT, "%s: weight_map['%s'] = '%s' is not a file name", ipath,
                        key, fn);
            goto out;
        }
        names[k++] = fn;
    }
    qsort(names, k, sizeof *names, str_cmp);
    for (size_t i = 0; i < k; i++) {
        if (i > 0 && !strcmp(names[i], names[i - 1]))
            continue;
        char path[4096];
        rc = fileio_join(path, sizeof path, dir, names[i], err, errlen);
        if (rc == HR_OK)
            rc = open_one(st, path, err, errlen);
        if (rc != HR_OK)
            goto out;
    }
    json_object_foreach(wm, key, val) {
        const char *fn = json_string_value(val);
        const struct safetensors_tensor *t = safetensors_find(st, key);
        if (!t) {
            rc = hr_err(err, errlen, HR_ERR_FORMAT,
                        "%s: tensor '%s' is listed in the index but missing from its shard %s/%s", ipath, key,
                        dir, fn);
            goto out;
        }
        if (strcmp(base_name(st->files[t->file].path), fn) != 0) {
            rc = hr_err(err, errlen, HR_ERR_FORMAT,
                        "%s: tensor '%s' is missing from its shard %s/%s (found in %s instead)", ipath, key,
                        dir, fn, st->files[t->file].path);
            goto out;
        }
    }
out:
    free(names);
    json_decref(root);
    return rc;
}

enum hr_status safetensors_open_dir(struct safetensors *st, const char *dir, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    char path[4096];
    enum hr_status rc = fileio_join(path, sizeof path, dir, "model.safetensors.index.json", err, errlen);
    if (rc != HR_OK)
        return rc;
    if (fileio_exists(path)) {
        rc = open_index(st, dir, path, err, errlen);
    } else {
        rc = fileio_join(path, sizeof path, dir, "model.safetensors", err, errlen);
        if (rc != HR_OK)
            return rc;
        if (!fileio_exists(path))
            return hr_err(err, errlen, HR_ERR_NOT_FOUND,
                          "%s: neither model.safetensors nor model.safetensors.index.json exists", dir);
        rc = open_one(st, path, err, errlen);
    }
    if (rc != HR_OK)
        safetensors_free(st);
    return rc;
}

void safetensors_free(struct safetensors *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->n_tensors; i++)
        free(st->tensors[i].name);
    free(st->tensors);
    for (int i = 0; i < st->n_files; i++) {
        if (st->files[i].map && st->files[i].in_memory)
            free((void *)st->files[i].map);
        else if (st->files[i].map)
            munmap((void *)st->files[i].map, st->files[i].size);
        free(st->files[i].path);
    }
    free(st->files);
    memset(st, 0, sizeof *st);
}

/* ---------------------------------------------------------------- writing */

static enum hr_status tensor_bytes(const struct safetensors_tensor *t, const char *path, uint64_t *out,
                                   char *err, size_t errlen)
{
    size_t es = safetensors_dtype_size(t->dtype);
    if (!t->name || !es || t->n_dims < 0 || t->n_dims > SAFETENSORS_MAX_DIMS)
        return hr_err(err, errlen, HR_ERR_INVALID, "%s: tensor '%s': bad name, dtype or rank", path,
                      t->name ? t->name : "(null)");
    uint64_t n = es;
    for (int d = 0; d < t->n_dims; d++)
        if (t->shape[d] < 0 || __builtin_mul_overflow(n, (uint64_t)t->shape[d], &n))
            return hr_err(err, errlen, HR_ERR_INVALID, "%s: tensor '%s': bad shape", path, t->name);
    *out = n;
    return HR_OK;
}

void safetensors_writer_free(struct safetensors_writer *wr)
{
    if (!wr)
        return;
    if (wr->fp)
        fclose(wr->fp);
    free(wr->path);
    memset(wr, 0, sizeof *wr);
}

enum hr_status safetensors_writer_open(struct safetensors_writer *wr, const char *path,
                                       const struct safetensors_tensor *tensors, int n,
                                       char *err, size_t errlen)
{
    memset(wr, 0, sizeof *wr);
    json_t *root = json_object();
    json_t *meta = json_object();
    if (!root || !meta) {
        json_decref(root);
        json_decref(meta);
        return hr_err(err, errlen, HR_ERR_NOMEM, "%s: out of memory", path);
    }
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t off = 0;
    enum hr_status rc = HR_OK;
    for (int i = 0; i < n && rc == HR_OK; i++) {
        const struct safetensors_tensor *t = &tensors[i];
        uint64_t nb;
        rc = tensor_bytes(t, path, &nb, err, errlen);
        if (rc != HR_OK)
            break;
        if (json_object_get(root, t->name)) {
            rc = hr_err(err, errlen, HR_ERR_INVALID, "%s: tensor '%s' given twice", path, t->name);
            break;
        }
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        for (int d = 0; d < t->n_dims; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + nb)));
        json_object_set_new(e, "dtype", json_string(safetensors_dtype_name(t->dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_set_new(root, t->name, e) != 0)
            rc = hr_err(err, errlen, HR_ERR_INVALID, "%s: tensor '%s': cannot encode", path, t->name);
        off += nb;
    }
    char *hdr = rc == HR_OK ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (rc != HR_OK)
        return rc;
    if (!hdr)
        return hr_err(err, errlen, HR_ERR_NOMEM, "%s: cannot encode the header", path);

    /* Pad with spaces so that the data section starts 8-byte aligned. */
    size_t hl = strlen(hdr);
    size_t padded = (hl + 7) & ~(size_t)7;
    uint8_t lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        free(hdr);
        return hr_err(err, errlen, HR_ERR_IO, "%s: %s", path, strerror(errno));
    }
    wr->fp = fp;
    wr->path = strdup(path);
    setvbuf(fp, NULL, _IOFBF, 1 << 20);
    bool ok = fwrite(lenbuf, 1, 8, fp) == 8 && fwrite(hdr, 1, hl, fp) == hl;
    for (size_t i = hl; ok && i < padded; i++)
        ok = fputc(' ', fp) != EOF;
    free(hdr);
    if (!ok || !wr->path) {
        safetensors_writer_free(wr);
        return hr_err(err, errlen, HR_ERR_IO, "%s: write failed", path);
    }
    wr->data_bytes = off;
    return HR_OK;
}

enum hr_status safetensors_writer_put(struct safetensors_writer *wr, const void *data, size_t nbytes,
                                      char *err, size_t errlen)
{
    if (!wr->fp)
        return hr_err(err, errlen, HR_ERR_INVALID, "safetensors writer is not open");
    if (nbytes > wr->data_bytes - wr->written)
        return hr_err(err, errlen, HR_ERR_INVALID, "%s: more data than the header declares", wr->path);
    if (nbytes && fwrite(data, 1, nbytes, wr->fp) != nbytes)
        return hr_err(err, errlen, HR_ERR_IO, "%s: write failed: %s", wr->path, strerror(errno));
    wr->written += nbytes;
    return HR_OK;
}

enum hr_status safetensors_writer_close(struct safetensors_writer *wr, char *err, size_t errlen)
{
    if (!wr->fp)
        return hr_err(err, errlen, HR_ERR_INVALID, "safetensors writer is not open");
    enum hr_status rc = HR_OK;
    if (wr->written != wr->data_bytes)
        rc = hr_err(err, errlen, HR_ERR_INVALID, "%s: %llu data bytes written, header declares %llu", wr->path,
                    (unsigned long long)wr->written, (unsigned long long)wr->data_bytes);
    int c = fclose(wr->fp);
    wr->fp = NULL;
    if (c != 0 && rc == HR_OK)
        rc = hr_err(err, errlen, HR_ERR_IO, "%s: write failed: %s", wr->path, strerror(errno));
    safetensors_writer_free(wr);
    return rc;
}

enum hr_status safetensors_write(const char *path, const struct safetensors_tensor *tensors, int n,
                                 char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        uint64_t nb;
        enum hr_status rc = tensor_bytes(&tensors[i], path, &nb, err, errlen);
        if (rc != HR_OK)
            return rc;
        if (nb != (uint64_t)tensors[i].nbytes || (nb && !tensors[i].data))
            return hr_err(err, errlen, HR_ERR_INVALID, "%s: tensor '%s': nbytes %zu does not match its shape",
                          path, tensors[i].name, tensors[i].nbytes);
    }
    struct safetensors_writer wr;
    enum hr_status rc = safetensors_writer_open(&wr, path, tensors, n, err, errlen);
    for (int i = 0; i < n && rc == HR_OK; i++)
        rc = safetensors_writer_put(&wr, tensors[i].data, tensors[i].nbytes, err, errlen);
    if (rc != HR_OK) {
        safetensors_writer_free(&wr);
        return rc;
    }
    return safetensors_writer_close(&wr, err, errlen);
}
