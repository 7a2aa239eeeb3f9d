/* The backend registry: a device name to a backend. */
#include <string.h>

#include "kernels/backend.h"

const char *backend_device_names(void) { return "cpu|cuda|auto"; }

enum hr_status backend_create(struct backend *be, const char *device, const struct backend_opts *o, char *err,
                              size_t errlen)
{
    memset(be, 0, sizeof *be);
    /* auto: CUDA when the build has it and a GPU is present, else the CPU.  No CUDA
     * backend is built in yet, so auto is the CPU. */
    if (!device || !*device || !strcmp(device, "auto") || !strcmp(device, "cpu"))
        return backend_cpu_init(be, o, err, errlen);
    if (!strcmp(device, "cuda"))
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "--device cuda: this build of hearth has no CUDA backend");
    return hr_err(err, errlen, HR_ERR_INVALID, "unknown device '%s' (%s)", device, backend_device_names());
}

void backend_free(struct backend *be)
{
    if (be && be->ops && be->impl)
        be->ops->free(be);
}
