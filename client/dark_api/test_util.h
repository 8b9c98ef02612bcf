// Helpers shared by the export-table tests: fetching a table the way a library does, and an
// in-process rgpu-server session on the fake driver for tests that need devices.
#pragma once

#include <cuda.h>

#include <cstring>

#include "client/dark_api/dark_api.h"

namespace rgpu::client::dark::testing {

// The table for `id` as cuGetExportTable hands it out.
inline const void* const* table_of(TableId id) {
  const void* t = nullptr;
  if (cuGetExportTable(&t, &spec(id).uuid) != CUDA_SUCCESS) return nullptr;
  return static_cast<const void* const*>(t);
}

template <class F>
F slot(TableId id, unsigned index) {
  return reinterpret_cast<F>(const_cast<void*>(table_of(id)[index]));
}

// Forks a one-session rgpu-server on the fake driver, points RGPU_SERVER at it and connects
// (once per process). Returns false when that fails.
bool connect_to_fake_server();

}  // namespace rgpu::client::dark::testing
