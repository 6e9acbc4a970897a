// Unit tests for the CPU backend: kernel IR -> LLVM -> shared object, run directly through
// the entry-point ABI (runtime/cpu/abi.h) and compared with the simulator and the reference
// interpreter; target resolution and the features a level needs.
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <llvm/Support/ErrorHandling.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <numbers>
#include <random>
#include <sstream>

#include "analysis/kernel_grid.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/llvm/machine.h"
#include "backends/opt_level.h"
#include "backends/parallel.h"
#include "ir/interp/interp.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"
#include "passes/codegen.h"
#include "passes/pass_manager.h"
#include "runtime/cpu/abi.h"
#include "runtime/sim/sim.h"
#include "target/target.h"

using namespace kiln;

namespace {

std::unique_ptr<Module> parse(const std::string& text) {
  auto m = parseModule(text, "test.kir");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.diags().str()));
  return m.take();
}

struct Loaded {
  void* handle = nullptr;
  ~Loaded() {
    if (handle) dlclose(handle);
  }
};

// The module's kernels compiled for `target` and loaded; runs @main with lowered dispatches
// on the CPU code and the rest on the interpreter.
struct CpuRun {
  std::unique_ptr<Module> m;
  std::vector<const Func*> kernels;
  cpu::CpuPayload payload;
  Loaded so;

  // `codegen` shapes the kernels (a GPU target gives workgroups of many threads, shared
  // memory and barriers); `target` is the CPU the code is compiled for. With `lower` false
  // the module's kernels are already kernel IR.
  explicit CpuRun(const std::string& text, const std::string& target = "cpu",
                  const std::string& codegen = "cpu", bool lower = true) {
    m = parse(text);
    if (lower) {
      PassManager pm;
      REQUIRE(pm.addPipeline("shape-infer,codegen{target=" + codegen + "}").ok());
      std::ostringstream sink;
      Status s = pm.run(*m, sink);
      REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.diags().str()));
    }
    for (const auto& f : m->funcs())
      if (f->name() != "main" && isLoweredKernel(*f)) kernels.push_back(f.get());
    auto c = cpu::compileCpuKernels(*m, kernels, target);
    REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.diags().str()));
    payload = c->payload;
    if (payload.sharedObject.empty()) return;
    int fd = memfd_create("kiln-test", 0);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, payload.sharedObject.data(), payload.sharedObject.size()) ==
            static_cast<ssize_t>(payload.sharedObject.size()));
    so.handle = dlopen(("/proc/self/fd/" + std::to_string(fd)).c_str(), RTLD_NOW | RTLD_LOCAL);
    close(fd);
    REQUIRE_MESSAGE(so.handle, dlerror());
  }

  // The status the kernel's entry point returns (a KilnCpuStatus).
  Result<int32_t> callKernel(size_t index, std::vector<HostTensor*> bufs,
                             const SymbolBinding& dims) {
    const cpu::CpuKernelInfo& info = payload.kernels[index];
    auto fn = reinterpret_cast<KilnCpuKernelFn>(dlsym(so.handle, info.symbol.c_str()));
    if (!fn) return error(Loc{}, "missing symbol " + info.symbol);
    std::vector<void*> ptrs;
    std::vector<int64_t> extents, syms;
    for (HostTensor* t : bufs) {
      ptrs.push_back(t->mutableData());
      for (int64_t d : t->shape()) extents.push_back(d);
    }
    for (const std::string& s : info.symbols) syms.push_back(dims.at(s));
    // The grid the compiler records on the launch, which must be the prologue's.
    KILN_TRY(auto grid, kernelGrid(*kernels[index]));
    int64_t g[3];
    for (size_t i = 0; i < 3; ++i) g[i] = *grid[i].evaluate(dims);
    KILN_TRY(sim::Grid want, sim::kernelGrid(*kernels[index], dims));
    if (g[0] != want.x || g[1] != want.y || g[2] != want.z)
      return error(Loc{}, "the grid expressions disagree with the prologue");
    KilnCpuArgs args{ptrs.data(), extents.data(), syms.data(), {g[0], g[1], g[2]}};
    return fn(&args, 0, g[0] * g[1] * g[2]);
  }

  Status runKernel(size_t index, std::vector<HostTensor*> bufs, const SymbolBinding& dims) {
    KILN_TRY(int32_t st, callKernel(index, std::move(bufs), dims));
    if (st != 0) return error(Loc{}, "kernel failed with status " + std::to_string(st));
    return ok();
  }

  Result<std::vector<HostTensor>> run(const std::vector<HostTensor>& inputs,
                                      const SymbolBinding& dims) {
    const Func& f = *m->lookupFunc("main");
    WeightStore w(*m);
    std::unordered_map<const Value*, HostTensor> env;
    for (size_t i = 0; i < inputs.size(); ++i) env.emplace(f.arg(i), inputs[i]);
    for (const auto& op : f.ops()) {
      std::vector<HostTensor> in;
      for (const Value* v : op->operands()) in.push_back(env.at(v));
      if (op->kind() == OpKind::Return) return in;
      size_t k = kernels.size();
      if (op->kind() == OpKind::Dispatch)
        for (size_t i = 0; i < kernels.size(); ++i)
          if (kernels[i]->name() == op->attrs().getStr("kernel")) k = i;
      if (k < kernels.size()) {
        std::vector<HostTensor*> bufs;
        for (HostTensor& t : in) bufs.push_back(&t);
        std::vector<HostTensor> outs;
        outs.reserve(op->numResults());
        for (size_t r = 0; r < op->numResults(); ++r) {
          std::vector<int64_t> shape;
          for (const Dim& d : op->result(r)->type().shape())
            shape.push_back(*d.expr().evaluate(dims));
          outs.emplace_back(op->result(r)->type().elem(), shape);
        }
        for (HostTensor& t : outs) bufs.push_back(&t);
        KILN_CHECK(runKernel(k, bufs, dims));
        for (size_t r = 0; r < outs.size(); ++r) env.insert_or_assign(op->result(r), outs[r]);
        continue;
      }
      KILN_TRY(std::vector<HostTensor> outs, evalOp(*op, in, dims, &w));
      for (size_t r = 0; r < outs.size(); ++r) env.insert_or_assign(op->result(r), outs[r]);
    }
    return error(f.loc(), "no return");
  }
};

HostTensor ramp(ElemType e, std::vector<int64_t> shape, double scale) {
  HostTensor t(e, std::move(shape));
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.setF(i, std::sin(static_cast<double>(i) * 0.7) * scale);
  return t;
}

void expectMatchesRef(const std::string& text, const std::vector<HostTensor>& in,
                      const SymbolBinding& dims = {}, double tol = 1e-5,
                      const std::string& codegen = "cpu") {
  CpuRun cpu(text, "cpu", codegen);
  auto ref = parse(text);
  WeightStore rw(*ref);
  auto want = interpret(*ref->lookupFunc("main"), in, rw);
  REQUIRE_MESSAGE(want.ok(), (want.ok() ? "" : want.diags().str()));
  auto got = cpu.run(in, dims);
  REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.diags().str()));
  REQUIRE(got->size() == want->size());
  for (size_t o = 0; o < got->size(); ++o) {
    REQUIRE((*got)[o].shape() == (*want)[o].shape());
    for (int64_t i = 0; i < (*want)[o].numElements(); ++i) {
      double a = (*got)[o].getF(i), b = (*want)[o].getF(i);
      if (std::isnan(b)) {
        CHECK(std::isnan(a));
        continue;
      }
      INFO("output " << o << " element " << i);
      CHECK(std::fabs(a - b) <= tol * (1 + std::fabs(b)));
    }
  }
}

} // namespace

TEST_CASE("cpu: elementwise chain with broadcasting") {
  expectMatchesRef(R"(func @main(%x: tensor<37x19xf32>, %b: tensor<19xf32>) -> (tensor<37x19xf32>) {
  %0 = add %x, %b : tensor<37x19xf32>
  %1 = silu %0 : tensor<37x19xf32>
  %2 = mul %1, %x : tensor<37x19xf32>
  %3 = exp %2 : tensor<37x19xf32>
  return %3
})",
                   {ramp(ElemType::F32, {37, 19}, 2.0), ramp(ElemType::F32, {19}, 1.0)});
}

TEST_CASE("cpu: matmul with a dynamic M and an f16 weight") {
  const char* text = R"(symbol m in [1, 512]
func @main(%x: tensor<{m}x40xf32>, %w: tensor<40x72xf16>) -> (tensor<{m}x72xf32>) {
  %0 = cast %w {to = f32} : tensor<40x72xf32>
  %1 = matmul %x, %0 : tensor<{m}x72xf32>
  %2 = relu %1 : tensor<{m}x72xf32>
  return %2
})";
  for (int64_t m : {1, 7, 33, 130})
    expectMatchesRef(text, {ramp(ElemType::F32, {m, 40}, 1.0), ramp(ElemType::F16, {40, 72}, 0.5)},
                     {{"m", m}}, 1e-4);
}

TEST_CASE("cpu: GPU-shaped kernels (many threads, shared memory, barriers) run as phases") {
  // vulkan:lavapipe tiles the matmul into 16x16-thread workgroups that stage A and B in
  // shared memory between barriers inside the K loop, with per-thread accumulators.
  const char* text = R"(symbol m in [1, 512]
func @main(%x: tensor<{m}x40xf32>, %w: tensor<40x72xf32>) -> (tensor<{m}x72xf32>) {
  %0 = matmul %x, %w : tensor<{m}x72xf32>
  %1 = tanh %0 : tensor<{m}x72xf32>
  return %1
})";
  {
    CpuRun probe(text, "cpu", "vulkan:lavapipe");
    std::string ir = printModule(*probe.m);
    REQUIRE(ir.find("barrier") != std::string::npos);
    REQUIRE(ir.find("shared>") != std::string::npos);
  }
  for (int64_t m : {1, 33, 130})
    expectMatchesRef(text, {ramp(ElemType::F32, {m, 40}, 1.0), ramp(ElemType::F32, {40, 72}, 0.5)},
                     {{"m", m}}, 1e-5, "vulkan:lavapipe");
}

TEST_CASE("cpu: softmax, reductions and integer arithmetic") {
  expectMatchesRef(
      R"(func @main(%x: tensor<5x33xf32>, %i: tensor<5x33xi32>) -> (tensor<5x33xf32>, tensor<5xf32>, tensor<5x33xi32>) {
  %0 = softmax %x {axis = 1} : tensor<5x33xf32>
  %1 = reduce_max %x {axes = [1], keepdims = 0} : tensor<5xf32>
  %2 = mul %i, %i : tensor<5x33xi32>
  %3 = mod %2, %i : tensor<5x33xi32>
  %4 = div %2, %i : tensor<5x33xi32>
  %5 = sub %4, %3 : tensor<5x33xi32>
  return %0, %1, %5
})",
      {ramp(ElemType::F32, {5, 33}, 3.0), ramp(ElemType::I32, {5, 33}, 1000.0)});
}

TEST_CASE("cpu: gather indices read from data are checked against the extent") {
  CpuRun cpu(
      R"(func @main(%x: tensor<4x8xf32>, %i: tensor<2xi64>, %e: tensor<3x8xi64>) -> (tensor<2x8xf32>, tensor<3x8xf32>) {
  %0 = gather %x, %i {axis = 0} : tensor<2x8xf32>
  %1 = exp %0 : tensor<2x8xf32>
  %2 = gather_elements %x, %e {axis = 0} : tensor<3x8xf32>
  %3 = neg %2 : tensor<3x8xf32>
  return %1, %3
})");
  REQUIRE(cpu.kernels.size() == 2);
  HostTensor x = ramp(ElemType::F32, {4, 8}, 1.0);
  auto gather = [&](int64_t a, int64_t b) {
    HostTensor i(ElemType::I64, {2}), out(ElemType::F32, {2, 8});
    i.setI(0, a);
    i.setI(1, b);
    auto st = cpu.callKernel(0, {&x, &i, &out}, {});
    REQUIRE(st.ok());
    if (*st == kKilnCpuOk) // -1 is the last row
      for (int64_t c = 0; c < 8; ++c)
        CHECK(out.getF(8 + c) == static_cast<float>(std::exp(x.getF((b < 0 ? b + 4 : b) * 8 + c))));
    return *st;
  };
  CHECK(gather(0, 3) == kKilnCpuOk);
  CHECK(gather(2, -1) == kKilnCpuOk);
  CHECK(gather(1, -4) == kKilnCpuOk);
  for (int64_t bad : {int64_t(4), int64_t(-5), int64_t(100000000), INT64_MAX, INT64_MIN})
    CHECK(gather(0, bad) == kKilnCpuIndexOutOfRange);

  auto gatherElements = [&](int64_t at, int64_t v) {
    HostTensor e(ElemType::I64, {3, 8}), out(ElemType::F32, {3, 8});
    for (int64_t k = 0; k < 24; ++k) e.setI(k, k % 4);
    e.setI(at, v);
    auto st = cpu.callKernel(1, {&x, &e, &out}, {});
    REQUIRE(st.ok());
    if (*st == kKilnCpuOk) CHECK(out.getF(at) == -x.getF((v < 0 ? v + 4 : v) * 8 + at % 8));
    return *st;
  };
  CHECK(gatherElements(5, -1) == kKilnCpuOk);
  CHECK(gatherElements(23, 3) == kKilnCpuOk);
  CHECK(gatherElements(23, 4) == kKilnCpuIndexOutOfRange);
  CHECK(gatherElements(0, -5) == kKilnCpuIndexOutOfRange);
}

TEST_CASE("cpu: stores, masked and vector accesses at data indices are checked") {
  // idx[0]: a row stored to; idx[1]: the column of a 4-lane vector copy; idx[2]: the
  // column of a masked store and load whose mask is idx[2] < 8.
  CpuRun cpu(R"(func @main(%i: tensor<3xi64>) -> (tensor<2x8xf32>) {
  %0 = dispatch %i {kernel = "k"} : tensor<2x8xf32>
  return %0
}

func @k(%idx: buffer<3xi64>, %out: buffer<2x8xf32>) -> () {
  %c0 = iconst {value = 0} : index
  %c1 = iconst {value = 1} : index
  %c2 = iconst {value = 2} : index
  %c8 = iconst {value = 8} : index
  kernel_config %c1, %c1, %c1 {workgroup = [1, 1, 1]}
  %a = load %idx, %c0 : i64
  %row = icast %a : index
  %b = load %idx, %c1 : i64
  %col = icast %b : index
  %d = load %idx, %c2 : i64
  %mcol = icast %d : index
  %one = sconst {value = 1.0} : f32
  store %one, %out, %row, %c0
  %v = vector_load %out, %c0, %col : vector<4xf32>
  vector_store %v, %out, %c1, %col
  %m = icmp %mcol, %c8 {pred = "lt"} : i1
  %two = sconst {value = 2.0} : f32
  masked_store %m, %two, %out, %c1, %mcol
  %r = masked_load %out, %m, %c0, %mcol {other = 3.0} : f32
  store %r, %out, %c1, %c0
  return
}
)",
             "cpu", "cpu", false);
  REQUIRE(cpu.kernels.size() == 1);
  auto call = [&](int64_t row, int64_t col, int64_t mcol) {
    HostTensor i(ElemType::I64, {3}), out(ElemType::F32, {2, 8});
    i.setI(0, row);
    i.setI(1, col);
    i.setI(2, mcol);
    auto st = cpu.callKernel(0, {&i, &out}, {});
    REQUIRE(st.ok());
    return *st;
  };
  CHECK(call(1, 4, 7) == kKilnCpuOk);
  CHECK(call(0, 0, 100) == kKilnCpuOk); // the mask is false: nothing stored or loaded
  CHECK(call(2, 0, 0) == kKilnCpuIndexOutOfRange);
  CHECK(call(-1, 0, 0) == kKilnCpuIndexOutOfRange);
  CHECK(call(0, 5, 0) == kKilnCpuIndexOutOfRange); // lanes 5..8 pass the end
  CHECK(call(0, -1, 0) == kKilnCpuIndexOutOfRange);
  CHECK(call(0, 0, -1) == kKilnCpuIndexOutOfRange); // the mask holds, the index does not
}

// Structured kernel IR on the CPU: a loop carrying three values (an f64 sum, an f64 max and
// an index count updated by an if with a result), a trivial subgroup reduction (subgroups
// are one thread here) and a carried result read after a barrier (a per-thread slot). The
// CPU's results equal the simulator's exactly.
constexpr const char* kStructuredKernel =
    R"(func @k(%x: buffer<4x8xf32>, %out: buffer<4x3xf32>) -> () {
  %c0 = iconst {value = 0} : index
  %c1 = iconst {value = 1} : index
  %c2 = iconst {value = 2} : index
  %c8 = iconst {value = 8} : index
  kernel_config %c1, %c1, %c1 {SUBGROUPworkgroup = [4, 1, 1]}
  %t = local_id {axis = 0} : index
  %zero = sconst {value = 0.0} : f64
  %ninf = sconst {value = -inf} : f64
  %s, %m, %cnt = for %c0, %c8, %c1, %zero, %ninf, %c0 : f64, f64, index (%j: index, %acc: f64, %mx: f64, %n: index) {
    %v = load %x, %t, %j : f32
    %w = compute %v {fn = cast, to = f64} : f64
    %a2 = compute %acc, %w {fn = add} : f64
    %m2 = compute %mx, %w {fn = max} : f64
    %pos = compute %w, %zero {fn = gt} : i1
    %n2 = if %pos : index {
      %inc = iadd %n, %c1 : index
      yield %inc
    } else {
      yield %n
    }
    yield %a2, %m2, %n2
  }
  %l = lane_id : index
  %sr = subgroup_reduce %s {fn = add} : f64
  %s32 = compute %sr {fn = cast, to = f32} : f32
  store %s32, %out, %t, %c0
  barrier
  %m32 = compute %m {fn = cast, to = f32} : f32
  store %m32, %out, %t, %c1
  %cf = icast %cnt : f32
  store %cf, %out, %t, %c2
  return
}
)";

std::string structuredKernel(const std::string& subgroup) {
  std::string s = kStructuredKernel;
  s.replace(s.find("SUBGROUP"), 8, subgroup);
  return s;
}

TEST_CASE("cpu: carried loop values, if results and subgroups of one thread match the sim") {
  CpuRun cpu(structuredKernel("subgroup = 1, "), "cpu", "cpu", false);
  REQUIRE(cpu.kernels.size() == 1);
  HostTensor x(ElemType::F32, {4, 8});
  for (int64_t i = 0; i < 32; ++i) x.setF(i, ((i * 37) % 19 - 9) * 0.375);
  HostTensor out(ElemType::F32, {4, 3}), want(ElemType::F32, {4, 3});
  REQUIRE(cpu.runKernel(0, {&x, &out}, {}).ok());
  std::vector<sim::BufferRef> b = {{x}, {want}};
  REQUIRE(sim::runKernel(*cpu.kernels[0], b, {}, {1, 1, 1}).ok());
  for (int64_t i = 0; i < 12; ++i) CHECK(out.getF(i) == want.getF(i));
  // Row 0 by hand: the count of positive elements and the max.
  double sum = 0, mx = -INFINITY;
  int64_t pos = 0;
  for (int64_t j = 0; j < 8; ++j) {
    sum += x.getF(j);
    mx = std::max(mx, x.getF(j));
    pos += x.getF(j) > 0;
  }
  CHECK(out.getF(0) == static_cast<float>(sum));
  CHECK(out.getF(1) == static_cast<float>(mx));
  CHECK(out.getF(2) == static_cast<double>(pos));
}

TEST_CASE("cpu: subgroups of more than one thread and carried values across barriers are refused") {
  auto m = parse(structuredKernel("subgroup = 2, "));
  std::vector<const Func*> ks{m->lookupFunc("k")};
  auto c = cpu::compileCpuKernels(*m, ks, "cpu");
  REQUIRE_FALSE(c.ok());
  CHECK(c.diags().str().find("runs subgroups of one thread") != std::string::npos);

  auto m2 = parse(R"(func @k(%x: buffer<4xf32>) -> () {
  %c0 = iconst {value = 0} : index
  %c1 = iconst {value = 1} : index
  kernel_config %c1, %c1, %c1 {workgroup = [4, 1, 1]}
  %z = sconst {value = 0.0} : f32
  %r = for %c0, %c1, %c1, %z : f32 (%i: index, %a: f32) {
    barrier
    yield %a
  }
  return
}
)");
  std::vector<const Func*> ks2{m2->lookupFunc("k")};
  auto c2 = cpu::compileCpuKernels(*m2, ks2, "cpu");
  REQUIRE_FALSE(c2.ok());
  CHECK(c2.diags().str().find("holds a barrier and carries values") != std::string::npos);
}

TEST_CASE("cpu: a data index that value bounds prove in range is not checked") {
  // @wrapped stores at imod(i, 8) into n >= 8 elements: always in range, no check (LLVM
  // cannot see that n >= 8). @raw stores at i itself: checked, so its code can return
  // kKilnCpuIndexOutOfRange.
  auto m = parse(R"(symbol n in [8, 64]

func @wrapped(%idx: buffer<1xi64>, %out: buffer<{n}xf32>) -> () {
  %c0 = iconst {value = 0} : index
  %c1 = iconst {value = 1} : index
  %c8 = iconst {value = 8} : index
  kernel_config %c1, %c1, %c1 {workgroup = [1, 1, 1]}
  %a = load %idx, %c0 : i64
  %i = icast %a : index
  %w = imod %i, %c8 : index
  %one = sconst {value = 1.0} : f32
  store %one, %out, %w
  return
}

func @raw(%idx: buffer<1xi64>, %out: buffer<8xf32>) -> () {
  %c0 = iconst {value = 0} : index
  %c1 = iconst {value = 1} : index
  kernel_config %c1, %c1, %c1 {workgroup = [1, 1, 1]}
  %a = load %idx, %c0 : i64
  %i = icast %a : index
  %one = sconst {value = 1.0} : f32
  store %one, %out, %i
  return
}
)");
  for (const char* name : {"wrapped", "raw"}) {
    auto c = cpu::compileCpuKernels(*m, {m->lookupFunc(name)}, "cpu", cpu::CpuOutput::LlvmIr);
    REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.diags().str()));
    INFO(c->text);
    // status 3 is returned directly or as a phi input
    bool checked =
        c->text.find("i32 3") != std::string::npos || c->text.find("[ 3, %") != std::string::npos;
    CHECK(checked == (std::string(name) == "raw"));
  }
}

TEST_CASE("cpu targets: named levels need their features; unknown names are errors") {
  auto v4 = cpu::resolveCpuTarget("cpu:x86-64-v4");
  REQUIRE(v4.ok());
  auto has = [](const std::vector<std::string>& v, const char* f) {
    return std::find(v.begin(), v.end(), f) != v.end();
  };
  CHECK(has(v4->required, "avx512f"));
  auto v2 = cpu::resolveCpuTarget("cpu:x86-64-v2");
  REQUIRE(v2.ok());
  CHECK(!has(v2->required, "avx2"));
  CHECK(has(v2->required, "sse4.2"));
  auto bad = cpu::resolveCpuTarget("cpu:pentium9");
  REQUIRE(!bad.ok());
  CHECK(bad.diags().str().find("unknown CPU target") != std::string::npos);
}

TEST_CASE("cpu: exp is inline code within 2 ulp of libm in f64") {
  std::vector<double> xs = {0.0,    -0.0,   1.0,    -1.0,     0.5,       1e-300,  -1e-300, 88.72,
                            -87.3,  -103.9, 709.78, 709.79,   710.0,     -708.39, -744.4,  -745.2,
                            -746.0, 1e308,  -1e308, INFINITY, -INFINITY, NAN};
  for (int i = -20000; i <= 20000; ++i) xs.push_back(i * 0.0371);
  auto n = static_cast<int64_t>(xs.size());
  std::string N = std::to_string(n);
  CpuRun cpu("func @main(%x: tensor<" + N + "xf64>) -> (tensor<" + N +
             "xf64>) {\n  %0 = exp %x : tensor<" + N + "xf64>\n  return %0\n}\n");
  HostTensor x(ElemType::F64, {n});
  for (int64_t i = 0; i < n; ++i) x.setF(i, xs[static_cast<size_t>(i)]);
  auto got = cpu.run({x}, {});
  REQUIRE(got.ok());
  for (int64_t i = 0; i < n; ++i) {
    double want = std::exp(x.getF(i));
    double have = (*got)[0].getF(i);
    INFO("exp(" << x.getF(i) << ") = " << have << ", libm " << want);
    if (std::isnan(want)) {
      CHECK(std::isnan(have));
    } else if (std::isinf(want) || want == 0) {
      CHECK(have == want);
    } else {
      double ulp = std::nextafter(want, INFINITY) - want;
      CHECK(std::fabs(have - want) <= 2 * ulp);
    }
  }
}

namespace {

// Distance from `have` to libm's `want` in units of want's ulp; 0 when both are the same
// special value (NaN, +-inf, +-0 with its sign), infinity when only one is.
double ulpError(double have, double want) {
  if (std::isnan(want) || std::isnan(have))
    return std::isnan(want) && std::isnan(have) ? 0 : INFINITY;
  if (std::isinf(want) || want == 0 || std::isinf(have))
    return have == want && std::signbit(have) == std::signbit(want) ? 0 : INFINITY;
  double a = std::fabs(want);
  return std::fabs(have - want) / (std::nextafter(a, INFINITY) - a);
}

// Distance in f32 ulp (steps between adjacent floats, across 0 too) from `have` to `want`;
// 0 when both are NaN, infinity when only one is or when they are zeros of different signs.
double ulpDistanceF32(float have, float want) {
  if (std::isnan(want) || std::isnan(have))
    return std::isnan(want) && std::isnan(have) ? 0 : INFINITY;
  if (have == 0 && want == 0) return std::signbit(have) == std::signbit(want) ? 0 : INFINITY;
  auto ordered = [](float v) {
    int32_t i;
    std::memcpy(&i, &v, sizeof i);
    return i < 0 ? -int64_t{i & 0x7fffffff} : int64_t{i};
  };
  return static_cast<double>(std::llabs(ordered(have) - ordered(want)));
}

struct Accuracy {
  double maxUlpF64 = 0;     // worst f64 result, in ulp of libm's
  double worstInput = 0;    // its (first) operand
  int64_t f32Differ = 0;    // f32 results that are not libm's (in f64) rounded to f32
  double maxUlpF32 = 0;     // worst f32 result, in f32 ulp from libm's rounded value
  double worstInputF32 = 0; // its (first) operand
  int64_t count = 0;
};

// Runs kiln op `op` on the CPU over `args` (one vector per operand) in f64 and in f32, and
// compares with `ref` (libm) in f64 and with libm's value rounded to f32.
Accuracy measure(const std::string& op, const std::vector<std::vector<double>>& args,
                 const std::function<double(const std::vector<double>&)>& ref) {
  auto n = static_cast<int64_t>(args[0].size());
  std::string N = std::to_string(n), params, operands64, operands32;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string s = std::to_string(i);
    params += "%a" + s + ": tensor<" + N + "xf64>, %b" + s + ": tensor<" + N + "xf32>, ";
    operands64 += (i ? ", %a" : "%a") + s;
    operands32 += (i ? ", %b" : "%b") + s;
  }
  params.resize(params.size() - 2);
  CpuRun cpu("func @main(" + params + ") -> (tensor<" + N + "xf64>, tensor<" + N +
             "xf32>) {\n  %0 = " + op + " " + operands64 + " : tensor<" + N + "xf64>\n  %1 = " +
             op + " " + operands32 + " : tensor<" + N + "xf32>\n  return %0, %1\n}\n");
  std::vector<HostTensor> in;
  for (const auto& v : args) {
    HostTensor d(ElemType::F64, {n}), f(ElemType::F32, {n});
    for (int64_t i = 0; i < n; ++i) {
      d.setF(i, v[static_cast<size_t>(i)]);
      f.setF(i, v[static_cast<size_t>(i)]);
    }
    in.push_back(std::move(d));
    in.push_back(std::move(f));
  }
  auto got = cpu.run(in, {});
  REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.diags().str()));
  Accuracy acc;
  acc.count = n;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> x64, x32;
    for (size_t a = 0; a < args.size(); ++a) {
      x64.push_back(in[2 * a].getF(i));
      x32.push_back(in[2 * a + 1].getF(i));
    }
    double err = ulpError((*got)[0].getF(i), ref(x64));
    if (err > acc.maxUlpF64) {
      INFO(op << " f64 at " << x64[0] << (x64.size() > 1 ? ", " + std::to_string(x64[1]) : "")
              << ": " << (*got)[0].getF(i) << ", libm " << ref(x64) << " (" << err << " ulp)");
      CHECK(std::isfinite(err));
      acc.maxUlpF64 = err;
      acc.worstInput = x64[0];
    }
    double errF32 =
        ulpDistanceF32(static_cast<float>((*got)[1].getF(i)), static_cast<float>(ref(x32)));
    if (errF32 > 0) ++acc.f32Differ;
    if (errF32 > acc.maxUlpF32) {
      acc.maxUlpF32 = errF32;
      acc.worstInputF32 = x32[0];
    }
  }
  MESSAGE(op << ": " << n << " inputs, max " << acc.maxUlpF64 << " ulp in f64 (at "
             << std::setprecision(17) << acc.worstInput << std::setprecision(6)
             << "), f32 differs from libm's rounded value on " << acc.f32Differ << ", by at most "
             << acc.maxUlpF32 << " ulp (at " << std::setprecision(9) << acc.worstInputF32
             << std::setprecision(6) << ")");
  return acc;
}

// Edge values every function is checked on, with their negations.
std::vector<double> edgeValues() {
  std::vector<double> v = {0.0,
                           1.0,
                           0.5,
                           2.0,
                           1e-310,
                           4.9e-324,
                           2.2250738585072014e-308,
                           1e-300,
                           1e-20,
                           1e-8,
                           0.84375,
                           1.25,
                           2.857,
                           6.0,
                           20.0,
                           22.0,
                           88.7,
                           709.7,
                           710.0,
                           746.0,
                           1e6,
                           1647098,
                           1e15,
                           1e22,
                           1e300,
                           1.7976931348623157e308,
                           INFINITY,
                           NAN,
                           3.141592653589793,
                           1.5707963267948966};
  size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  return v;
}

std::vector<double> uniform(std::mt19937_64& rng, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

// Doubles with uniformly distributed exponents in [2^lo, 2^hi), random signs when `sign`.
std::vector<double> logUniform(std::mt19937_64& rng, size_t n, int lo, int hi, bool sign) {
  std::uniform_real_distribution<double> m(1.0, 2.0);
  std::uniform_int_distribution<int> e(lo, hi - 1);
  std::vector<double> v(n);
  for (double& x : v) x = std::ldexp(m(rng), e(rng)) * (sign && (rng() & 1) ? -1 : 1);
  return v;
}

std::vector<double> concat(std::initializer_list<std::vector<double>> parts) {
  std::vector<double> v;
  for (const auto& p : parts) v.insert(v.end(), p.begin(), p.end());
  return v;
}

double libm1(double (*f)(double), const std::vector<double>& x) { return f(x[0]); }

} // namespace

TEST_CASE("cpu: log, tanh, erf, sin, cos and pow are inline code close to libm") {
  std::mt19937_64 rng(7);
  auto unary = [&](const char* op, double (*f)(double), std::vector<double> xs) {
    return measure(op, {xs}, [f](const std::vector<double>& x) { return libm1(f, x); });
  };
  Accuracy log = unary("log", std::log,
                       concat({edgeValues(), logUniform(rng, 60000, -1074, 1024, false),
                               uniform(rng, 40000, 0.5, 2.0), uniform(rng, 10000, -1.0, 0.0)}));
  CHECK(log.maxUlpF64 <= 2);
  CHECK(log.maxUlpF32 <= 2); // f32 has its own form (see the f32 test below)
  Accuracy tanh = unary("tanh", std::tanh,
                        concat({edgeValues(), uniform(rng, 80000, -25.0, 25.0),
                                logUniform(rng, 30000, -1074, 6, true)}));
  CHECK(tanh.maxUlpF64 <= 4);
  CHECK(tanh.maxUlpF32 <= 3);
  Accuracy erf = unary("erf", std::erf,
                       concat({edgeValues(), uniform(rng, 80000, -7.0, 7.0),
                               logUniform(rng, 30000, -1074, 4, true)}));
  CHECK(erf.maxUlpF64 <= 2);
  CHECK(erf.maxUlpF32 <= 3);
  for (auto [name, f] : {std::pair{"sin", static_cast<double (*)(double)>(std::sin)},
                         std::pair{"cos", static_cast<double (*)(double)>(std::cos)}}) {
    std::vector<double> nearHalfPi;
    for (int i = -20000; i <= 20000; i += 7)
      nearHalfPi.push_back(std::nextafter(i * 1.5707963267948966, 0.0));
    Accuracy trig = unary(
        name, f,
        concat({edgeValues(), uniform(rng, 50000, -10.0, 10.0), uniform(rng, 20000, -2e6, 2e6),
                logUniform(rng, 30000, -1074, 1024, true), nearHalfPi}));
    CHECK(trig.maxUlpF64 <= 2);
    CHECK(trig.f32Differ == 0);
  }
}

TEST_CASE("cpu: tan, atan, asin, acos, sinh and cosh are inline code close to libm") {
  std::mt19937_64 rng(13);
  auto unary = [&](const char* op, double (*f)(double), std::vector<double> xs) {
    return measure(op, {xs}, [f](const std::vector<double>& x) { return libm1(f, x); });
  };
  Accuracy tan = unary("tan", std::tan,
                       concat({edgeValues(), uniform(rng, 70000, -10.0, 10.0),
                               logUniform(rng, 30000, -1074, 1024, true)}));
  CHECK(tan.maxUlpF64 <= 4);
  CHECK(tan.f32Differ == 0);
  Accuracy atan = unary("atan", std::atan,
                        concat({edgeValues(), uniform(rng, 60000, -5.0, 5.0),
                                logUniform(rng, 40000, -1074, 1024, true)}));
  CHECK(atan.maxUlpF64 <= 2);
  CHECK(atan.f32Differ == 0);
  std::vector<double> unit =
      concat({edgeValues(), uniform(rng, 80000, -1.0, 1.0), uniform(rng, 10000, 0.999, 1.0),
              uniform(rng, 10000, -1.0, -0.999), logUniform(rng, 10000, -1074, 0, true)});
  Accuracy asin = unary("asin", std::asin, unit);
  CHECK(asin.maxUlpF64 <= 4);
  CHECK(asin.f32Differ == 0);
  Accuracy acos = unary("acos", std::acos, unit);
  CHECK(acos.maxUlpF64 <= 4);
  CHECK(acos.f32Differ == 0);
  std::vector<double> hyper =
      concat({edgeValues(), uniform(rng, 60000, -30.0, 30.0), uniform(rng, 20000, -720.0, 720.0),
              logUniform(rng, 20000, -1074, 0, true)});
  Accuracy sinh = unary("sinh", std::sinh, hyper);
  CHECK(sinh.maxUlpF64 <= 4);
  CHECK(sinh.f32Differ == 0);
  Accuracy cosh = unary("cosh", std::cosh, hyper);
  CHECK(cosh.maxUlpF64 <= 4);
  CHECK(cosh.f32Differ == 0);
}

TEST_CASE("cpu: asinh, acosh and atanh are inline code close to libm") {
  std::mt19937_64 rng(17);
  auto unary = [&](const char* op, double (*f)(double), std::vector<double> xs) {
    return measure(op, {xs}, [f](const std::vector<double>& x) { return libm1(f, x); });
  };
  Accuracy asinh = unary("asinh", std::asinh,
                         concat({edgeValues(), uniform(rng, 60000, -10.0, 10.0),
                                 logUniform(rng, 40000, -1074, 1024, true)}));
  CHECK(asinh.maxUlpF64 <= 2);
  CHECK(asinh.f32Differ == 0);
  Accuracy acosh =
      unary("acosh", std::acosh,
            concat({edgeValues(), uniform(rng, 50000, 1.0, 10.0), uniform(rng, 10000, 1.0, 1.001),
                    logUniform(rng, 40000, 0, 1024, false)}));
  CHECK(acosh.maxUlpF64 <= 2);
  CHECK(acosh.f32Differ == 0);
  Accuracy atanh =
      unary("atanh", std::atanh,
            concat({edgeValues(), uniform(rng, 70000, -1.0, 1.0), uniform(rng, 10000, 0.999, 1.0),
                    logUniform(rng, 20000, -1074, 0, true)}));
  CHECK(atanh.maxUlpF64 <= 2);
  CHECK(atanh.f32Differ == 0);
}

TEST_CASE("cpu: pow is inline code close to libm, with C's special cases") {
  std::mt19937_64 rng(11);
  std::vector<double> xs, ys;
  std::vector<double> special = {0.0,  -0.0, 1.0,    -1.0,    0.5,      -0.5,      2.0, -2.0, 3.0,
                                 -3.0, 0.25, 1e-310, -1e-310, INFINITY, -INFINITY, NAN, 1e300};
  for (double x : special)
    for (double y : special) {
      xs.push_back(x);
      ys.push_back(y);
    }
  auto add = [&](const std::vector<double>& x, const std::vector<double>& y) {
    xs.insert(xs.end(), x.begin(), x.end());
    ys.insert(ys.end(), y.begin(), y.end());
  };
  add(uniform(rng, 50000, 0.0, 10.0), uniform(rng, 50000, -20.0, 20.0));
  add(logUniform(rng, 30000, -1074, 1024, false), uniform(rng, 30000, -1.0, 1.0));
  std::vector<double> ints = uniform(rng, 20000, -30.0, 30.0);
  for (double& y : ints) y = std::round(y);
  add(uniform(rng, 20000, -5.0, 5.0), ints);
  Accuracy pow =
      measure("pow", {xs, ys}, [](const std::vector<double>& a) { return std::pow(a[0], a[1]); });
  CHECK(pow.maxUlpF64 <= 2);
  CHECK(pow.f32Differ == 0);
}

namespace {

double sigmoid64(double x) {
  if (x >= 0) return 1 / (1 + std::exp(-x));
  double e = std::exp(x);
  return e / (1 + e);
}

// Inputs for the f32 forms: the edges of their intervals, of f32's range and of exp's
// overflow and underflow, each with its two neighbours; uniform over [-20, 20] and [-120, 100];
// every f32 magnitude (log-uniform from 2^-149 to 2^128) with both signs.
std::vector<float> f32Inputs(std::mt19937_64& rng) {
  std::vector<float> edges = {
      0.0f,  1.0f,      0.5f,          2.0f,     1e-45f, 1e-40f,      0x1p-126f,   1e-30f,
      1e-8f, 1e-3f,     0.55f,         0.9f,     1.25f,  4.5f,        9.1f,        16.0f,
      20.0f, 87.33655f, 88.72283f,     88.7229f, 89.0f,  103.97208f,  104.0f,      126.0f,
      1e6f,  1e20f,     3.4028235e38f, INFINITY, NAN,    0.70710678f, 1.41421356f, 2.5066283f};
  std::vector<float> v;
  for (float x : edges)
    for (float s : {x, -x})
      for (float y : {s, std::nextafter(s, INFINITY), std::nextafter(s, -INFINITY)}) v.push_back(y);
  for (double x : uniform(rng, 60000, -20.0, 20.0)) v.push_back(static_cast<float>(x));
  for (double x : uniform(rng, 20000, -120.0, 100.0)) v.push_back(static_cast<float>(x));
  for (double x : logUniform(rng, 40000, -149, 128, true)) v.push_back(static_cast<float>(x));
  return v;
}

// The largest f32 ulp distance from `ref` (f64, of the f32 input, rounded to f32) of kiln's
// f32 `op` over `xs`, compiled for `target`.
double maxUlpF32(const std::string& op, const std::vector<float>& xs,
                 const std::function<double(double)>& ref, const std::string& target) {
  auto n = static_cast<int64_t>(xs.size());
  std::string T = "tensor<" + std::to_string(n) + "xf32>";
  CpuRun cpu("func @main(%x: " + T + ") -> (" + T + ") {\n  %0 = " + op + " : " + T +
                 "\n  return %0\n}\n",
             target);
  HostTensor x(ElemType::F32, {n});
  for (int64_t i = 0; i < n; ++i) x.setF(i, xs[static_cast<size_t>(i)]);
  auto got = cpu.run({x}, {});
  REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.diags().str()));
  double worst = 0;
  float worstX = 0;
  for (int64_t i = 0; i < n; ++i) {
    float xi = xs[static_cast<size_t>(i)];
    float have = static_cast<float>((*got)[0].getF(i));
    auto want = static_cast<float>(ref(xi));
    double err = ulpDistanceF32(have, want);
    if (err > worst) {
      INFO(op << " at " << std::setprecision(9) << xi << ": " << have << ", reference " << want);
      CHECK(std::isfinite(err)); // special values (NaN, +-inf, signed 0) match exactly
      worst = err;
      worstX = xi;
    }
  }
  MESSAGE(op << " (" << target << "): " << n << " f32 inputs, max " << worst << " ulp (at "
             << std::setprecision(9) << worstX << ")");
  return worst;
}

} // namespace

// f32 exp, log, tanh, erf, sigmoid, silu and gelu have their own single-precision forms
// (scalar_math.cpp); the reference is the interpreter's f64 formula on the f32 input, rounded
// to f32, except for gelu: the interpreter's 1 + erf (1 + tanh) cancels for x < 0 and is not
// accurate enough to measure against below about -6 (-3), so gelu is compared with
// x/2 erfc(-x/sqrt(2)) and x sigmoid(2u) in f64, the same functions without the cancellation.
// Their polynomials use fused multiply-adds where the target has them (x86-64-v3 and up,
// the GPUs) and a multiply and an add otherwise (x86-64-v2): both meet the bounds.
TEST_CASE("cpu: f32 exp, log, tanh, erf, sigmoid, silu and gelu are within 2 to 4 ulp") {
  std::mt19937_64 rng(13);
  std::vector<float> xs = f32Inputs(rng);
  REQUIRE(xs.size() >= 100000);
  const double k = std::sqrt(2.0 / std::numbers::pi);
  for (const std::string t : {"cpu", "cpu:x86-64-v2"}) {
    CAPTURE(t);
    CHECK(maxUlpF32(
              "exp %x", xs, [](double x) { return std::exp(x); }, t) <= 2);
    CHECK(maxUlpF32(
              "log %x", xs, [](double x) { return std::log(x); }, t) <= 2);
    CHECK(maxUlpF32("sigmoid %x", xs, sigmoid64, t) <= 2);
    CHECK(maxUlpF32(
              "tanh %x", xs, [](double x) { return std::tanh(x); }, t) <= 3);
    CHECK(maxUlpF32(
              "erf %x", xs, [](double x) { return std::erf(x); }, t) <= 3);
    CHECK(maxUlpF32(
              "silu %x", xs, [](double x) { return x * sigmoid64(x); }, t) <= 3);
    CHECK(maxUlpF32(
              "gelu %x", xs, [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); },
              t) <= 4);
    CHECK(maxUlpF32(
              "gelu %x {approximate = \"tanh\"}", xs,
              [k](double x) { return x * sigmoid64(2 * k * (x + 0.044715 * x * x * x)); }, t) <= 3);
  }
}

// Max and min propagate NaN and order -0.0 below +0.0 (ops.def). On AVX-512DQ hosts their
// trees run as VRANGE plus one NaN test per pair of leaves (backends/llvm/x86_minmax.h);
// elsewhere as LLVM's own llvm.maximum code. Inputs drawn mostly from signed zeros, small
// negatives and a few NaNs, infinities and subnormals make windows whose maximum is a zero
// of either sign; every result must equal the interpreter's bit for bit (any NaN for NaN).
TEST_CASE("cpu: max and min trees, pools and reductions are exact for NaN and signed zeros") {
  const char* text =
      R"(func @main(%x: tensor<1x3x12x40xf32>, %y: tensor<1x3x12x40xf32>, %z: tensor<1x3x12x40xf32>, %d: tensor<7x40xf64>) -> (tensor<1x3x6x20xf32>, tensor<1x3x5x19xf32>, tensor<1x3x12x40xf32>, tensor<1x3x12x40xf32>, tensor<1x3x12xf32>, tensor<7xf64>, tensor<1x3x6x6xf32>) {
  %0 = max_pool %x {ceil_mode = 0, dilations = [1, 1], kernel = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]} : tensor<1x3x6x20xf32>
  %1 = max_pool %x {ceil_mode = 0, dilations = [1, 1], kernel = [3, 3], pads = [0, 0, 0, 0], strides = [2, 2]} : tensor<1x3x5x19xf32>
  %2 = max %x, %y : tensor<1x3x12x40xf32>
  %3 = max %2, %z : tensor<1x3x12x40xf32>
  %4 = min %x, %y : tensor<1x3x12x40xf32>
  %5 = min %4, %z : tensor<1x3x12x40xf32>
  %6 = reduce_min %x {axes = [3], keepdims = 0} : tensor<1x3x12xf32>
  %7 = reduce_max %d {axes = [1], keepdims = 0} : tensor<7xf64>
  %8 = slice %x {axes = [3], ends = [13], starts = [0], steps = [1]} : tensor<1x3x12x13xf32>
  %9 = max_pool %8 {ceil_mode = 1, dilations = [1, 1], kernel = [3, 3], pads = [0, 0, 0, 0], strides = [2, 2]} : tensor<1x3x6x6xf32>
  return %0, %1, %3, %5, %6, %7, %9
})";
  const double specials[] = {-0.0, -0.0,      -0.0,     0.0,   0.0,    -1.5, -2.0, -1e-3,
                             NAN,  -INFINITY, INFINITY, 1e-45, -1e-45, 0.0,  -0.0, -3.0};
  std::mt19937_64 rng(7);
  auto make = [&](ElemType e, std::vector<int64_t> shape, int nanOneIn) {
    HostTensor t(e, std::move(shape));
    for (int64_t i = 0; i < t.numElements(); ++i) {
      size_t k = rng() % std::size(specials);
      if (std::isnan(specials[k]) && rng() % nanOneIn != 0) k = 0; // NaN rarely
      t.setF(i, specials[k]);
    }
    return t;
  };
  std::vector<HostTensor> in = {
      make(ElemType::F32, {1, 3, 12, 40}, 12), make(ElemType::F32, {1, 3, 12, 40}, 12),
      make(ElemType::F32, {1, 3, 12, 40}, 12), make(ElemType::F64, {7, 40}, 30)};
  auto ref = parse(text);
  WeightStore rw(*ref);
  auto want = interpret(*ref->lookupFunc("main"), in, rw);
  REQUIRE_MESSAGE(want.ok(), (want.ok() ? "" : want.diags().str()));
  for (const std::string t : {"cpu", "cpu:x86-64-v3"}) {
    CAPTURE(t);
    CpuRun cpu(text, t);
    auto got = cpu.run(in, {});
    REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.diags().str()));
    REQUIRE(got->size() == want->size());
    int64_t zeros = 0, nans = 0;
    for (size_t o = 0; o < got->size(); ++o)
      for (int64_t i = 0; i < (*want)[o].numElements(); ++i) {
        double a = (*got)[o].getF(i), b = (*want)[o].getF(i);
        INFO("output " << o << " element " << i << ": " << a << " vs " << b);
        if (std::isnan(b)) {
          ++nans;
          CHECK(std::isnan(a));
        } else {
          zeros += b == 0;
          CHECK(a == b);
          CHECK(std::signbit(a) == std::signbit(b));
        }
      }
    // The inputs exercise both: results that are zeros (of both signs) and NaNs.
    CHECK(zeros > 100);
    CHECK(nans > 20);
  }
}

TEST_CASE("cpu: sin and cos of huge arguments are reduced exactly (Payne-Hanek, no libm call)") {
  // 6381956970095103 * 2^797 is the double closest to a multiple of pi/2 (x/(pi/2) is 2.98e-19
  // from an integer): its cosine needs ~120 bits of pi. glibc's cos is 8 ulp off there; ours is
  // the correctly rounded value.
  double worst = 6381956970095103.0 * 0x1p797;
  CpuRun cpu("func @main(%x: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>) {\n"
             "  %0 = cos %x : tensor<4xf64>\n  %1 = sin %x : tensor<4xf64>\n"
             "  return %0, %1\n}\n");
  HostTensor x(ElemType::F64, {4});
  std::vector<double> xs = {worst, -worst, 1e22, 0x1.fffffffffffffp1023};
  for (int64_t i = 0; i < 4; ++i) x.setF(i, xs[static_cast<size_t>(i)]);
  auto got = cpu.run({x}, {});
  REQUIRE(got.ok());
  CHECK((*got)[0].getF(0) == -4.687165924254628e-19);
  CHECK((*got)[0].getF(1) == -4.687165924254628e-19);
  CHECK((*got)[1].getF(0) == std::sin(worst));
  CHECK((*got)[1].getF(1) == std::sin(-worst));
  for (int64_t i = 2; i < 4; ++i) {
    CHECK(ulpError((*got)[0].getF(i), std::cos(xs[static_cast<size_t>(i)])) <= 1);
    CHECK(ulpError((*got)[1].getF(i), std::sin(xs[static_cast<size_t>(i)])) <= 1);
  }
}

namespace {

// Lowered kernels of a module with distinct kernels and two copies of one.
struct Lowered {
  std::unique_ptr<Module> m;
  std::vector<const Func*> kernels;
};

Lowered lowerForCpu(const std::string& text) {
  Lowered l;
  l.m = parse(text);
  PassManager pm;
  REQUIRE(pm.addPipeline("shape-infer,codegen{target=cpu}").ok());
  std::ostringstream sink;
  Status s = pm.run(*l.m, sink);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.diags().str()));
  for (const auto& f : l.m->funcs())
    if (f->name() != "main" && isLoweredKernel(*f)) l.kernels.push_back(f.get());
  return l;
}

const char* const kSeveralKernels =
    R"(func @main(%x: tensor<64xf32>, %y: tensor<64xf32>, %a: tensor<8x8xf32>) -> (tensor<64xf32>, tensor<64xf32>, tensor<8x8xf32>, tensor<64xf32>, tensor<64xf32>) {
  %0 = mul %x, %x : tensor<64xf32>
  %1 = mul %y, %y : tensor<64xf32>
  %2 = matmul %a, %a : tensor<8x8xf32>
  %3 = exp %x : tensor<64xf32>
  %4 = sub %y, %x : tensor<64xf32>
  return %0, %1, %2, %3, %4
}
)";

struct TempCacheDir {
  std::string path;
  TempCacheDir() {
    std::string base = "/tmp/kiln-cpu-cache-test-XXXXXX";
    REQUIRE(mkdtemp(base.data()));
    path = base;
  }
  ~TempCacheDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

} // namespace

TEST_CASE("cpu: kernels with the same code compile once; the code is the same for any thread "
          "count") {
  Lowered l = lowerForCpu(kSeveralKernels);
  REQUIRE(l.kernels.size() == 5);
  std::string first;
  for (unsigned jobs : {1u, 4u, 2u}) {
    CompileTimer timer;
    cpu::CpuCompileOptions co;
    co.jobs = jobs;
    co.timer = &timer;
    auto c =
        cpu::compileCpuKernels(*l.m, l.kernels, "cpu:x86-64-v3", cpu::CpuOutput::Executable, co);
    REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.diags().str()));
    CHECK(timer.count("kernels before deduplication") == 5);
    CHECK(timer.count("kernels after deduplication") == 4);
    // The two `mul`s share one entry point; the others have their own.
    CHECK(c->payload.kernels[0].symbol == c->payload.kernels[1].symbol);
    CHECK(c->payload.kernels[0].symbol != c->payload.kernels[2].symbol);
    CHECK(c->payload.kernels[1].name != c->payload.kernels[0].name);
    std::string bytes = cpu::serializeCpuPayload(c->payload);
    if (first.empty()) first = bytes;
    CHECK(bytes == first);
  }
  // The shared entry point runs both kernels.
  CpuRun run(kSeveralKernels, "cpu:x86-64-v3");
  HostTensor x(ElemType::F32, {64}), y(ElemType::F32, {64});
  for (int64_t i = 0; i < 64; ++i) {
    x.setF(i, static_cast<double>(i));
    y.setF(i, static_cast<double>(2 * i));
  }
  HostTensor ox(ElemType::F32, {64}), oy(ElemType::F32, {64});
  REQUIRE(run.runKernel(0, {&x, &ox}, {}).ok());
  REQUIRE(run.runKernel(1, {&y, &oy}, {}).ok());
  CHECK(ox.getF(5) == 25);
  CHECK(oy.getF(5) == 100);
}

TEST_CASE("cpu: kernels that keep an f64 max or min are not SLP-vectorized; the rest are") {
  // The f64 max and min reductions fully unrolled kept LLVM's SLP vectorizer busy for over a
  // minute (tests/lit/lower/reduce-flat.kir); the sum and the matmul keep it.
  Lowered l = lowerForCpu(
      R"(func @main(%x: tensor<20x20xf64>, %a: tensor<8x8xf32>) -> (tensor<20xf64>, tensor<20xf64>, tensor<20xf64>, tensor<8x8xf32>) {
  %0 = reduce_max %x {axes = [1], keepdims = 0} : tensor<20xf64>
  %1 = reduce_sum %x {axes = [1], keepdims = 0} : tensor<20xf64>
  %2 = reduce_min %x {axes = [1], keepdims = 0} : tensor<20xf64>
  %3 = matmul %a, %a : tensor<8x8xf32>
  return %0, %1, %2, %3
}
)");
  REQUIRE(l.kernels.size() == 4);
  CHECK_FALSE(slpSafe(*l.kernels[0]));
  CHECK(slpSafe(*l.kernels[1]));
  CHECK_FALSE(slpSafe(*l.kernels[2]));
  CHECK(slpSafe(*l.kernels[3]));
  // and the whole module compiles on the AVX-512 level, where the SLP vectorizer was slowest
  CompileTimer timer;
  cpu::CpuCompileOptions co;
  co.timer = &timer;
  auto c = cpu::compileCpuKernels(*l.m, l.kernels, "cpu:x86-64-v4", cpu::CpuOutput::Executable, co);
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.diags().str()));
}

TEST_CASE("cpu: the kernel cache gives the same code, and a damaged entry is recompiled") {
  Lowered l = lowerForCpu(kSeveralKernels);
  TempCacheDir dir;
  KernelCache cache({dir.path, uint64_t{1} << 30});
  auto compile = [&](CompileTimer& timer) {
    cpu::CpuCompileOptions co;
    co.timer = &timer;
    co.cache = &cache;
    co.jobs = 2;
    auto c =
        cpu::compileCpuKernels(*l.m, l.kernels, "cpu:x86-64-v3", cpu::CpuOutput::Executable, co);
    REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.diags().str()));
    return cpu::serializeCpuPayload(c->payload);
  };
  CompileTimer cold, warm, repaired;
  std::string a = compile(cold);
  CHECK(cold.count("kernel cache misses") == 4);
  CHECK(cold.count("kernel cache hits") == 0);
  std::string b = compile(warm);
  CHECK(warm.count("kernel cache hits") == 4);
  CHECK(warm.count("kernel cache misses") == 0);
  CHECK(a == b);
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) {
    ++n;
    if (n == 1) std::filesystem::resize_file(e.path(), 30);
  }
  CHECK(n == 4);
  std::string c = compile(repaired);
  CHECK(repaired.count("kernel cache hits") == 3);
  CHECK(repaired.count("kernel cache misses") == 1);
  CHECK(repaired.count("kernel cache entries damaged (ignored, rewritten)") == 1);
  CHECK(c == a);
  CompileTimer again;
  compile(again);
  CHECK(again.count("kernel cache hits") == 4);
}

TEST_CASE("cpu: a kernel that fails on a worker thread is an error value, for any thread count") {
  auto bad = parse(structuredKernel("subgroup = 2, "));
  std::vector<const Func*> only{bad->lookupFunc("k")};
  for (unsigned jobs : {1u, 4u}) {
    cpu::CpuCompileOptions co;
    co.jobs = jobs;
    auto c = cpu::compileCpuKernels(*bad, only, "cpu", cpu::CpuOutput::Executable, co);
    REQUIRE_FALSE(c.ok());
    CHECK(c.diags().str().find("runs subgroups of one thread") != std::string::npos);
  }
}

TEST_CASE("cpu: an LLVM fatal error on a compile thread is reported, and the process goes on") {
  CHECK(llvmgen::runRecoverably([] {}));
  auto r = parallelFor<int>(3, 3, [](size_t i) -> Result<int> {
    bool ran = llvmgen::runRecoverably([i] {
      if (i == 1) llvm::report_fatal_error("a fatal error of the test");
    });
    if (!ran) return error(Loc::named("task"), "recovered");
    return static_cast<int>(i);
  });
  REQUIRE(r.size() == 3);
  CHECK(r[0].ok());
  CHECK_FALSE(r[1].ok());
  CHECK(r[2].ok());
  // LLVM still works afterwards.
  CpuRun run(kSeveralKernels, "cpu:x86-64-v3");
  CHECK(run.payload.kernels.size() == 5);
}
