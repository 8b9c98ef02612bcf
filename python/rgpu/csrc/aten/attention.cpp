// torch.nn.functional.scaled_dot_product_attention on rgpu: which of ATen's attention kernels the
// server runs. ATen asks each device type for its choice through _fused_sdp_choice_stub and runs
// the math decomposition (two matmuls, a softmax and their backward: about ten ops each way) for
// a device type with none. Local cpu and cuda runs pick a fused kernel, so without a choice rgpu
// ran other (slower) kernels than the local run it is compared with. The choice is made here,
// from the tensors' metadata alone (no round trip), as the server's device would make it:
// - a cpu server: torch's own cpu rules (at::_fused_sdp_choice on cpu tensors of the same sizes,
//   strides and dtypes, allocated and never touched: the rules read metadata only; the cpu
//   dispatch stub itself is not exported to extensions); flash_attention then runs
//   _scaled_dot_product_flash_attention_for_cpu, the kernel a local cpu run uses.
// - a cuda server: efficient_attention (_scaled_dot_product_efficient_attention, the kernel a
//   local cuda run picks for fp32) where its constraints surely hold, math otherwise. The cuda
//   rules themselves need a GPU to evaluate, so these are a conservative subset: a wrong "yes"
//   would fail on the server, a wrong "no" only runs the math path as before.
// Both kernels have autograd formulas, meta kernels and backward ops of their own, which the
// client forwards like any other op. The user's torch.backends.cuda.enable_*_sdp switches hold.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>

#include "runtime/connection.h"

namespace rgpu::torchdev {
namespace {

constexpr int64_t choice(at::SDPBackend b) { return static_cast<int64_t>(b); }

at::Tensor cpu_like(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
}

// The constraints of ATen's memory-efficient kernel on sm80 and newer that are certain without
// asking the GPU: dense 4-d (batch, heads, length, head dim) inputs of one floating dtype, one
// head dim that is a multiple of 8 and at most 128, contiguous last dims, the other strides and
// the offsets multiples of 8 elements, no mask, no grouped query attention, equal batch and head
// counts, no empty sequence.
bool efficient_attention_fits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const std::optional<at::Tensor>& mask, bool enable_gqa) {
  if (!at::globalContext().userEnabledMemEfficientSDP()) return false;
  if (mask.has_value() || enable_gqa) return false;
  for (const at::Tensor* t : {&q, &k, &v}) {
    if (t->is_nested() || t->dim() != 4 || t->stride(-1) != 1 || t->scalar_type() != q.scalar_type()) return false;
    if (t->size(0) != q.size(0) || t->size(1) != q.size(1) || t->size(2) == 0) return false;
    // The kernel's loads are 16-byte vectors: every row must start aligned, and no dimension
    // may be expanded (stride 0). The kernel checks every stride, those of size-1 dimensions
    // too (a transposed [.., 1, 8] key has sequence stride 1). On the H200 such inputs
    // (test_device_shape_rules' random layouts) found "cutlassF: no kernel found to launch!".
    if (t->storage_offset() % 8 != 0) return false;
    for (int d = 0; d < 3; ++d)
      if (t->stride(d) % 8 != 0 || (t->size(d) > 1 && t->stride(d) == 0)) return false;
  }
  const auto dtype = q.scalar_type();
  if (dtype != at::kFloat && dtype != at::kHalf && dtype != at::kBFloat16) return false;
  const int64_t head_dim = q.size(3);
  return k.size(3) == head_dim && v.size(3) == head_dim && head_dim % 8 == 0 && head_dim <= 128 &&
         k.size(2) == v.size(2);
}

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  if (Connection::get().server_device() == "cpu") {
    std::optional<at::Tensor> cpu_mask;
    if (mask.has_value()) cpu_mask = cpu_like(*mask);
    return at::_fused_sdp_choice(cpu_like(q), cpu_like(k), cpu_like(v), cpu_mask, dropout_p, is_causal, scale,
                                 enable_gqa);
  }
  return efficient_attention_fits(q, k, v, mask, enable_gqa) ? choice(at::SDPBackend::efficient_attention)
                                                              : choice(at::SDPBackend::math);
}

}  // namespace
}  // namespace rgpu::torchdev

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &rgpu::torchdev::fused_sdp_choice)
}  // namespace at::native
