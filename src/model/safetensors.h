/* safetensors files: header parsing (bounds-checked, fuzzable) and read-only mmap of
 * one file or of the shards listed in model.safetensors.index.json. */
#ifndef HEARTH_MODEL_SAFETENSORS_H
#define HEARTH_MODEL_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define SAFETENSORS_MAX_DIMS 8

enum safetensors_dtype {
    SAFETENSORS_DTYPE_F32,
    SAFETENSORS_DTYPE_BF16,
    SAFETENSORS_DTYPE_F16,
    SAFETENSORS_DTYPE_I32,
    SAFETENSORS_DTYPE_I64,
    SAFETENSORS_DTYPE_F64,
};

struct safetensors_tensor {
    char *name;
    enum safetensors_dtype dtype;
    int n_dims;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    int64_t n_elems;
    const void *data;     /* into the mapping; [shape...] of dtype */
    size_t nbytes;
    int file;             /* index into safetensors.files */
};

struct safetensors_file {
    char *path;
    const uint8_t *map;   /* [size] read-only mapping (or a copy in memory), NULL for in-memory parses */
    size_t size;
    bool in_memory;       /* map is a malloc'd copy read from the file (safetensors_set_read_into_memory) */
    int64_t mtime_ns;     /* the file's modification time when it was opened */
};

struct safetensors {
    int n_files;
    struct safetensors_file *files;     /* [n_files] */
    int n_tensors;
    struct safetensors_tensor *tensors; /* [n_tensors], sorted by name */
};

size_t safetensors_dtype_size(enum safetensors_dtype dt);
const char *safetensors_dtype_name(enum safetensors_dtype dt);

/* Parses the header of a whole safetensors file image buf[size] and appends its
 * tensors (data pointing into buf) to st, tagged with file index `file`.  Checks the
 * header length, JSON, dtypes, shapes, that data offsets lie inside the file, match
 * the shape's byte size and do not overlap.  name is used in messages.  Fuzzable. */
enum hr_status safetensors_parse(struct safetensors *st, const uint8_t *buf, size_t size, int file,
                                 const char *name, char *err, size_t errlen);

/* Opens DIR/model.safetensors, or the shards named by DIR/model.safetensors.index.json. */
enum hr_status safetensors_open_dir(struct safetensors *st, const char *dir, char *err, size_t errlen);
/* Opens one file (used by the tests and by `hearth eval` for expected.safetensors). */
enum hr_status safetensors_open_file(struct safetensors *st, const char *path, char *err, size_t errlen);
void safetensors_free(struct safetensors *st);

/* For the files this thread opens from now on: true reads each file into memory instead
 * of mapping it (--no-mmap), so that a file overwritten in place later cannot change or
 * take away the bytes being served (a mapping would fault: SIGBUS).  Default false. */
void safetensors_set_read_into_memory(bool on);
/* HR_ERR_IO naming the file when one of st's files now has another size or modification
 * time than when it was opened (written to while it was loaded: replace files by rename). */
enum hr_status safetensors_check_unchanged(const struct safetensors *st, char *err, size_t errlen);

/* NULL when absent. */
const struct safetensors_tensor *safetensors_find(const struct safetensors *st, const char *name);

/* Writes a safetensors file (used by mkmodel and the tests).  Tensors are written in
 * the order given, data copied from each tensor's data pointer. */
enum hr_status safetensors_write(const char *path, const struct safetensors_tensor *tensors, int n,
                                 char *err, size_t errlen);

/* Streaming writer for files too large to hold in memory: the header is written from
 * the tensors' name, dtype and shape (data and nbytes ignored) at open; the data of
 * each tensor then follows in the same order through safetensors_writer_put, in as
 * many pieces as convenient; close checks that exactly the declared bytes came. */
struct safetensors_writer {
    void *fp;               /* FILE * */
    char *path;
    uint64_t data_bytes;    /* declared size of the data section */
    uint64_t written;       /* data bytes written so far */
};

enum hr_status safetensors_writer_open(struct safetensors_writer *wr, const char *path,
                                       const struct safetensors_tensor *tensors, int n,
                                       char *err, size_t errlen);
enum hr_status safetensors_writer_put(struct safetensors_writer *wr, const void *data, size_t nbytes,
                                      char *err, size_t errlen);
/* Flushes and closes; an error if fewer or more bytes came than declared. */
enum hr_status safetensors_writer_close(struct safetensors_writer *wr, char *err, size_t errlen);
/* Closes without checks (error paths); no-op on a zeroed writer. */
void safetensors_writer_free(struct safetensors_writer *wr);

/* Parses a dtype name as written in headers ("BF16"); returns false when unknown. */
bool safetensors_dtype_parse(const char *s, enum safetensors_dtype *out);

#endif
