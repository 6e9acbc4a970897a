// The amdgpu and cuda backends: kernel IR -> LLVM -> HSA code objects and PTX, for every GPU
// target of the table, read back and checked (no GPU needed: the code is inspected, not run).
#include <doctest/doctest.h>

#include <sstream>

#include "backends/amdgpu/metadata.h"
#include "backends/backend.h"
#include "backends/llvm/gpu_compile.h"
#include "ir/text/parser.h"
#include "passes/codegen.h"
#include "passes/pass_manager.h"
#include "runtime/gpu/payload.h"

using namespace kiln;

namespace {

const std::vector<std::string> kGpuTargets = {"amdgpu:gfx90a", "amdgpu:gfx942", "amdgpu:gfx1100",
                                              "cuda:sm_80", "cuda:sm_90"};

struct Lowered {
  std::unique_ptr<Module> m;
  std::vector<const Func*> kernels;
};

Lowered lower(const std::string& text, const std::string& target, bool run = true) {
  Lowered l;
  auto m = parseModule(text, "test.kir");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.diags().str()));
  l.m = m.take();
  if (run) {
    PassManager pm;
    REQUIRE(pm.addPipeline("shape-infer,codegen{target=" + target + "}").ok());
    std::ostringstream sink;
    Status s = pm.run(*l.m, sink);
    REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.diags().str()));
  }
  for (const auto& f : l.m->funcs())
    if (f->name() != "main" && isLoweredKernel(*f)) l.kernels.push_back(f.get());
  return l;
}

const llvmgen::LlvmGpuBackend& backendFor(const std::string& target) {
  const TargetBackend* b = lookupTargetBackend(target.rfind("cuda:", 0) == 0 ? "cuda" : "amdgpu");
  REQUIRE(b != nullptr);
  return dynamic_cast<const llvmgen::LlvmGpuBackend&>(*b);
}

Result<gpu::GpuImage> compile(const Lowered& l, const std::string& target,
                              llvmgen::GpuOutput out = llvmgen::GpuOutput::Executable,
                              std::string* text = nullptr) {
  llvmgen::GpuCompileOptions o;
  o.output = out;
  o.text = text;
  o.jobs = 1;
  return backendFor(target).compile(*l.m, l.kernels, target, o);
}

const char* kMatmul = R"(symbol m in [1, 4096]
func @main(%x: tensor<{m}x256xf16>, %w: tensor<256x512xf16>) -> (tensor<{m}x512xf16>) {
  %0 = matmul %x, %w : tensor<{m}x512xf16>
  %1 = silu %0 : tensor<{m}x512xf16>
  return %1
})";

const char* kSoftmax = R"(func @main(%x: tensor<64x1000xf32>) -> (tensor<64x1000xf32>) {
  %0 = softmax %x {axis = 1} : tensor<64x1000xf32>
  return %0
})";

} // namespace

TEST_CASE("gpu backends: a tiled matmul compiles for every GPU target and the payload holds it") {
  for (const std::string& t : kGpuTargets) {
    CAPTURE(t);
    Lowered l = lower(kMatmul, t);
    REQUIRE(!l.kernels.empty());
    auto img = compile(l, t);
    REQUIRE_MESSAGE(img.ok(), (img.ok() ? "" : img.diags().str()));
    REQUIRE(img->kernels.size() == l.kernels.size());
    CHECK(img->arch == t.substr(t.find(':') + 1));
    bool amd = t.rfind("amdgpu:", 0) == 0;
    CHECK(img->kind == (amd ? gpu::GpuCodeKind::HsaCodeObject : gpu::GpuCodeKind::Ptx));
    uint64_t shared = 0;
    for (const gpu::GpuKernelInfo& k : img->kernels) {
      CHECK(k.kernargBytes == gpu::kernargBytes(k.args, k.symbols.size()));
      CHECK(k.symbols == std::vector<std::string>{"m"});
      shared += k.staticSharedBytes + k.dynamicSharedBytes;
      CHECK_MESSAGE(!k.stats.spills, k.name, " vgprs ", k.stats.vgprs, " private ",
                    k.stats.privateBytes);
      if (amd) CHECK(k.stats.vgprs > 0);
    }
    CHECK(shared > 0); // the matmul stages tiles in shared memory
    if (amd) {
      auto md = amdgpu::readCodeObjectMetadata(img->code);
      REQUIRE_MESSAGE(md.ok(), (md.ok() ? "" : md.diags().str()));
      CHECK(md->target.find(img->arch) != std::string::npos);
      CHECK(md->version == std::vector<uint64_t>{1, 2}); // code object v5
    } else {
      CHECK(img->code.find(".target " + img->arch) != std::string::npos);
      CHECK(img->code.back() == '\0');
    }
    gpu::GpuPayload p;
    p.target = amd ? "amdgpu" : "cuda";
    p.images.push_back(*img);
    auto back = gpu::parseGpuPayload(gpu::serializeGpuPayload(p));
    REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.diags().str()));
    CHECK(back->images[0].kernels.size() == img->kernels.size());
  }
}

TEST_CASE("gpu backends: row reductions use wave and warp shuffles") {
  for (const std::string& t : kGpuTargets) {
    CAPTURE(t);
    Lowered l = lower(kSoftmax, t);
    std::string text;
    auto img = compile(l, t, llvmgen::GpuOutput::Assembly, &text);
    REQUIRE_MESSAGE(img.ok(), (img.ok() ? "" : img.diags().str()));
    if (t.rfind("amdgpu:", 0) == 0)
      CHECK(text.find("ds_bpermute_b32") != std::string::npos);
    else
      CHECK(text.find("shfl.sync.idx.b32") != std::string::npos);
  }
}

TEST_CASE("gpu backends: LDS beyond the arch's limit is an error, not the end of the process") {
  // Kernel IR written by hand: 96 KiB of shared memory on a 64 KiB target.
  const char* text = R"(func @k(%out: buffer<64xf32>) -> () {
  %one = iconst {value = 1} : index
  kernel_config %one, %one, %one {subgroup = 64, workgroup = [64, 1, 1]}
  %s = alloc : buffer<24576xf32, shared>
  %t = local_id {axis = 0} : index
  %v = load %s, %t : f32
  store %v, %out, %t
  return
}
func @main() -> () {
  return
})";
  Lowered l = lower(text, "amdgpu:gfx942", false);
  REQUIRE(l.kernels.size() == 1);
  auto img = compile(l, "amdgpu:gfx942");
  REQUIRE_FALSE(img.ok());
  CHECK(img.diags().str().find("@k") != std::string::npos);
}
