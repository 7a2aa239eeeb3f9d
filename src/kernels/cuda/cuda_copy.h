/* Copies of KV blocks between device memory and pinned host memory on a stream of
 * their own (the host-RAM tier of the prefix cache), seen from C.  Compiled once
 * (dev_copy.cu), whatever the kernel variant; C code never includes a CUDA header.
 *
 * The copy stream is non-blocking: it never waits implicitly for the compute stream
 * (the stream the kernels run on; NULL: the legacy default stream), nor the compute
 * stream for it.  The order between the two is made explicit with events, on the
 * device, so that the host never waits for a copy it does not read:
 *  - every copy queued runs after the work queued on the compute stream before it
 *    (an export reads what the steps before it wrote);
 *  - cuda_copier_fence makes the compute stream's later work wait for every copy
 *    queued so far (a block exported may be rewritten by the next step, a block
 *    imported is read by it);
 *  - copies run in the order they were queued (one stream). */
#ifndef HEARTH_KERNELS_CUDA_CUDA_COPY_H
#define HEARTH_KERNELS_CUDA_CUDA_COPY_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "base/status.h"

struct cuda_copier;

/* A copy stream and its events on the current device; compute_stream: the stream the
 * kernels run on (NULL: the legacy default stream). */
enum hr_status cuda_copier_init(struct cuda_copier **out, void *compute_stream, char *err, size_t errlen);
/* Waits for the queued copies, then frees the stream and events.  NULL is a no-op. */
void cuda_copier_free(struct cuda_copier *cp);

/* Queues height rows of width bytes: row i from src + i * spitch to dst + i * dpitch
 * (host or device on either side; host memory page-locked, cuda_dev_host_alloc, for
 * the copy to be queued rather than staged).  One 2D copy when the pitches allow it, else one copy a row. */
enum hr_status cuda_copier_copy2d(struct cuda_copier *cp, void *dst, size_t dpitch, const void *src, size_t spitch,
                                  size_t width, size_t height, char *err, size_t errlen);
/* The compute stream's work queued from now on waits for every copy queued so far
 * (nothing is queued when no copy was since the last fence). */
enum hr_status cuda_copier_fence(struct cuda_copier *cp, char *err, size_t errlen);
/* Waits on the host until every queued copy is done; reports a failure of one. */
enum hr_status cuda_copier_wait(struct cuda_copier *cp, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
