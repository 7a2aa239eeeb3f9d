/* The device seen from C (cuda_dev.h): compiled once, for every variant. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_dev.h"
#include "kernels/cuda/cuda_kernels.h"
#include "model/dummy_fill.h"

static enum hr_status dev_fail(cudaError_t e, const char *what, char *err, size_t errlen)
{
    return hr_err(err, errlen, HR_ERR_INTERNAL, "cuda %s: %s", what, cudaGetErrorString(e));
}

extern "C" enum hr_status cuda_dev_init(int dev, struct cuda_dev_info *info, char *err, size_t errlen)
{
    memset(info, 0, sizeof *info);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED,
                      "no CUDA device: no NVIDIA driver (libcuda.so.1) found, or it is older than this build's "
                      "CUDA runtime %d.%d",
                      CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    if (e != cudaSuccess)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "no CUDA device: %s", cudaGetErrorString(e));
    if (dev < 0 || dev >= n)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "no CUDA device %d (%d present)", dev, n);
    if ((e = cudaSetDevice(dev)) != cudaSuccess)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "CUDA device %d: %s", dev, cudaGetErrorString(e));
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, dev)) != cudaSuccess)
        return dev_fail(e, "device properties", err, errlen);
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->major = p.major;
    info->minor = p.minor;
    info->sm_count = p.multiProcessorCount;
    info->total_mem = p.totalGlobalMem;
    info->l2_bytes = (size_t)p.l2CacheSize;
    cudaRuntimeGetVersion(&info->runtime_version);
    cudaDriverGetVersion(&info->driver_version);
    return HR_OK;
}

extern "C" enum hr_status cuda_dev_alloc(void **p, size_t bytes, char *err, size_t errlen)
{
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *p = NULL;
        return hr_err(err, errlen, HR_ERR_NOMEM, "cuda alloc of %zu bytes: %s", bytes, cudaGetErrorString(e));
    }
    return HR_OK;
}

extern "C" void cuda_dev_free(void *p)
{
    if (p)
        cudaFree(p);
}

extern "C" enum hr_status cuda_dev_copy(void *dst, const void *src, size_t bytes, char *err, size_t errlen)
{
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
    return e == cudaSuccess ? HR_OK : dev_fail(e, "copy", err, errlen);
}

extern "C" enum hr_status cuda_dev_copy_async(void *dst, const void *src, size_t bytes, void *stream, char *err,
                                              size_t errlen)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream);
    return e == cudaSuccess ? HR_OK : dev_fail(e, "copy", err, errlen);
}

extern "C" enum hr_status cuda_dev_stream_sync(void *stream, char *err, size_t errlen)
{
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    if (e == cudaSuccess)
        e = cudaGetLastError();
    return e == cudaSuccess ? HR_OK : dev_fail(e, "sync", err, errlen);
}

extern "C" enum hr_status cuda_dev_memset(void *p, int byte, size_t bytes, char *err, size_t errlen)
{
    cudaError_t e = cudaMemset(p, byte, bytes);
    return e == cudaSuccess ? HR_OK : dev_fail(e, "memset", err, errlen);
}

extern "C" enum hr_status cuda_dev_stream_create(void **stream, char *err, size_t errlen)
{
    cudaStream_t s = NULL;
    cudaError_t e = cudaStreamCreate(&s);
    *stream = e == cudaSuccess ? (void *)s : NULL;
    return e == cudaSuccess ? HR_OK : dev_fail(e, "stream create", err, errlen);
}

extern "C" void cuda_dev_stream_destroy(void *stream)
{
    if (stream)
        cudaStreamDestroy((cudaStream_t)stream);
}

extern "C" enum hr_status cuda_dev_capture_begin(void *stream, char *err, size_t errlen)
{
    cudaError_t e = cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal);
    return e == cudaSuccess ? HR_OK : dev_fail(e, "graph capture", err, errlen);
}

extern "C" enum hr_status cuda_dev_capture_end(void *stream, void **exec, char *err, size_t errlen)
{
    *exec = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture((cudaStream_t)stream, &g);
    if (e != cudaSuccess) {
        if (g)
            cudaGraphDestroy(g);
        cudaGetLastError(); /* the capture's failure is reported here, not by the next launch */
        return dev_fail(e, "graph capture", err, errlen);
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return dev_fail(e, "graph instantiate", err, errlen);
    }
    *exec = (void *)x;
    return HR_OK;
}

extern "C" enum hr_status cuda_dev_graph_launch(void *exec, void *stream, char *err, size_t errlen)
{
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)stream);
    return e == cudaSuccess ? HR_OK : dev_fail(e, "graph launch", err, errlen);
}

extern "C" void cuda_dev_graph_free(void *exec)
{
    if (exec)
        cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

extern "C" void *cuda_dev_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

extern "C" void cuda_dev_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

extern "C" enum hr_status cuda_dev_sync(char *err, size_t errlen)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess)
        e = cudaGetLastError();
    return e == cudaSuccess ? HR_OK : dev_fail(e, "sync", err, errlen);
}

struct cuda_dev_timer {
    cudaEvent_t a, b;
};

extern "C" enum hr_status cuda_dev_timer_init(struct cuda_dev_timer **t, char *err, size_t errlen)
{
    *t = (struct cuda_dev_timer *)calloc(1, sizeof **t);
    if (!*t)
        return hr_err(err, errlen, HR_ERR_NOMEM, "timer");
    cudaError_t e = cudaEventCreate(&(*t)->a);
    if (e == cudaSuccess)
        e = cudaEventCreate(&(*t)->b);
    if (e != cudaSuccess) {
        free(*t);
        *t = NULL;
        return dev_fail(e, "event", err, errlen);
    }
    return HR_OK;
}

extern "C" void cuda_dev_timer_start(struct cuda_dev_timer *t)
{
    cudaEventRecord(t->a, 0);
}

extern "C" double cuda_dev_timer_stop(struct cuda_dev_timer *t)
{
    float ms = 0;
    cudaEventRecord(t->b, 0);
    cudaEventSynchronize(t->b);
    cudaEventElapsedTime(&ms, t->a, t->b);
    return ms;
}

extern "C" void cuda_dev_timer_free(struct cuda_dev_timer *t)
{
    if (!t)
        return;
    cudaEventDestroy(t->a);
    cudaEventDestroy(t->b);
    free(t);
}

/* ------------------------------------------------------------------ yardsticks */

/* Each thread sums its 16-byte words in a grid-stride loop, four loads in flight. */
__global__ void dev_read_kernel(const uint4 *p, size_t n, unsigned *sink)
{
    unsigned acc = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
              d = __ldcs(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        uint4 a = __ldcs(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) /* never in practice; keeps the loads */
        sink[0] = acc;
}

__global__ void dev_copy_kernel(uint4 *dst, const uint4 *src, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        __stcs(dst + i, __ldcs(src + i));
}

static int dev_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static enum hr_status dev_bw(size_t bytes, int reps, int copy, double *gbs, char *err, size_t errlen)
{
    void *a = NULL, *b = NULL;
    unsigned *sink = NULL;
    double *ms = NULL;
    enum hr_status st = HR_OK;
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    size_t n = bytes / 16;
    if (reps < 1 || reps > 1000 || n == 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "bandwidth: bad size or repetitions");
    ms = (double *)calloc((size_t)reps, sizeof *ms);
    if (!ms)
        return hr_err(err, errlen, HR_ERR_NOMEM, "bandwidth");
    struct cuda_dev_timer *t = NULL;
    if ((st = cuda_dev_alloc(&a, n * 16, err, errlen)) || (st = cuda_dev_alloc(&b, copy ? n * 16 : 64, err, errlen)) ||
        (st = cuda_dev_timer_init(&t, err, errlen)))
        goto out;
    sink = (unsigned *)b;
    if ((st = cuda_dev_fill_bf16((uint16_t *)a, n * 8, 1, 1.0f, err, errlen)))
        goto out;
    for (int r = -2; r < reps; r++) {
        cuda_dev_timer_start(t);
        if (copy)
            dev_copy_kernel<<<sms * 8, 512>>>((uint4 *)b, (const uint4 *)a, n);
        else
            dev_read_kernel<<<sms * 8, 512>>>((const uint4 *)a, n, sink);
        double m = cuda_dev_timer_stop(t);
        if (r >= 0)
            ms[r] = m;
    }
    if ((st = cuda_dev_sync(err, errlen)))
        goto out;
    qsort(ms, (size_t)reps, sizeof *ms, dev_cmp_double);
    *gbs = (double)n * 16 * (copy ? 2 : 1) / (ms[reps / 2] * 1e-3) / 1e9;
out:
    cuda_dev_timer_free(t);
    cuda_dev_free(a);
    cuda_dev_free(b);
    free(ms);
    return st;
}

extern "C" enum hr_status cuda_dev_read_gbs(size_t bytes, int reps, double *gbs, char *err, size_t errlen)
{
    return dev_bw(bytes, reps, 0, gbs, err, errlen);
}

extern "C" enum hr_status cuda_dev_copy_gbs(size_t bytes, int reps, double *gbs, char *err, size_t errlen)
{
    return dev_bw(bytes, reps, 1, gbs, err, errlen);
}

/* The fill's value of element i is dummy_fill_bf16(seed, i): the host computes the
 * same bits (a --load-format dummy model is the same model on every backend). */
__global__ void dev_fill_kernel(uint16_t *p, size_t n, uint64_t seed, float scale)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = dummy_fill_bf16(seed, i, scale);
}

extern "C" enum hr_status cuda_dev_mem_info(size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen)
{
    *free_bytes = *total_bytes = 0;
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    return e == cudaSuccess ? HR_OK : dev_fail(e, "memory info", err, errlen);
}

extern "C" enum hr_status cuda_dev_fill_bf16(uint16_t *p, size_t n, uint64_t seed, float scale, char *err,
                                             size_t errlen)
{
    if (n == 0)
        return HR_OK;
    dev_fill_kernel<<<1024, 256>>>(p, n, seed, scale);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? HR_OK : dev_fail(e, "fill", err, errlen);
}

extern "C" const struct cuda_kernels *cuda_kernels_pick(const char *name, int major, int minor, char *err,
                                                        size_t errlen)
{
    (void)minor;
    if (name && strcmp(name, "sm90a") == 0) {
        if (major != 9) {
            hr_err(err, errlen, HR_ERR_UNSUPPORTED, "cuda variant sm90a needs a Hopper GPU (compute 9.0), not %d.%d",
                   major, minor);
            return NULL;
        }
        return &cuda_kernels_sm90a;
    }
    if (name && strcmp(name, "sm80") == 0) {
        if (major < 8) {
            hr_err(err, errlen, HR_ERR_UNSUPPORTED, "cuda variant sm80 needs compute 8.0 or later, not %d.%d", major,
                   minor);
            return NULL;
        }
        return &cuda_kernels_sm80;
    }
    hr_err(err, errlen, HR_ERR_INVALID, "unknown cuda variant '%s' (sm90a, sm80)", name ? name : "");
    return NULL;
}
