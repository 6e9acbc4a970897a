// include/kiln/kiln.h: the C API over RuntimeModule and the compiler. No C++ exception or
// failure crosses the boundary: every error becomes kiln_last_error() and a status.
#include "kiln/kiln.h"

#include <cstdio>
#include <cstring>
#include <exception>

#include "kiln/compiler.h"
#include "kiln/runtime.h"
#include "runtime/dist/transport.h"
#include "runtime/module_format.h"

struct kiln_module {
  std::unique_ptr<kiln::RuntimeModule> module;
  std::shared_ptr<kiln::dist::Transport> transport; // kiln_module_load_mpi
};

namespace {

thread_local std::string lastError;

void setError(const kiln::Diags& d) { lastError = d.str(); }
void setError(const std::string& s) { lastError = s; }

template <typename F> auto guarded(F f, decltype(f()) onFailure) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    setError(std::string("kiln: error: internal error: ") + e.what());
  } catch (...) {
    setError("kiln: error: internal error");
  }
  return onFailure;
}

kiln_module* wrap(kiln::Result<std::unique_ptr<kiln::RuntimeModule>> r) {
  if (!r.ok()) {
    setError(r.diags());
    return nullptr;
  }
  return new kiln_module{r.take(), nullptr};
}

} // namespace

extern "C" {

const char* kiln_last_error(void) { return lastError.c_str(); }

kiln_module* kiln_module_load(const char* path) {
  return guarded(
      [&]() -> kiln_module* {
        if (!path) return setError("kiln: error: no path given"), nullptr;
        std::string p(path);
        if (p.ends_with(".kmod")) return wrap(kiln::RuntimeModule::open(p));
        kiln::CompileOptions opts;
        opts.embedWeights = false;
        auto program = kiln::compileFile(p, opts);
        if (!program.ok()) return setError(program.diags()), nullptr;
        return wrap(kiln::RuntimeModule::fromProgram(program.take()));
      },
      nullptr);
}

kiln_module* kiln_module_load_mpi(const char* path, const void* comm) {
  return guarded(
      [&]() -> kiln_module* {
        if (!path) return setError("kiln: error: no path given"), nullptr;
        auto transport = kiln::dist::openMpi(comm);
        if (!transport.ok()) return setError(transport.diags()), nullptr;
        kiln::ExecutorOptions opts;
        opts.transport = *transport;
        kiln_module* m = wrap(kiln::RuntimeModule::open(path, opts));
        if (m) m->transport = *transport;
        return m;
      },
      nullptr);
}

int kiln_module_rank(const kiln_module* module) {
  return module && module->transport ? module->transport->rank() : 0;
}

void kiln_module_abort(const kiln_module* module) {
  if (!module || !module->transport) return;
  std::fputs(lastError.c_str(), stderr);
  if (!lastError.empty() && lastError.back() != '\n') std::fputc('\n', stderr);
  module->transport->abort(kiln::Diags{});
}

kiln_module* kiln_module_load_memory(const void* data, size_t size) {
  return guarded(
      [&]() -> kiln_module* {
        if (!data && size) return setError("kiln: error: no data given"), nullptr;
        std::string bytes(static_cast<const char*>(data), size);
        return wrap(kiln::RuntimeModule::fromBytes(std::move(bytes)));
      },
      nullptr);
}

int kiln_compile_file(const char* input_path, const char* output_path) {
  return guarded(
      [&]() -> int {
        if (!input_path || !output_path) return setError("kiln: error: no path given"), 1;
        auto program = kiln::compileFile(input_path);
        if (!program.ok()) return setError(program.diags()), 1;
        kiln::Status s = kiln::writeProgramFile(output_path, *program);
        if (!s.ok()) return setError(s.diags()), 1;
        return 0;
      },
      1);
}

void kiln_module_free(kiln_module* module) { delete module; }

size_t kiln_module_num_functions(const kiln_module* module) {
  return module ? module->module->functions().size() : 0;
}

const char* kiln_module_function_name(const kiln_module* module, size_t index) {
  if (!module || index >= module->module->functions().size()) return nullptr;
  return module->module->functions()[index].c_str();
}

int kiln_module_run(kiln_module* module, const char* function, const kiln_tensor* inputs,
                    size_t num_inputs, kiln_tensor** outputs, size_t* num_outputs) {
  return guarded(
      [&]() -> int {
        if (!module || !function || !outputs || !num_outputs || (num_inputs && !inputs))
          return setError("kiln: error: kiln_module_run: a required argument is NULL"), 1;
        std::vector<kiln::HostTensor> in;
        for (size_t i = 0; i < num_inputs; ++i) {
          const kiln_tensor& t = inputs[i];
          std::string where = "kiln: error: input " + std::to_string(i) + ": ";
          if (t.dtype < 0 || t.dtype >= kiln::kNumElemTypes)
            return setError(where + "unknown dtype"), 1;
          if (t.rank < 0 || t.rank > KILN_MAX_RANK) return setError(where + "bad rank"), 1;
          auto elem = static_cast<kiln::ElemType>(t.dtype);
          std::vector<int64_t> shape(t.shape, t.shape + t.rank);
          uint64_t n = static_cast<uint64_t>(kiln::elemTypeBytes(elem));
          for (int64_t d : shape)
            if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
              return setError(where + "bad shape"), 1;
          if (n != t.size_bytes || (n && !t.data))
            return setError(where + "size_bytes is " + std::to_string(t.size_bytes) +
                            ", the shape needs " + std::to_string(n)),
                   1;
          // The caller's memory, read where it lies; a donated input is written there too.
          in.push_back(kiln::HostTensor::wrap(elem, shape, t.data, nullptr));
        }
        auto out = module->module->run(function, in);
        if (!out.ok()) return setError(out.diags()), 1;
        auto* result = new kiln_tensor[out->size() ? out->size() : 1]();
        for (size_t i = 0; i < out->size(); ++i) {
          const kiln::HostTensor& h = (*out)[i];
          kiln_tensor& t = result[i];
          t.dtype = static_cast<kiln_dtype>(h.elem());
          t.rank = static_cast<int32_t>(h.rank());
          for (int64_t d = 0; d < h.rank() && d < KILN_MAX_RANK; ++d) t.shape[d] = h.shape()[d];
          t.size_bytes = h.byteSize();
          t.data = new uint8_t[t.size_bytes ? t.size_bytes : 1];
          if (t.size_bytes) std::memcpy(t.data, h.data(), t.size_bytes);
        }
        *outputs = result;
        *num_outputs = out->size();
        return 0;
      },
      1);
}

void kiln_tensors_free(kiln_tensor* tensors, size_t count) {
  if (!tensors) return;
  for (size_t i = 0; i < count; ++i) delete[] static_cast<uint8_t*>(tensors[i].data);
  delete[] tensors;
}

} // extern "C"
