// How the rgpu kernels talk about tensors and ATen ops on the wire (protocol/torch_wire.h): the
// boxed fallback that every ATen op without a local kernel goes through, and the encoders the
// local kernels share with it.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "common/wire.h"

namespace rgpu::torchdev {

// The fallback (registered for every op on PrivateUse1, aten/register.cpp). It runs the op on
// the meta device for the outputs' metadata, mints their storage ids and posts the op without
// waiting. It waits only when it must: the op returns something that is not a tensor, or the
// meta device cannot say what the outputs look like (data-dependent shapes: nonzero, unique,
// masked_select, boolean indexing...).
void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Sparse layouts (COO, CSR, CSC, BSR, BSC) are not supported on rgpu: the wire describes strided
// tensors only. Throws NotImplementedError naming op and the limitation. The fallbacks of
// SparsePrivateUse1 and SparseCsrPrivateUse1 (aten/register.cpp) raise it for every op that would
// make or take a sparse rgpu tensor; the fallback raises it for an op whose result is sparse.
[[noreturn]] void refuse_sparse(const std::string& op);

// A view of an rgpu tensor's storage: TensorDesc on the wire.
void put_tensor_desc(Writer& w, const at::Tensor& t);

// Posts an op whose results the caller does not need (it writes into its arguments).
void post_op(const char* name, const char* overload, std::vector<c10::IValue> args);

}  // namespace rgpu::torchdev
