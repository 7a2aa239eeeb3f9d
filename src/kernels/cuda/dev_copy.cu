/* The copy stream of the host-RAM tier (cuda_copy.h): compiled once, for every variant. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_copy.h"

struct cuda_copier {
    cudaStream_t stream;       /* the copies' own, non-blocking */
    cudaStream_t compute;      /* the kernels' (0: the legacy default stream) */
    cudaEvent_t compute_ev;    /* recorded on compute before each copy, waited for by stream */
    cudaEvent_t copies_ev;     /* recorded on stream at a fence, waited for by compute */
    size_t max_pitch;          /* cudaDevAttrMaxPitch: the largest pitch of a 2D copy */
    bool queued;               /* copies were queued since the last fence */
};

static enum hr_status copy_fail(cudaError_t e, const char *what, char *err, size_t errlen)
{
    return hr_err(err, errlen, HR_ERR_INTERNAL, "cuda %s: %s", what, cudaGetErrorString(e));
}

extern "C" enum hr_status cuda_copier_init(struct cuda_copier **out, void *compute_stream, char *err, size_t errlen)
{
    *out = NULL;
    struct cuda_copier *cp = (struct cuda_copier *)calloc(1, sizeof *cp);
    if (!cp)
        return hr_err(err, errlen, HR_ERR_NOMEM, "cuda copier: out of memory");
    cp->compute = (cudaStream_t)compute_stream;
    int dev = 0, pitch = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&pitch, cudaDevAttrMaxPitch, dev);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&cp->stream, cudaStreamNonBlocking);
    bool have_stream = e == cudaSuccess;
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&cp->compute_ev, cudaEventDisableTiming);
    bool have_compute_ev = e == cudaSuccess;
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&cp->copies_ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        if (have_compute_ev)
            cudaEventDestroy(cp->compute_ev);
        if (have_stream)
            cudaStreamDestroy(cp->stream);
        free(cp);
        return copy_fail(e, "copy stream", err, errlen);
    }
    cp->max_pitch = pitch > 0 ? (size_t)pitch : 0;
    *out = cp;
    return HR_OK;
}

extern "C" void cuda_copier_free(struct cuda_copier *cp)
{
    if (!cp)
        return;
    cudaStreamSynchronize(cp->stream);
    cudaEventDestroy(cp->compute_ev);
    cudaEventDestroy(cp->copies_ev);
    cudaStreamDestroy(cp->stream);
    free(cp);
}

extern "C" enum hr_status cuda_copier_copy2d(struct cuda_copier *cp, void *dst, size_t dpitch, const void *src,
                                             size_t spitch, size_t width, size_t height, char *err, size_t errlen)
{
    /* After the compute stream's work queued so far (the steps that wrote the block). */
    cudaError_t e = cudaEventRecord(cp->compute_ev, cp->compute);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(cp->stream, cp->compute_ev, 0);
    if (e != cudaSuccess)
        return copy_fail(e, "copy stream wait", err, errlen);
    if (height == 1 || (dpitch <= cp->max_pitch && spitch <= cp->max_pitch && width <= dpitch && width <= spitch)) {
        e = height == 1 ? cudaMemcpyAsync(dst, src, width, cudaMemcpyDefault, cp->stream)
                        : cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault, cp->stream);
    } else {
        for (size_t i = 0; i < height && e == cudaSuccess; i++)
            e = cudaMemcpyAsync((char *)dst + i * dpitch, (const char *)src + i * spitch, width, cudaMemcpyDefault,
                                cp->stream);
    }
    cp->queued = true;
    return e == cudaSuccess ? HR_OK : copy_fail(e, "block copy", err, errlen);
}

extern "C" enum hr_status cuda_copier_fence(struct cuda_copier *cp, char *err, size_t errlen)
{
    if (!cp || !cp->queued)
        return HR_OK;
    cudaError_t e = cudaEventRecord(cp->copies_ev, cp->stream);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(cp->compute, cp->copies_ev, 0);
    if (e != cudaSuccess)
        return copy_fail(e, "compute stream wait", err, errlen);
    cp->queued = false;
    return HR_OK;
}

extern "C" enum hr_status cuda_copier_wait(struct cuda_copier *cp, char *err, size_t errlen)
{
    if (!cp)
        return HR_OK;
    cudaError_t e = cudaStreamSynchronize(cp->stream);
    return e == cudaSuccess ? HR_OK : copy_fail(e, "block copies", err, errlen);
}
