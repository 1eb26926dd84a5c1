#include <mutex>
#include <string>

#include "../reference/cpu_reference_backend.hpp"
#include "fp4gap/backend.hpp"

namespace fp4gap {

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<GemmBackend>> backends;  // registration order

  GemmBackend* find_locked(std::string_view name) {
    for (const auto& b : backends) {
      if (b->name() == name) return b.get();
    }
    return nullptr;
  }

  void add_locked(std::unique_ptr<GemmBackend> backend) {
    if (!backend) throw InvalidArgument("register_gemm_backend: null backend");
    if (backend->name().empty()) throw InvalidArgument("register_gemm_backend: empty backend name (names are unique keys)");
    if (find_locked(backend->name()) != nullptr) {
      throw InvalidArgument("duplicate backend name: '" + std::string(backend->name()) +
                            "' is already registered (names are unique)");
    }
    backends.push_back(std::move(backend));
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_gemm_backend(std::unique_ptr<GemmBackend> backend) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.add_locked(std::move(backend));
}

std::vector<GemmBackend*> gemm_backends() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<GemmBackend*> out;
  out.reserve(r.backends.size());
  for (const auto& b : r.backends) out.push_back(b.get());
  return out;
}

GemmBackend* find_gemm_backend(std::string_view name) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.find_locked(name);
}

void register_host_backends() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto cpu = make_cpu_reference_backend();
  if (r.find_locked(cpu->name()) == nullptr) r.add_locked(std::move(cpu));
}

}  // namespace fp4gap
