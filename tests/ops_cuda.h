/* ops_cuda: test-ops' cuda column. Each cu_<op> takes the op's args with HOST pointers (the same struct
 * the CPU column runs), mirrors every buffer the contract names to device memory (util.h dm_*: exact
 * sizes, aliasing kept, outputs uploaded too so the device starts from the host's NaN pre-fill), calls
 * the launcher cuda_<op> (kernels/kernels.h) on the legacy stream, waits, and copies the outputs back.
 * Returns the launcher's cudaError_t (0 = cudaSuccess; a refusal is cudaErrorInvalidValue and touches
 * nothing) or the first runtime error. The same code runs on a GPU (nvcc) and on the emulator (EMU=1);
 * in a build without CUDA every call returns -1.
 */
#ifndef TEST_OPS_CUDA_H
#define TEST_OPS_CUDA_H

#include "kernels.h"

int cu_quantize(const struct quantize_args *a);
int cu_mmv(const struct mmv_args *a);
int cu_mmv_multi(const struct mmv_multi_args *a);
/* mode 0: INFER_MATMUL=mma (the tensor-core kernel), 1: INFER_MATMUL=cublas; each state made once */
int cu_mm(const struct mm_args *a, int mode);
int cu_norm(const struct norm_args *a);
int cu_norm_q(const struct norm_q_args *a);
int cu_rope(const struct rope_args *a);
int cu_rope_norm(const struct rope_norm_args *a);
int cu_act(const struct act_args *a);
int cu_attn(const struct attn_args *a);
int cu_ssm_conv(const struct ssm_conv_args *a);
int cu_gdn(const struct gdn_args *a);
int cu_gdn_conv(const struct gdn_conv_args *a);
int cu_embed(const struct embed_args *a);
/* cells_bytes: the whole cell buffer (the args name cells by position only) */
int cu_kv_store(const struct kv_store_args *a, size_t cells_bytes);
int cu_moe_route(const struct moe_route_args *a);
int cu_moe_ffn(const struct moe_ffn_args *a);
int cu_sample(const struct sample_args *a);
int cu_spec_accept(const struct spec_accept_args *a);
const char *cu_error(int e);
/* mmv_act_type_cuda (-1 without CUDA). */
int32_t cu_act_type(int32_t weight_type);
/* Whether e is a launcher's refusal (cudaErrorInvalidValue). */
int cu_refused(int e);
/* Frees the mm states. */
void cu_done(void);

#endif
