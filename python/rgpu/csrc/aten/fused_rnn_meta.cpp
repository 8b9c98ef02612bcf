// Meta kernels for the fused GRU cell (torch has them for the LSTM cell, in
// torch/_meta_registrations.py, and none for the GRU cell). ATen's GRU cell calls
// _thnn_fused_gru_cell for rgpu inputs at every time step; without a meta kernel the fallback
// could not say what it returns and would wait for the server on each step (aten/fallback.cpp).
// Shapes as the CUDA kernels make them (opserver/fused_rnn_cpu.cpp says more).
#include <ATen/ATen.h>
#include <torch/library.h>

namespace rgpu::torchdev {
namespace {

using at::Tensor;

std::tuple<Tensor, Tensor> fused_gru_cell_meta(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                                               const std::optional<Tensor>& input_bias,
                                               const std::optional<Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes().equals(hidden_gates.sizes()),
              "_thnn_fused_gru_cell: input_gates and hidden_gates must be 2-D and of the same size");
  TORCH_CHECK(hx.dim() == 2 && hx.numel() * 3 == input_gates.numel(),
              "_thnn_fused_gru_cell: the hidden state does not match the gates");
  return {at::empty(hx.sizes(), hx.options()), at::empty({hx.size(0), hx.size(1) * 5}, hx.options())};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> fused_gru_cell_backward_meta(const Tensor& grad_hy,
                                                                                const Tensor& workspace,
                                                                                bool has_bias) {
  TORCH_CHECK(grad_hy.dim() == 2 && workspace.dim() == 2 && workspace.size(0) == grad_hy.size(0) &&
                  workspace.size(1) == grad_hy.size(1) * 5,
              "fused_gru_cell_backward: the workspace does not match grad_hy");
  int64_t n = workspace.size(0), h = grad_hy.size(1);
  auto o = workspace.options();
  Tensor bi = has_bias ? at::empty({3 * h}, o) : Tensor();
  Tensor bh = has_bias ? at::empty({3 * h}, o) : Tensor();
  return {at::empty({n, 3 * h}, o), at::empty({n, 3 * h}, o), at::empty(grad_hy.sizes(), grad_hy.options()), bi, bh};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell_meta));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward_meta));
}

}  // namespace rgpu::torchdev
