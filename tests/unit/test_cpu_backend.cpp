// Unit tests for the CPU backend: kernel IR -> LLVM -> shared object, run directly through
// the entry-point ABI (runtime/cpu/abi.h) and compared with the simulator and the reference
// interpreter; target resolution and the features a level needs.
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <sstream>

#include "backends/cpu/cpu_backend.h"
#include "backends/target.h"
#include "ir/interp.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"
#include "runtime/cpu/abi.h"
#include "runtime/sim/sim.h"

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
      CodegenContext saved = codegenContext();
      codegenContext().target = *lookupTarget(codegen);
      PassManager pm;
      REQUIRE(pm.addPipeline("shape-infer,fuse,collapse-dims,tile,pad,lower").ok());
      std::ostringstream sink;
      Status s = pm.run(*m, sink);
      codegenContext() = saved;
      REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.diags().str()));
    }
    for (const auto& f : m->funcs())
      if (f->name() != "main") kernels.push_back(f.get());
    auto c = cpu::compileCpuKernels(*m, kernels, "", target);
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
    KILN_TRY(sim::Grid g, sim::kernelGrid(*kernels[index], dims));
    KilnCpuArgs args{ptrs.data(), extents.data(), syms.data(), {g.x, g.y, g.z}};
    return fn(&args, 0, g.x * g.y * g.z);
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
      if (k < kernels.size() && payload.kernels[k].lowered) {
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
  REQUIRE(cpu.payload.kernels[0].lowered);
  REQUIRE(cpu.payload.kernels[1].lowered);
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
  REQUIRE(cpu.payload.kernels[0].lowered);
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
    auto c = cpu::compileCpuKernels(*m, {m->lookupFunc(name)}, "", "cpu", cpu::CpuOutput::LlvmIr);
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

TEST_CASE("cpu: exp is inline code within 2 ulp of libm in f64, libm's value in f32") {
  std::vector<double> xs = {0.0,    -0.0,   1.0,    -1.0,     0.5,       1e-300,  -1e-300, 88.72,
                            -87.3,  -103.9, 709.78, 709.79,   710.0,     -708.39, -744.4,  -745.2,
                            -746.0, 1e308,  -1e308, INFINITY, -INFINITY, NAN};
  for (int i = -20000; i <= 20000; ++i) xs.push_back(i * 0.0371);
  auto n = static_cast<int64_t>(xs.size());
  std::string N = std::to_string(n);
  CpuRun cpu("func @main(%x: tensor<" + N + "xf64>, %y: tensor<" + N + "xf32>) -> (tensor<" + N +
             "xf64>, tensor<" + N + "xf32>) {\n  %0 = exp %x : tensor<" + N +
             "xf64>\n  %1 = exp %y : tensor<" + N + "xf32>\n  return %0, %1\n}\n");
  HostTensor x(ElemType::F64, {n}), y(ElemType::F32, {n});
  for (int64_t i = 0; i < n; ++i) {
    x.setF(i, xs[static_cast<size_t>(i)]);
    y.setF(i, xs[static_cast<size_t>(i)]);
  }
  auto got = cpu.run({x, y}, {});
  REQUIRE(got.ok());
  int f32Differences = 0;
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
    double wantF = static_cast<float>(std::exp(y.getF(i)));
    double haveF = (*got)[1].getF(i);
    if (!(std::isnan(wantF) && std::isnan(haveF)) && haveF != wantF) ++f32Differences;
  }
  CHECK(f32Differences == 0);
}
