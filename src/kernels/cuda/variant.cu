/* This variant's table (cuda_kernels.h): the one name each copy exports. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"

namespace CUK_NS {

/* Programmatic dependent launch: Hopper's variant only (the sm80 build has no
 * griddepcontrol), on unless HEARTH_CUDA_PDL=0 (for comparisons: bits are the same). */
bool g_pdl = false;

static enum hr_status prepare(int sm_count, char *err, size_t errlen)
{
#if defined(CUK_HOPPER)
    const char *pdl = getenv("HEARTH_CUDA_PDL");
    g_pdl = !(pdl && strcmp(pdl, "0") == 0);
#endif
    sample_prepare();
    norm_prepare(sm_count);
    enum hr_status st = gemm_prepare(sm_count, err, errlen);
    if (st == HR_OK)
        st = attn_prepare(sm_count, err, errlen);
    return st == HR_OK ? moe_prepare(sm_count, err, errlen) : st;
}

} // namespace CUK_NS

extern "C" const struct cuda_kernels CUK_CAT(cuda_kernels_, CUK_VARIANT) = {
    CUK_STR(CUK_VARIANT),  CUK_NS::prepare,    CUK_NS::gemm_workspace, CUK_NS::gemm_tickets, CUK_NS::gemm_tile_name, CUK_NS::gemm_split,
    CUK_NS::gemm,          CUK_NS::rmsnorm,    CUK_NS::embed,          CUK_NS::attn_prep,
    CUK_NS::attn_workspace, CUK_NS::attention, CUK_NS::block_copy, CUK_NS::to_bf16,
    CUK_NS::gather_rows,   CUK_NS::moe_workspace, CUK_NS::moe,      CUK_NS::sample,
    CUK_NS::gemm_tag,
};
