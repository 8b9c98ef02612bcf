// CPU kernels for the fused RNN cells that ATen has only for CUDA: _thnn_fused_lstm_cell,
// _thnn_fused_gru_cell and their backwards. ATen's LSTM and GRU cells call these for every
// device that is not the CPU (RNN.cpp picks them for PrivateUse1 inputs), so an rgpu client sends
// them even to an `--device cpu` server, which would otherwise refuse them. On `--device cuda`
// the CUDA kernels run; these are registered for the CPU key only.
//
// They compute what the CUDA kernels compute (aten/src/ATen/native/cuda/RNN.cu), with ATen ops
// in the inputs' dtype, and lay out the workspace the same way, so a backward can follow a
// forward on either server:
//   LSTM workspace [N, 4H]: the activated gates i, f, g, o;
//   GRU workspace [N, 5H]: r, z, n (activated), hx, and hn + b_hn.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace rgpu::opserver {
namespace {

using at::Tensor;

// gates (+ b1 + b2), summed in the order of the CUDA kernel.
Tensor with_biases(const Tensor& input_gates, const Tensor& hidden_gates, const std::optional<Tensor>& b1,
                   const std::optional<Tensor>& b2) {
  Tensor g = input_gates + hidden_gates;
  if (b1 && b1->defined()) g = g + *b1;
  if (b2 && b2->defined()) g = g + *b2;
  return g;
}

void check_cell(const char* what, const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& prev,
                const std::optional<Tensor>& b1, const std::optional<Tensor>& b2, int64_t factor) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes().equals(hidden_gates.sizes()), what,
              ": input_gates and hidden_gates must be 2-D and of the same size");
  TORCH_CHECK(prev.dim() == 2 && prev.numel() * factor == input_gates.numel(), what,
              ": the hidden state does not match the gates (expected ", factor, " gates per hidden unit)");
  bool has1 = b1 && b1->defined(), has2 = b2 && b2->defined();
  TORCH_CHECK(has1 == has2, what, ": pass both biases or neither");
  if (has1)
    TORCH_CHECK(b1->dim() == 1 && b1->numel() == input_gates.size(1) && b1->sizes().equals(b2->sizes()), what,
                ": the biases must be 1-D with one value per gate");
}

std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                                   const Tensor& cx, const std::optional<Tensor>& input_bias,
                                                   const std::optional<Tensor>& hidden_bias) {
  check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, input_bias, hidden_bias, 4);
  auto g = with_biases(input_gates, hidden_gates, input_bias, hidden_bias).chunk(4, 1);
  Tensor i = g[0].sigmoid(), f = g[1].sigmoid(), c = g[2].tanh(), o = g[3].sigmoid();
  Tensor cx2 = cx.view_as(i);
  Tensor cy = f * cx2 + i * c;
  Tensor hy = o * cy.tanh();
  Tensor workspace = at::cat({i, f, c, o}, 1);
  return {hy.view_as(cx).contiguous(), cy.view_as(cx).contiguous(), workspace};
}

std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell_backward_impl(const std::optional<Tensor>& grad_hy,
                                                                 const std::optional<Tensor>& grad_cy,
                                                                 const Tensor& cx, const Tensor& cy,
                                                                 const Tensor& workspace, bool has_bias) {
  bool has_hy = grad_hy && grad_hy->defined(), has_cy = grad_cy && grad_cy->defined();
  if (!has_hy && !has_cy) return {};
  TORCH_CHECK(workspace.dim() == 2 && workspace.numel() == cx.numel() * 4 && cx.sizes().equals(cy.sizes()),
              "fused_lstm_cell_backward: cx, cy and the workspace do not match");
  auto w = workspace.chunk(4, 1);
  const Tensor &i = w[0], &f = w[1], &c = w[2], &o = w[3];
  Tensor t = cy.view_as(i).tanh();
  Tensor go = has_hy ? grad_hy->view_as(i) : at::zeros_like(i);
  Tensor goc = has_cy ? grad_cy->view_as(i) : at::zeros_like(i);
  Tensor gog = go * t * (1 - o) * o;
  Tensor gcx = go * o * (1 - t * t) + goc;
  Tensor gig = gcx * c * (1 - i) * i;
  Tensor gfg = gcx * cx.view_as(i) * (1 - f) * f;
  Tensor gcg = gcx * i * (1 - c * c);
  Tensor grad_gates = at::cat({gig, gfg, gcg, gog}, 1);
  Tensor grad_cx = (gcx * f).view_as(cx).contiguous();
  Tensor grad_bias = has_bias ? grad_gates.sum(0, false) : Tensor();
  return {grad_gates, grad_cx, grad_bias};
}

std::tuple<Tensor, Tensor> fused_gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                                          const std::optional<Tensor>& input_bias,
                                          const std::optional<Tensor>& hidden_bias) {
  check_cell("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, input_bias, hidden_bias, 3);
  auto in = input_gates.chunk(3, 1), hid = hidden_gates.chunk(3, 1);
  bool has_bias = input_bias && input_bias->defined();
  std::vector<Tensor> b1, b2;
  if (has_bias) {
    b1 = input_bias->chunk(3, 0);
    b2 = hidden_bias->chunk(3, 0);
  }
  auto plus = [&](Tensor x, const std::vector<Tensor>& b, int k) { return has_bias ? x + b[k] : x; };
  Tensor r = plus(plus(in[0] + hid[0], b1, 0), b2, 0).sigmoid();
  Tensor z = plus(plus(in[1] + hid[1], b1, 1), b2, 1).sigmoid();
  Tensor hn = plus(hid[2], b2, 2);
  Tensor n = (plus(in[2], b1, 2) + r * hn).tanh();
  Tensor h = hx.view_as(n);
  Tensor hy = n + z * (h - n);
  Tensor workspace = at::cat({r, z, n, h, hn}, 1);
  return {hy.view_as(hx).contiguous(), workspace};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> fused_gru_cell_backward(const Tensor& grad_hy,
                                                                           const Tensor& workspace, bool has_bias) {
  TORCH_CHECK(grad_hy.dim() == 2 && workspace.dim() == 2 && workspace.size(0) == grad_hy.size(0) &&
                  workspace.size(1) == grad_hy.size(1) * 5,
              "fused_gru_cell_backward: the workspace does not match grad_hy");
  auto w = workspace.chunk(5, 1);
  const Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  const Tensor& go = grad_hy;
  Tensor gz = go * (hx - n) * (1 - z) * z;
  Tensor ghx = go * z;
  Tensor gn = go * (1 - z) * (1 - n * n);
  Tensor ghn = gn * r;
  Tensor gr = gn * hn * (1 - r) * r;
  Tensor grad_input_gates = at::cat({gr, gz, gn}, 1);
  Tensor grad_hidden_gates = at::cat({gr, gz, ghn}, 1);
  Tensor grad_input_bias, grad_hidden_bias;
  if (has_bias) {
    grad_input_bias = grad_input_gates.sum(0, false);
    grad_hidden_bias = grad_hidden_gates.sum(0, false);
  }
  return {grad_input_gates, grad_hidden_gates, ghx.contiguous(), grad_input_bias, grad_hidden_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, CPU, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward_impl));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
}

}  // namespace rgpu::opserver
