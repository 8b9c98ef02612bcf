// Implementation of client/modules.h.
#include "client/modules.h"

namespace rgpu::client {

ModuleRegistry& ModuleRegistry::get() {
  static auto* r = new ModuleRegistry();  // never destroyed: calls may come during exit
  return *r;
}

void ModuleRegistry::add_module(uint64_t module_id, image::Image img, bool parsed) {
  std::lock_guard<std::mutex> lock(mu_);
  modules_[module_id] = Module{std::move(img), parsed};
}

void ModuleRegistry::remove_module(uint64_t module_id) {
  std::lock_guard<std::mutex> lock(mu_);
  modules_.erase(module_id);
}

bool ModuleRegistry::copy_module(uint64_t from, uint64_t to) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(from);
  if (it == modules_.end()) return false;
  Module copy = it->second;
  modules_[to] = std::move(copy);
  return true;
}

bool ModuleRegistry::kernels(uint64_t module_id, std::vector<image::Kernel>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(module_id);
  if (it == modules_.end() || !it->second.parsed) return false;
  *out = it->second.img.kernels;
  return true;
}

int ModuleRegistry::find_kernel(uint64_t module_id, const std::string& name, image::Kernel* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(module_id);
  if (it == modules_.end() || !it->second.parsed) return -1;
  for (const auto& k : it->second.img.kernels) {
    if (k.name == name) {
      *out = k;
      return 1;
    }
  }
  return 0;
}

void ModuleRegistry::set_function(uint64_t function_id, const image::Kernel& k) {
  std::lock_guard<std::mutex> lock(mu_);
  functions_[function_id] = std::make_shared<const image::Kernel>(k);
}

std::shared_ptr<const image::Kernel> ModuleRegistry::function(uint64_t function_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = functions_.find(function_id);
  return it == functions_.end() ? nullptr : it->second;
}

}  // namespace rgpu::client
