/* The CUDA device, seen from C: initialisation, memory, streams, timing, and the
 * card's yardsticks (HBM bandwidth).  Compiled once (dev.cu), whatever the kernel
 * variant; C code never includes a CUDA header.
 *
 * A build or machine without a GPU or driver gets HR_ERR_UNSUPPORTED from
 * cuda_dev_init with the runtime's reason, never a crash: the CUDA runtime is linked
 * statically and finds the driver (libcuda.so.1) only when it is asked to. */
#ifndef HEARTH_KERNELS_CUDA_CUDA_DEV_H
#define HEARTH_KERNELS_CUDA_CUDA_DEV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "base/status.h"

struct cuda_dev_info {
    char name[256];
    int major, minor;    /* compute capability */
    int sm_count;        /* multiprocessors: part of a variant's cache namespace */
    size_t total_mem;    /* bytes of device memory */
    size_t l2_bytes;
    int runtime_version; /* e.g. 13000 */
    int driver_version;
};

/* Selects device dev and reads its properties.  HR_ERR_UNSUPPORTED (with the
 * runtime's reason) when there is no driver or no such device. */
enum hr_status cuda_dev_init(int dev, struct cuda_dev_info *info, char *err, size_t errlen);

enum hr_status cuda_dev_alloc(void **p, size_t bytes, char *err, size_t errlen);
void cuda_dev_free(void *p);
/* Copies between host and device (or device and device): direction from the pointers. */
enum hr_status cuda_dev_copy(void *dst, const void *src, size_t bytes, char *err, size_t errlen);
/* The same, queued on stream (host memory page-locked): the host does not wait; the
 * copy runs after the stream's work queued before it.  The host memory must stay as
 * it is until a wait covers the copy. */
enum hr_status cuda_dev_copy_async(void *dst, const void *src, size_t bytes, void *stream, char *err,
                                   size_t errlen);
enum hr_status cuda_dev_memset(void *p, int byte, size_t bytes, char *err, size_t errlen);
/* Bytes of device memory free now and in all. */
enum hr_status cuda_dev_mem_info(size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen);
/* Waits for all work on the device; reports an error raised by any earlier kernel. */
enum hr_status cuda_dev_sync(char *err, size_t errlen);
/* Waits for the work queued on stream; reports an error raised by any earlier kernel. */
enum hr_status cuda_dev_stream_sync(void *stream, char *err, size_t errlen);

/* A stream that orders with the legacy default stream (cudaMemcpy waits for its work
 * and its work waits for earlier copies), and capturing its work into a CUDA graph:
 * between capture_begin and capture_end nothing runs, the launches are recorded;
 * capture_end instantiates them as *exec (NULL on failure), graph_launch replays it. */
enum hr_status cuda_dev_stream_create(void **stream, char *err, size_t errlen);
void cuda_dev_stream_destroy(void *stream);
enum hr_status cuda_dev_capture_begin(void *stream, char *err, size_t errlen);
enum hr_status cuda_dev_capture_end(void *stream, void **exec, char *err, size_t errlen);
enum hr_status cuda_dev_graph_launch(void *exec, void *stream, char *err, size_t errlen);
void cuda_dev_graph_free(void *exec);

/* Page-locked host memory (copies to and from it run at the bus's rate), or NULL. */
void *cuda_dev_host_alloc(size_t bytes);
void cuda_dev_host_free(void *p);

/* Timing with device events on the default stream. */
struct cuda_dev_timer;
enum hr_status cuda_dev_timer_init(struct cuda_dev_timer **t, char *err, size_t errlen);
void cuda_dev_timer_start(struct cuda_dev_timer *t);
/* Milliseconds since cuda_dev_timer_start (waits for the work in between). */
double cuda_dev_timer_stop(struct cuda_dev_timer *t);
void cuda_dev_timer_free(struct cuda_dev_timer *t);

/* Yardsticks: device memory read bandwidth (a pass summing `bytes` of data) and copy
 * bandwidth (bytes read plus bytes written), in GB/s, medians of `reps` passes. */
enum hr_status cuda_dev_read_gbs(size_t bytes, int reps, double *gbs, char *err, size_t errlen);
enum hr_status cuda_dev_copy_gbs(size_t bytes, int reps, double *gbs, char *err, size_t errlen);

/* Fills n bf16 values at device pointer p with uniform values in [-scale, scale) from
 * a counter-based hash of (seed, index): element i is dummy_fill_bf16(seed, i, scale)
 * (model/dummy_fill.h), the bits the host computes too; no host round trip. */
enum hr_status cuda_dev_fill_bf16(uint16_t *p, size_t n, uint64_t seed, float scale, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
