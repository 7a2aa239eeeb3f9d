/* The backend registry: a device name to a backend. */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "kernels/backend.h"

const char *backend_device_names(void) { return "cpu|cuda|auto"; }

enum hr_status backend_create(struct backend *be, const char *device, const struct backend_opts *o, char *err,
                              size_t errlen)
{
    memset(be, 0, sizeof *be);
    bool is_auto = !device || !*device || !strcmp(device, "auto");
    if (!is_auto && !strcmp(device, "cpu"))
        return backend_cpu_init(be, o, err, errlen);
    if (is_auto || !strcmp(device, "cuda")) {
#ifdef HEARTH_CUDA
        /* auto: CUDA when a GPU answers, else the CPU (a CPU kernel name means the CPU) */
        char why[HR_ERRLEN];
        bool cpu_kernel = o->kernel && *o->kernel && strcmp(o->kernel, "auto") && strncmp(o->kernel, "sm", 2);
        if (is_auto && cpu_kernel)
            return backend_cpu_init(be, o, err, errlen);
        struct backend_opts co = *o;
        if (is_auto && co.compute && !strcmp(co.compute, "f32"))
            return backend_cpu_init(be, o, err, errlen);
        enum hr_status st = backend_cuda_init(be, &co, why, sizeof why);
        if (st == HR_OK || !is_auto)
            return st == HR_OK ? HR_OK : hr_err(err, errlen, st, "--device cuda: %s", why);
        log_info("device auto: no usable GPU (%s); running on the CPU", why);
        return backend_cpu_init(be, o, err, errlen);
#else
        if (is_auto)
            return backend_cpu_init(be, o, err, errlen);
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED,
                      "--device cuda: this build of hearth has no CUDA backend (nvcc was not found, or CUDA=0)");
#endif
    }
    return hr_err(err, errlen, HR_ERR_INVALID, "unknown device '%s' (%s)", device, backend_device_names());
}

void backend_free(struct backend *be)
{
    if (be && be->ops && be->impl)
        be->ops->free(be);
}
