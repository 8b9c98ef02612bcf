// What the client knows about the code it loaded: for each module, the kernels parsed from its
// image (common/cuda_image.h), and for each function handle it minted, that kernel's parameter
// layout. This is what lets cuModuleGetFunction and the first cuLaunchKernel of a kernel go
// without a round trip (DESIGN.md §3).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/cuda_image.h"

namespace rgpu::client {

class ModuleRegistry {
 public:
  static ModuleRegistry& get();

  // Records a loaded module. `parsed` is false when the image could not be parsed (layouts then
  // come from the server).
  void add_module(uint64_t module_id, image::Image img, bool parsed);
  void remove_module(uint64_t module_id);
  // Looks a kernel up by name. Returns 1 found, 0 not in the (parsed) image, -1 unknown module
  // or unparsed image.
  int find_kernel(uint64_t module_id, const std::string& name, image::Kernel* out);

  void set_function(uint64_t function_id, const image::Kernel& k);
  // The layout of a function handle, or nullptr when unknown.
  std::shared_ptr<const image::Kernel> function(uint64_t function_id);

 private:
  struct Module {
    image::Image img;
    bool parsed;
  };
  std::mutex mu_;
  std::unordered_map<uint64_t, Module> modules_;
  std::unordered_map<uint64_t, std::shared_ptr<const image::Kernel>> functions_;
};

}  // namespace rgpu::client
