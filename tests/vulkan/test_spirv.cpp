// The SPIR-V emitter against the kernel-IR simulator: every kernel of
// kernels/structured.kir is emitted (and validated) for vulkan:lavapipe, run on vulkan[0]
// through the HAL with the Khronos validation layer on, and its buffers compared with the
// simulator's on the same inputs: integers and i1 exactly, f32 within 1e-5 of each value's
// magnitude (at least 1), f16 and bf16 within 1e-2 (the device's exp and its rounding of
// the result), NaN where the simulator has NaN.
//
// Exit code 77 (meson: SKIP) with the reason when the build has no vulkan driver or no
// SPIR-V backend, or when no Vulkan device is present.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "ir/text/parser.h"
#include "runtime/drivers.h"
#include "runtime/sim/sim.h"
#include "runtime/vulkan/payload.h"
#include "target/target.h"
#ifdef KILN_HAVE_SPIRV
#include "backends/spirv/spirv_backend.h"
#endif
#ifdef KILN_HAVE_VULKAN
#include "runtime/vulkan/vulkan.h"
#endif

using namespace kiln;

#if defined(KILN_HAVE_VULKAN) && defined(KILN_HAVE_SPIRV)
namespace {

const SymbolBinding kDims = {{"n", 100}};

std::unique_ptr<Module> kernels() {
  auto m = parseModuleFile(std::string(KILN_VULKAN_SOURCE_DIR) + "/kernels/structured.kir");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.diags().str()));
  return m.take();
}

// Inputs: small values, so that sums and products stay exact enough; indices for @gather in
// [-n, n); `math` arguments in the domains where the functions are interesting.
HostTensor randomTensor(const Func& k, size_t arg, std::mt19937& rng) {
  const Type& t = k.arg(arg)->type();
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < t.rank(); ++d) shape.push_back(*t.dim(d).expr().evaluate(kDims));
  HostTensor h(t.elem(), shape);
  std::uniform_real_distribution<double> real(-4.0, 4.0);
  std::uniform_int_distribution<int64_t> integer(-100, 100);
  int64_t n = kDims.at("n");
  std::uniform_int_distribution<int64_t> index(-n, n - 1);
  for (int64_t i = 0; i < h.numElements(); ++i) {
    if (k.name() == "gather" && arg == 1)
      h.setI(i, index(rng));
    else if (isFloat(t.elem()))
      h.setF(i, real(rng));
    else if (isBool(t.elem()))
      h.setI(i, integer(rng) > 0);
    else
      h.setI(i, integer(rng));
  }
  return h;
}

bool closeEnough(const HostTensor& got, const HostTensor& want, std::string& why) {
  for (int64_t i = 0; i < want.numElements(); ++i) {
    if (!isFloat(want.elem())) {
      if (got.getI(i) == want.getI(i)) continue;
      why = "element " + std::to_string(i) + ": " + std::to_string(got.getI(i)) + " vs " +
            std::to_string(want.getI(i));
      return false;
    }
    double a = got.getF(i), b = want.getF(i);
    double tol = want.elem() == ElemType::F32 ? 1e-5 : 1e-2;
    if (std::isnan(b)   ? std::isnan(a)
        : std::isinf(b) ? a == b
                        : std::fabs(a - b) <= tol * std::max(1.0, std::fabs(b)))
      continue;
    why = "element " + std::to_string(i) + ": " + std::to_string(a) + " vs " + std::to_string(b);
    return false;
  }
  return true;
}

std::shared_ptr<hal::Device> device0() {
  auto d = hal::openDevice(hal::DeviceId{"vulkan", 0}, Loc::named("test"));
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.diags().str()));
  return *d;
}

// Runs kernel `name` on the simulator and on vulkan[0]; checks every buffer.
void check(const std::string& name) {
  auto m = kernels();
  const Func* k = m->lookupFunc(name);
  REQUIRE(k);
  spirv::SpirvTarget target;
  target.desc = *lookupTarget("vulkan:lavapipe");
  auto info = spirv::emitSpirvKernel(*k, m->symbols(), target);
  REQUIRE_MESSAGE(info.ok(), (info.ok() ? "" : info.diags().str()));

  std::mt19937 rng(7);
  std::vector<HostTensor> initial;
  for (size_t a = 0; a < k->numArgs(); ++a) initial.push_back(randomTensor(*k, a, rng));
  std::vector<sim::BufferRef> simBufs;
  for (const HostTensor& h : initial) simBufs.push_back({h.clone()});
  auto grid = sim::kernelGrid(*k, kDims);
  REQUIRE(grid.ok());
  Status simRun = sim::runKernel(*k, simBufs, kDims, *grid);
  REQUIRE_MESSAGE(simRun.ok(), (simRun.ok() ? "" : simRun.diags().str()));

  auto dev = device0();
  vulkan::VulkanPayload payload;
  payload.kernels.push_back(*info);
  auto exe = dev->loadExecutable("vulkan", vulkan::serializeVulkanPayload(payload));
  REQUIRE_MESSAGE(exe.ok(), (exe.ok() ? "" : exe.diags().str()));
  std::vector<std::unique_ptr<hal::Buffer>> bufs;
  std::vector<hal::Binding> bindings;
  for (const HostTensor& h : initial) {
    auto b = dev->allocate(h.byteSize());
    REQUIRE(b.ok());
    REQUIRE((*b)->write(0, h.data(), h.byteSize()).ok());
    bindings.push_back({b->get(), h.elem(), h.shape()});
    bufs.push_back(b.take());
  }
  std::vector<int64_t> push;
  for (const auto& p : info->push) push.push_back(kDims.at(p.symbol));
  auto cb = dev->createCommandBuffer();
  cb->dispatch(**exe, 0, {grid->x, grid->y, grid->z}, push, bindings);
  auto sem = dev->createSemaphore(0);
  Status run = dev->submit(*cb, nullptr, 0, *sem, 1);
  if (run.ok()) run = sem->wait(1);
  REQUIRE_MESSAGE(run.ok(), (run.ok() ? "" : run.diags().str()));
  for (size_t a = 0; a < initial.size(); ++a) {
    HostTensor got(initial[a].elem(), initial[a].shape());
    REQUIRE(bufs[a]->read(0, got.mutableData(), got.byteSize()).ok());
    std::string why;
    CHECK_MESSAGE(closeEnough(got, simBufs[a].tensor, why),
                  "@" << name << " buffer " << k->arg(a)->name() << ": " << why);
  }
}

} // namespace

TEST_CASE("spirv: loops carrying values, ifs with results and subgroup operations") {
  check("rowsum");
}
TEST_CASE("spirv: f16, bf16, i8, i1 and i64 storage; a subgroup max of i32") { check("types"); }
TEST_CASE("spirv: data-dependent indices, vector accesses and symbolic extents") {
  check("gather");
}
TEST_CASE("spirv: transcendental and special functions") { check("math"); }

TEST_CASE("spirv: payload fields follow the module (bindings written, push constants, "
          "subgroup size, capabilities)") {
  auto m = kernels();
  spirv::SpirvTarget target;
  target.desc = *lookupTarget("vulkan:lavapipe");
  auto rowsum = spirv::emitSpirvKernel(*m->lookupFunc("rowsum"), m->symbols(), target);
  REQUIRE(rowsum.ok());
  CHECK(rowsum->requiredSubgroupSize == 8);
  CHECK(rowsum->fullSubgroups);
  CHECK(rowsum->bindings.size() == 3);
  CHECK_FALSE(rowsum->bindings[0].written);
  CHECK(rowsum->bindings[1].written);
  CHECK(rowsum->bindings[0].maxBytes == 3 * 40 * 4);
  auto gather = spirv::emitSpirvKernel(*m->lookupFunc("gather"), m->symbols(), target);
  REQUIRE(gather.ok());
  REQUIRE(gather->push.size() == 1);
  CHECK(gather->push[0].symbol == "n");
  CHECK(gather->push[0].type == vulkan::PushType::I32); // n in [1, 1000]: 32-bit indices
  CHECK(gather->requiredSubgroupSize == 0);
  auto types = spirv::emitSpirvKernel(*m->lookupFunc("types"), m->symbols(), target);
  REQUIRE(types.ok());
  auto hasCap = [&](uint32_t c) {
    return std::find(types->capabilities.begin(), types->capabilities.end(), c) !=
           types->capabilities.end();
  };
  CHECK(hasCap(4433)); // StorageBuffer16BitAccess
  CHECK(hasCap(4448)); // StorageBuffer8BitAccess
  CHECK(hasCap(39));   // Int8 (i8 arithmetic)
  CHECK(hasCap(11));   // Int64
  CHECK(std::find(types->extensions.begin(), types->extensions.end(), "SPV_KHR_8bit_storage") !=
        types->extensions.end());
}

int main(int argc, char** argv) {
  if (!std::getenv("VK_DRIVER_FILES") && !std::getenv("VK_ICD_FILENAMES")) {
    const char* lvp = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
    if (std::FILE* f = std::fopen(lvp, "r")) {
      std::fclose(f);
      setenv("VK_DRIVER_FILES", lvp, 1);
    }
  }
  setenv("KILN_VULKAN_VALIDATION", "1", 0);
  setenv("KILN_VULKAN_PIPELINE_CACHE", "0", 0);
  // The instance first: the device registry, created after it (and after the layers it
  // loads), is then destroyed before them at exit.
  (void)hal::vulkan::Instance::get();
  {
    auto d = hal::openDevice(hal::DeviceId{"vulkan", 0}, Loc::named("test"));
    if (!d.ok()) {
      std::printf("SKIP: no Vulkan device: %s\n", d.diags().str().c_str());
      return 77;
    }
  }
  doctest::Context ctx(argc, argv);
  int rc = ctx.run();
  if (hal::vulkan::validationMessageCount() != 0) {
    std::printf("FAIL: the Vulkan validation layer reported %llu messages\n",
                (unsigned long long)hal::vulkan::validationMessageCount());
    return 1;
  }
  return rc;
}
#else
int main() {
  std::printf("SKIP: this build has no %s\n",
#ifndef KILN_HAVE_VULKAN
              "vulkan driver (Vulkan headers, meson feature vulkan)"
#else
              "SPIR-V backend (SPIRV-Tools, meson feature spirv)"
#endif
  );
  return 77;
}
#endif
