// What the client knows about the code it loaded: for each module (and each library: same table,
// keyed by the library's id), the kernels parsed from its image (common/cuda_image.h), and for
// each function or kernel handle it minted, that kernel's parameter layout. This is what lets
// cuModuleGetFunction, cuLibraryGetKernel and the first cuLaunchKernel of a kernel (a CUkernel
// passed as the CUfunction included) go without a round trip (docs/design.md §3).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/cuda_image.h"

namespace rgpu::client {

// Sends a module image (cubin, fatbin, PTX, or the fatbin a wrapper points at) to the server
// with `op` under a client-minted id, records its kernels, and returns the id in *id. `name` is
// the entry point, for messages. The wire layout: ImageLoad in protocol/wire/module.h.
CUresult load_image(uint16_t op, const char* name, const void* image, size_t max_len, uint64_t* id);

class ModuleRegistry {
 public:
  static ModuleRegistry& get();

  // Records a loaded module. `parsed` is false when the image could not be parsed (layouts then
  // come from the server). `digest` names the image across runs (hex SHA-256).
  void add_module(uint64_t module_id, image::Image img, bool parsed, std::string digest);
  void remove_module(uint64_t module_id);
  // Records `to` as holding the same image as `from` (cuLibraryGetModule). False if from is unknown.
  bool copy_module(uint64_t from, uint64_t to);
  // The parsed kernels of a module or library; false for an unknown id or an unparsed image.
  bool kernels(uint64_t module_id, std::vector<image::Kernel>* out);
  // Looks a kernel up by name. Returns 1 found, 0 not in the (parsed) image, -1 unknown module
  // or unparsed image.
  int find_kernel(uint64_t module_id, const std::string& name, image::Kernel* out);

  void set_function(uint64_t function_id, const image::Kernel& k);
  // What names a kernel or function across runs (client/answer_store.h): its module's digest,
  // which load of that image it is, and its name; "" when unknown. A function from
  // cuKernelGetFunction is its kernel's.
  void name_function(uint64_t function_id, uint64_t module_id, const std::string& name);
  void same_as(uint64_t function_id, uint64_t kernel_id);
  std::string identity(uint64_t function_id);
  // The layout of a function handle, or nullptr when unknown.
  std::shared_ptr<const image::Kernel> function(uint64_t function_id);

 private:
  struct Module {
    image::Image img;
    bool parsed;
    std::string digest;
  };
  std::mutex mu_;
  std::unordered_map<uint64_t, Module> modules_;
  std::unordered_map<uint64_t, std::shared_ptr<const image::Kernel>> functions_;
  std::unordered_map<uint64_t, std::string> identities_;
  std::unordered_map<std::string, uint32_t> loads_of_digest_;
};

}  // namespace rgpu::client
