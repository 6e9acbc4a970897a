// RefDevice: runs tensor-level kernels with the reference interpreter and, on sim, lowered
// kernels with the kernel-IR simulator.
#include "ir/interp/interp.h"
#include "runtime/ref/ref.h"
#include "runtime/sim/sim.h"

namespace kiln::hal::ref {

std::string RefDevice::description() const {
  return id().kind == "sim" ? "kernel-IR simulator, host memory"
                            : "reference interpreter, host memory";
}

Result<std::unique_ptr<Executable>> RefDevice::loadExecutable(const std::string& target,
                                                              const std::string& payload) {
  if (target != id().kind)
    return error(Loc::named(id().str()), "cannot load an executable for target '" + target + "' (" +
                                             id().kind + " devices load target '" + id().kind +
                                             "')");
  KILN_TRY(std::unique_ptr<RefExecutable> exe, RefExecutable::load(target, payload));
  return std::unique_ptr<Executable>(std::move(exe));
}

Status checkInterpreted(const Device& device, const RefExecutable& exe,
                        const host::HostCommandBuffer::Command& c) {
  Loc loc = Loc::named(device.id().str());
  if (c.kernel >= exe.numKernels())
    return error(loc, "dispatch of kernel " + std::to_string(c.kernel) +
                          " but the executable has " + std::to_string(exe.numKernels()));
  const Func& f = exe.kernel(c.kernel);
  if (exe.lowered(c.kernel))
    return error(loc, "kernel @" + f.name() + " is lowered kernel IR, which only sim runs");
  size_t numInputs = f.numArgs();
  if (c.bindings.size() < numInputs)
    return error(loc, "kernel @" + f.name() + " takes " + std::to_string(numInputs) +
                          " inputs, the dispatch binds " + std::to_string(c.bindings.size()) +
                          " buffers");
  KILN_CHECK(exe.bindPushConstants(c.kernel, c.pushConstants, loc));
  for (size_t i = 0; i < c.bindings.size(); ++i)
    KILN_CHECK(host::checkBinding(device, c.bindings[i], f.name(),
                                  i < numInputs ? "input" : "output",
                                  i < numInputs ? i : i - numInputs));
  return ok();
}

// Whether result `r` of kernel `f` has a dim that is a data-dependent symbol.
static bool bindsDataSymbol(const Func& f, size_t r) {
  const Module* m = f.parent();
  if (!m || r >= f.resultTypes().size()) return false;
  for (const Dim& d : f.resultTypes()[r].shape()) {
    std::optional<std::string> s = d.isUnknown() ? std::nullopt : d.expr().symbolName();
    const SymbolInfo* info = s ? m->symbols().lookup(*s) : nullptr;
    if (info && info->dataDependent) return true;
  }
  return false;
}

Status runInterpreted(const Device& device, const RefExecutable& exe,
                      const host::HostCommandBuffer::Command& c) {
  KILN_CHECK(checkInterpreted(device, exe, c));
  Loc loc = Loc::named(device.id().str());
  const Func& f = exe.kernel(c.kernel);
  size_t numInputs = f.numArgs();
  KILN_TRY(SymbolBinding dims, exe.bindPushConstants(c.kernel, c.pushConstants, loc));
  std::vector<HostTensor> inputs;
  for (size_t i = 0; i < numInputs; ++i) {
    const Binding& b = c.bindings[i];
    if (dynamic_cast<host::HostBuffer*>(b.buffer)) {
      inputs.push_back(HostTensor::view(b.elem, b.shape, b.buffer->map(), nullptr));
      continue;
    }
    HostTensor t = HostTensor::uninitialized(b.elem, b.shape);
    KILN_CHECK(b.buffer->read(0, t.mutableData(), t.byteSize()));
    inputs.push_back(std::move(t));
  }
  KILN_TRY(std::vector<HostTensor> results,
           interpretBound(f, inputs, exe.weights(), std::move(dims)));
  if (results.size() != c.bindings.size() - numInputs)
    return error(loc, "kernel @" + f.name() + " produced " + std::to_string(results.size()) +
                          " results for " + std::to_string(c.bindings.size() - numInputs) +
                          " output buffers");
  for (size_t i = 0; i < results.size(); ++i) {
    const Binding& b = c.bindings[numInputs + i];
    // A result sized by a data-dependent symbol the kernel binds fills the front of its
    // buffer, which was allocated for the symbol's upper bound.
    bool bound = results[i].elem() == b.elem && results[i].byteSize() <= b.buffer->byteSize() &&
                 bindsDataSymbol(f, i);
    if (results[i].elem() != b.elem || (results[i].shape() != b.shape && !bound))
      return error(loc, "kernel @" + f.name() + ": result " + std::to_string(i) +
                            " does not have the shape and element type of its output buffer");
    KILN_CHECK(b.buffer->write(0, results[i].data(), results[i].byteSize()));
  }
  return ok();
}

// Kernel IR: one buffer per argument, inputs then outputs, written in place. The grid comes
// from the dispatch; the kernel's prologue must compute the same one.
Status RefDevice::simulate(const RefExecutable& exe, const host::HostCommandBuffer::Command& c) {
  Loc loc = Loc::named(id().str());
  const Func& f = exe.kernel(c.kernel);
  KILN_TRY(SymbolBinding dims, exe.bindPushConstants(c.kernel, c.pushConstants, loc));
  std::vector<sim::BufferRef> bindings;
  for (size_t i = 0; i < c.bindings.size(); ++i) {
    const Binding& b = c.bindings[i];
    KILN_CHECK(host::checkBinding(*this, b, f.name(), "buffer", i));
    bindings.push_back({HostTensor::view(b.elem, b.shape, b.buffer->map(), nullptr)});
  }
  KILN_TRY(sim::Grid grid, sim::kernelGrid(f, dims));
  const Workgroups& w = c.workgroups;
  if (grid.x != w[0] || grid.y != w[1] || grid.z != w[2])
    return error(loc, "kernel @" + f.name() + " is dispatched over " + std::to_string(w[0]) + "x" +
                          std::to_string(w[1]) + "x" + std::to_string(w[2]) +
                          " workgroups but its prologue computes " + std::to_string(grid.x) + "x" +
                          std::to_string(grid.y) + "x" + std::to_string(grid.z));
  return sim::runKernel(f, bindings, dims, grid);
}

Status RefDevice::dispatch(const host::HostCommandBuffer::Command& c) {
  Loc loc = Loc::named(id().str());
  auto* exe = dynamic_cast<const RefExecutable*>(c.exe);
  if (!exe) return error(loc, "dispatch of an executable that was not loaded by a ref device");
  if (c.kernel >= exe->numKernels())
    return error(loc, "dispatch of kernel " + std::to_string(c.kernel) +
                          " but the executable has " + std::to_string(exe->numKernels()));
  if (exe->lowered(c.kernel)) return simulate(*exe, c);
  return runInterpreted(*this, *exe, c);
}

} // namespace kiln::hal::ref
