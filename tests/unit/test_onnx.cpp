// Unit tests for the ONNX importer: models built with the protobuf classes, imported from
// bytes and run on the interpreter; dynamic shapes resolved to symbols; every kind of bad
// input a diagnostic `m.onnx: node 'NAME' (OpType): error: ...`; and the new IR ops
// (topk, the trigonometric family) on the interpreter.
#include <cmath>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>

#include "frontends/onnx/import.h"
#include "frontends/onnx/onnx_proto.h"
#include "ir/core/builder.h"
#include "ir/interp/interp.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"

using namespace kiln;
namespace pb = ::onnx;

namespace {

// A small model builder over the generated classes.
struct ModelBuilder {
  pb::ModelProto m;
  pb::GraphProto* g;

  explicit ModelBuilder(int opset = 17) {
    m.set_ir_version(8);
    auto* id = m.add_opset_import();
    id->set_domain("");
    id->set_version(opset);
    g = m.mutable_graph();
    g->set_name("g");
  }
  // dims: a number >= 0 is static, -1 is the symbol `sym`.
  void input(const std::string& name, int32_t type, const std::vector<int64_t>& dims,
             const std::string& sym = "seq") {
    auto* vi = g->add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) {
      auto* dim = shape->add_dim();
      if (d >= 0)
        dim->set_dim_value(d);
      else
        dim->set_dim_param(sym);
    }
  }
  void output(const std::string& name) { g->add_output()->set_name(name); }
  pb::NodeProto* node(const std::string& op, const std::vector<std::string>& ins,
                      const std::vector<std::string>& outs, const std::string& name = "") {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? outs[0] : name);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
  }
  void initI64(const std::string& name, const std::vector<int64_t>& v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(pb::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
  }
  std::string bytes() const { return m.SerializeAsString(); }
};

void attrInt(pb::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::INT);
  a->set_i(v);
}

HostTensor F32(std::vector<int64_t> shape, const std::vector<double>& v) {
  HostTensor t(ElemType::F32, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.setF(static_cast<int64_t>(i), v[i]);
  return t;
}

std::vector<HostTensor> run(const kiln::onnx::Imported& im, const std::vector<HostTensor>& in) {
  for (const auto& [n, t] : im.weights) im.module->setWeightData(n, t);
  WeightStore w(*im.module);
  auto r = interpret(*im.module->funcs()[0], in, w);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
  return *r;
}

std::string firstError(const Result<kiln::onnx::Imported>& r) {
  REQUIRE_FALSE(r.ok());
  std::string s = r.diags().list[0].str();
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

} // namespace

TEST_CASE("an Add model imports, verifies and runs") {
  ModelBuilder b;
  b.input("x", pb::TensorProto::FLOAT, {2});
  b.input("y", pb::TensorProto::FLOAT, {2});
  b.node("Add", {"x", "y"}, {"z"});
  b.output("z");
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
  REQUIRE(r.ok());
  CHECK(verifyModule(*r->module).ok());
  auto out = run(*r, {F32({2}, {1, 2}), F32({2}, {10, 20})});
  CHECK(out[0].getF(0) == 11);
  CHECK(out[0].getF(1) == 22);
}

TEST_CASE("PyTorch's Shape->Gather->Unsqueeze->Concat->Reshape chain becomes symbolic dims") {
  // x: [1, seq, 8] -> reshape to [1, seq, 2, 4] with the shape computed from Shape(x).
  ModelBuilder b;
  b.input("x", pb::TensorProto::FLOAT, {1, -1, 8});
  b.initI64("one", {1});
  b.initI64("two_four", {2, 4});
  auto* idx = b.g->add_initializer();
  idx->set_name("i1");
  idx->set_data_type(pb::TensorProto::INT64);
  idx->add_int64_data(1);
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "i1"}, {"len"});
  b.initI64("zero_axes", {0});
  b.node("Unsqueeze", {"len", "zero_axes"}, {"len1"});
  attrInt(b.node("Concat", {"one", "len1", "two_four"}, {"shape"}), "axis", 0);
  b.node("Reshape", {"x", "shape"}, {"y"});
  b.output("y");
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
  std::string text = printModule(*r->module);
  CHECK(text.find("symbol seq in [1, 65536]") != std::string::npos);
  CHECK(text.find("tensor<1x{seq}x2x4xf32>") != std::string::npos);
  for (int64_t len : {3, 7}) {
    HostTensor x(ElemType::F32, {1, len, 8});
    for (int64_t i = 0; i < x.numElements(); ++i) x.setF(i, double(i));
    auto out = run(*r, {x});
    CHECK(out[0].shape() == std::vector<int64_t>{1, len, 2, 4});
    CHECK(out[0].getF(x.numElements() - 1) == double(x.numElements() - 1));
  }
}

TEST_CASE("a shape that depends on data is an error naming the node") {
  ModelBuilder b;
  b.input("x", pb::TensorProto::FLOAT, {6});
  b.input("shape", pb::TensorProto::INT64, {2});
  b.node("Reshape", {"x", "shape"}, {"y"}, "reshape_1");
  b.output("y");
  std::string e = firstError(kiln::onnx::importBytes(b.bytes(), "m.onnx", ""));
  CHECK(e.find("m.onnx: node 'reshape_1' (Reshape): error:") == 0);
  CHECK(e.find("depends on run-time data") != std::string::npos);
  // Given the value, it imports.
  kiln::onnx::ImportOptions opts;
  opts.constantInputs["shape"] = HostTensor(ElemType::I64, {2});
  opts.constantInputs["shape"].setI(0, 2);
  opts.constantInputs["shape"].setI(1, 3);
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", "", opts);
  REQUIRE(r.ok());
  CHECK(r->module->funcs()[0]->resultTypes()[0].str() == "tensor<2x3xf32>");
}

TEST_CASE("bad models are diagnostics") {
  SUBCASE("unknown operator") {
    ModelBuilder b;
    b.input("x", pb::TensorProto::FLOAT, {2});
    b.node("FancyOp", {"x"}, {"y"}, "n1");
    b.output("y");
    CHECK(firstError(kiln::onnx::importBytes(b.bytes(), "m.onnx", "")) ==
          "m.onnx: node 'n1' (FancyOp): error: operator FancyOp is not supported by kiln");
  }
  SUBCASE("unsupported opset") {
    ModelBuilder b(18);
    b.input("x", pb::TensorProto::FLOAT, {2});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    CHECK(firstError(kiln::onnx::importBytes(b.bytes(), "m.onnx", ""))
              .find("m.onnx: error: opset 18 is not supported") == 0);
  }
  SUBCASE("attribute of the wrong type") {
    ModelBuilder b;
    b.input("x", pb::TensorProto::FLOAT, {2, 3});
    auto* n = b.node("Softmax", {"x"}, {"y"}, "sm");
    auto* a = n->add_attribute();
    a->set_name("axis");
    a->set_type(pb::AttributeProto::FLOAT);
    a->set_f(1.0f);
    b.output("y");
    CHECK(firstError(kiln::onnx::importBytes(b.bytes(), "m.onnx", "")) ==
          "m.onnx: node 'sm' (Softmax): error: attribute 'axis' must be INT, got FLOAT");
  }
  SUBCASE("missing initializer") {
    ModelBuilder b;
    b.input("x", pb::TensorProto::FLOAT, {2});
    b.node("Add", {"x", "w"}, {"y"}, "add");
    b.output("y");
    CHECK(firstError(kiln::onnx::importBytes(b.bytes(), "m.onnx", ""))
              .find("m.onnx: node 'add' (Add): error: input 'w' is not defined") == 0);
  }
  SUBCASE("missing external data file") {
    ModelBuilder b;
    b.input("x", pb::TensorProto::FLOAT, {100});
    auto* t = b.g->add_initializer();
    t->set_name("w");
    t->set_data_type(pb::TensorProto::FLOAT);
    t->add_dims(100);
    t->set_data_location(pb::TensorProto::EXTERNAL);
    auto* kv = t->add_external_data();
    kv->set_key("location");
    kv->set_value("missing.bin");
    b.node("Add", {"x", "w"}, {"y"});
    b.output("y");
    std::string e = firstError(kiln::onnx::importBytes(
        b.bytes(), "m.onnx", std::filesystem::temp_directory_path().string()));
    CHECK(e.find("m.onnx: initializer 'w': error: tensor 'w': cannot open external data file") ==
          0);
  }
  SUBCASE("a cycle of Transposes as a MatMul's B") {
    // The importer's look for quantized weights follows Transposes back from B: it stops.
    ModelBuilder b;
    b.input("x", pb::TensorProto::FLOAT, {2, 2});
    b.node("Transpose", {"t2"}, {"t1"}, "tr1");
    b.node("Transpose", {"t1"}, {"t2"}, "tr2");
    b.node("MatMul", {"x", "t1"}, {"y"});
    b.output("y");
    CHECK(firstError(kiln::onnx::importBytes(b.bytes(), "m.onnx", ""))
              .find("m.onnx: node 'tr1' (Transpose): error: input 't2' is not defined") == 0);
  }
  SUBCASE("truncated and corrupted bytes") {
    ModelBuilder b;
    b.input("x", pb::TensorProto::FLOAT, {2});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    std::string bytes = b.bytes();
    for (size_t cut = 1; cut < bytes.size(); ++cut) {
      auto r = kiln::onnx::importBytes(bytes.substr(0, cut), "m.onnx", "");
      if (!r.ok()) CHECK(r.diags().list[0].str().find("m.onnx") == 0);
    }
    CHECK(firstError(kiln::onnx::importBytes("\xff\xff\xff garbage", "m.onnx", ""))
              .find("not a valid ONNX model") != std::string::npos);
  }
}

TEST_CASE("initializers: small ones are constants, large ones weights") {
  ModelBuilder b;
  b.input("x", pb::TensorProto::FLOAT, {100});
  auto* t = b.g->add_initializer();
  t->set_name("bias.big");
  t->set_data_type(pb::TensorProto::FLOAT);
  t->add_dims(100);
  for (int i = 0; i < 100; ++i) t->add_float_data(float(i));
  b.node("Add", {"x", "bias.big"}, {"y"});
  b.output("y");
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
  REQUIRE(r.ok());
  REQUIRE(r->weights.count("bias_big") == 1);
  CHECK(r->module->lookupWeight("bias_big") != nullptr);
  auto out = run(*r, {HostTensor(ElemType::F32, {100})});
  CHECK(out[0].getF(99) == 99);
}

TEST_CASE("a model file: raw_data weights move into the tensors; a bad file is a diagnostic") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "kiln-onnx-file";
  fs::create_directories(dir);
  ModelBuilder b;
  b.input("x", pb::TensorProto::FLOAT, {100});
  std::vector<float> w(100);
  for (int i = 0; i < 100; ++i) w[static_cast<size_t>(i)] = float(i) * 0.25f;
  auto* t = b.g->add_initializer();
  t->set_name("w");
  t->set_data_type(pb::TensorProto::FLOAT);
  t->add_dims(100);
  t->set_raw_data(std::string(reinterpret_cast<const char*>(w.data()), 400));
  b.node("Mul", {"x", "w"}, {"y"});
  b.output("y");
  fs::path file = dir / "m.onnx";
  std::string bytes = b.bytes();
  {
    std::ofstream out(file, std::ios::binary);
    out << bytes;
  }
  auto fromFile = kiln::onnx::importFile(file.string());
  auto fromBytes = kiln::onnx::importBytes(bytes, "m.onnx", dir.string());
  REQUIRE_MESSAGE(fromFile.ok(), (fromFile.ok() ? "" : fromFile.diags().str()));
  REQUIRE(fromBytes.ok());
  REQUIRE(fromFile->weights.count("w") == 1);
  CHECK(fromFile->weights.at("w").identical(fromBytes->weights.at("w")));
  CHECK(fromFile->weights.at("w").getF(99) == 24.75);
  CHECK(printModule(*fromFile->module) == printModule(*fromBytes->module));

  for (size_t cut : {size_t(1), bytes.size() / 2, bytes.size() - 1}) {
    {
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      out << bytes.substr(0, cut);
    }
    auto r = kiln::onnx::importFile(file.string());
    if (!r.ok()) CHECK(r.diags().list[0].str().find(file.string()) == 0);
  }
  CHECK(firstError(kiln::onnx::importFile((dir / "none.onnx").string())) ==
        (dir / "none.onnx").string() + ": error: cannot open the file");
  CHECK(firstError(kiln::onnx::importFile(dir.string())) ==
        dir.string() + ": error: cannot read the file: Is a directory");
  fs::remove_all(dir);
}

TEST_CASE("a QDQ weight of a Gemm stays i8, dequantized per output channel in the IR") {
  // y = x @ (DequantizeLinear(QuantizeLinear(w)))^T, w [3, 2] per output channel (axis 0).
  ModelBuilder b(13);
  b.input("x", pb::TensorProto::FLOAT, {1, 2});
  auto f32 = [&](const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
    auto* t = b.g->add_initializer();
    t->set_name(name);
    t->set_data_type(pb::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
  };
  f32("w", {3, 2}, {1.0f, -2.0f, 0.5f, 0.25f, 3.0f, 3.0f});
  f32("s", {3}, {0.5f, 0.25f, 1.0f});
  auto* zp = b.g->add_initializer();
  zp->set_name("zp");
  zp->set_data_type(pb::TensorProto::INT8);
  zp->add_dims(3);
  for (int i = 0; i < 3; ++i) zp->add_int32_data(0);
  attrInt(b.node("QuantizeLinear", {"w", "s", "zp"}, {"q"}), "axis", 0);
  attrInt(b.node("DequantizeLinear", {"q", "s", "zp"}, {"dq"}), "axis", 0);
  attrInt(b.node("Gemm", {"x", "dq"}, {"y"}), "transB", 1);
  b.output("y");
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
  REQUIRE(r.ok());
  CHECK(verifyModule(*r->module).ok());
  REQUIRE(r->weights.size() == 1);
  const HostTensor& q = r->weights.begin()->second;
  CHECK(q.elem() == ElemType::I8);
  // round_half_even(w / s): 2, -4; 2, 1; 3, 3.
  CHECK(q.getI(0) == 2);
  CHECK(q.getI(1) == -4);
  CHECK(q.getI(3) == 1);
  auto out = run(*r, {F32({1, 2}, {1, 10})});
  // Dequantized rows: (1, -2), (0.5, 0.25), (3, 3).
  CHECK(out[0].getF(0) == doctest::Approx(-19));
  CHECK(out[0].getF(1) == doctest::Approx(3));
  CHECK(out[0].getF(2) == doctest::Approx(33));
}

TEST_CASE("initializers in external data files") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "kiln-onnx-external";
  fs::create_directories(dir);
  std::vector<float> data(100);
  for (int i = 0; i < 100; ++i) data[static_cast<size_t>(i)] = float(i) * 0.5f;
  {
    std::ofstream out(dir / "w.bin", std::ios::binary);
    out.write("pad!", 4); // the tensor starts at offset 4
    out.write(reinterpret_cast<const char*>(data.data()), 400);
  }
  ModelBuilder b;
  b.input("x", pb::TensorProto::FLOAT, {100});
  auto* t = b.g->add_initializer();
  t->set_name("w");
  t->set_data_type(pb::TensorProto::FLOAT);
  t->add_dims(100);
  t->set_data_location(pb::TensorProto::EXTERNAL);
  auto* kv = t->add_external_data();
  kv->set_key("location");
  kv->set_value("w.bin");
  kv = t->add_external_data();
  kv->set_key("offset");
  kv->set_value("4");
  b.node("Mul", {"x", "w"}, {"y"});
  b.output("y");
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", dir.string());
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
  HostTensor ones(ElemType::F32, {100});
  for (int i = 0; i < 100; ++i) ones.setF(i, 1);
  auto out = run(*r, {ones});
  CHECK(out[0].getF(10) == 5);
  CHECK(out[0].getF(99) == 49.5);
  // A file too short for the tensor is an error, not a read past its end.
  kv->set_value("200");
  CHECK(
      firstError(kiln::onnx::importBytes(b.bytes(), "m.onnx", dir.string())).find("does not fit") !=
      std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("dynamic Slice, Range and ConstantOfShape from Shape") {
  // y = x[:, :n] + range(n) broadcast, n = Shape(x)[1]; z = ConstantOfShape([n]).
  ModelBuilder b;
  b.input("x", pb::TensorProto::INT64, {2, -1});
  b.initI64("i1", {1});
  b.initI64("zero", {0});
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "i1"}, {"n1"}); // [n]
  b.node("Slice", {"x", "zero", "n1", "i1"}, {"xs"});
  auto* z = b.g->add_initializer();
  z->set_name("z0");
  z->set_data_type(pb::TensorProto::INT64);
  z->add_int64_data(0);
  auto* o = b.g->add_initializer();
  o->set_name("o1");
  o->set_data_type(pb::TensorProto::INT64);
  o->add_int64_data(1);
  b.node("Squeeze", {"n1", "zero"}, {"n"});
  b.node("Range", {"z0", "n", "o1"}, {"r"});
  b.node("Add", {"xs", "r"}, {"y"});
  b.node("ConstantOfShape", {"n1"}, {"c"});
  b.output("y");
  b.output("c");
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
  CHECK(r->module->funcs()[0]->resultTypes()[0].str() == "tensor<2x{seq}xi64>");
  CHECK(r->module->funcs()[0]->resultTypes()[1].str() == "tensor<{seq}xf32>");
  HostTensor x(ElemType::I64, {2, 3});
  for (int64_t i = 0; i < 6; ++i) x.setI(i, 10 * i);
  auto out = run(*r, {x});
  CHECK(out[0].getI(0) == 0);
  CHECK(out[0].getI(2) == 22);
  CHECK(out[0].getI(5) == 52);
  CHECK(out[1].shape() == std::vector<int64_t>{3});
}

TEST_CASE("topk and the trigonometric ops on the interpreter") {
  Module m;
  Func* f = m.addFunc(std::make_unique<Func>("main", Loc{}));
  Value* x = f->addArg(Type::tensor(ElemType::F32, {5}));
  Builder b(f);
  Attrs a;
  a.set("k", int64_t(3));
  a.set("axis", int64_t(0));
  a.set("largest", int64_t(1));
  Op* topk = *b.create(OpKind::TopK, {x}, a);
  Value* at = (*b.create(OpKind::Atan, {x}))->result();
  b.createUnchecked(OpKind::Return, {topk->result(0), topk->result(1), at}, {}, {});
  f->setResultTypes({topk->result(0)->type(), topk->result(1)->type(), at->type()});
  REQUIRE(verifyModule(m).ok());
  WeightStore w(m);
  auto r = interpret(*f, {F32({5}, {1, 5, 3, 5, -1})}, w);
  REQUIRE(r.ok());
  CHECK((*r)[0].getF(0) == 5);
  CHECK((*r)[0].getF(2) == 3);
  CHECK((*r)[1].getI(0) == 1); // ties keep the lower index first
  CHECK((*r)[1].getI(1) == 3);
  CHECK((*r)[1].getI(2) == 2);
  CHECK((*r)[2].getF(0) == doctest::Approx(std::atan(1.0)));
}

namespace {

// A subgraph attribute of `n`; nodes and initializers are added to it like to a graph.
pb::GraphProto* subgraph(pb::NodeProto* n, const std::string& attr,
                         const std::vector<std::string>& inputs,
                         const std::vector<std::string>& outputs) {
  auto* a = n->add_attribute();
  a->set_name(attr);
  a->set_type(pb::AttributeProto::GRAPH);
  pb::GraphProto* g = a->mutable_g();
  g->set_name(attr);
  for (const auto& i : inputs) g->add_input()->set_name(i);
  for (const auto& o : outputs) g->add_output()->set_name(o);
  return g;
}

pb::NodeProto* addNode(pb::GraphProto* g, const std::string& op,
                       const std::vector<std::string>& ins, const std::vector<std::string>& outs) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(outs[0]);
  for (const auto& i : ins) n->add_input(i);
  for (const auto& o : outs) n->add_output(o);
  return n;
}

void initScalar(pb::GraphProto* g, const std::string& name, int32_t type, int64_t v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  if (type == pb::TensorProto::INT64)
    t->add_int64_data(v);
  else
    t->add_int32_data(static_cast<int32_t>(v)); // BOOL
}

void initF32(pb::GraphProto* g, const std::string& name, std::vector<int64_t> dims,
             const std::vector<float>& v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(pb::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float x : v) t->add_float_data(x);
}

void attrInts(pb::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

HostTensor Bool(bool v) {
  HostTensor t(ElemType::I1, {});
  t.setI(0, v ? 1 : 0);
  return t;
}

} // namespace

TEST_CASE("If with a run-time condition selects between both branches") {
  // y = cond ? x + one : x * x, `one` from the outer scope.
  ModelBuilder b;
  b.input("cond", pb::TensorProto::BOOL, {});
  b.input("x", pb::TensorProto::FLOAT, {2});
  initF32(b.g, "one", {}, {1});
  auto* n = b.node("If", {"cond"}, {"y"}, "if");
  addNode(subgraph(n, "then_branch", {}, {"t"}), "Add", {"x", "one"}, {"t"});
  addNode(subgraph(n, "else_branch", {}, {"e"}), "Mul", {"x", "x"}, {"e"});
  b.output("y");
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
  CHECK(verifyModule(*r->module).ok());
  auto yes = run(*r, {Bool(true), F32({2}, {3, -2})});
  CHECK(yes[0].getF(0) == 4);
  CHECK(yes[0].getF(1) == -1);
  auto no = run(*r, {Bool(false), F32({2}, {3, -2})});
  CHECK(no[0].getF(0) == 9);
  CHECK(no[0].getF(1) == 4);
}

TEST_CASE("If with a constant condition imports only the taken branch, nested scopes see outer "
          "values") {
  // The branches disagree in shape, which only a known condition allows; the then branch
  // holds another If whose branch reads `x` two scopes out.
  ModelBuilder b;
  b.input("x", pb::TensorProto::FLOAT, {2});
  initScalar(b.g, "yes", pb::TensorProto::BOOL, 1);
  auto* n = b.node("If", {"yes"}, {"y"}, "outer");
  auto* thenG = subgraph(n, "then_branch", {}, {"t"});
  auto* inner = addNode(thenG, "If", {"yes"}, {"t"});
  addNode(subgraph(inner, "then_branch", {}, {"u"}), "Neg", {"x"}, {"u"});
  addNode(subgraph(inner, "else_branch", {}, {"v"}), "Abs", {"x"}, {"v"});
  auto* elseG = subgraph(n, "else_branch", {}, {"e"});
  initF32(elseG, "e", {3}, {0, 0, 0});
  b.output("y");
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
  CHECK(r->module->funcs()[0]->resultTypes()[0].str() == "tensor<2xf32>");
  auto out = run(*r, {F32({2}, {3, -2})});
  CHECK(out[0].getF(0) == -3);
  CHECK(out[0].getF(1) == 2);

  SUBCASE("a run-time condition with branches of different types is an error") {
    b.g->clear_initializer();
    b.input("yes", pb::TensorProto::BOOL, {});
    CHECK(firstError(kiln::onnx::importBytes(b.bytes(), "m.onnx", ""))
              .find("m.onnx: node 'outer' (If): error: the condition depends on run-time data "
                    "and output 0 has type tensor<2xf32> in then_branch but tensor<3xf32> in "
                    "else_branch") == 0);
  }
}

TEST_CASE("Loop with a run-time trip count runs on the host side") {
  // s = x; for i in 0..m while sum(s) < 100: s = s + x (x captured from the outer graph).
  ModelBuilder b;
  b.input("x", pb::TensorProto::FLOAT, {2});
  b.input("m", pb::TensorProto::INT64, {});
  initScalar(b.g, "go", pb::TensorProto::BOOL, 1);
  initF32(b.g, "limit", {}, {100});
  auto* n = b.node("Loop", {"m", "go", "x"}, {"s"}, "loop");
  auto* body = subgraph(n, "body", {"i", "c", "s_in"}, {"c_out", "s_out"});
  addNode(body, "Add", {"s_in", "x"}, {"s_out"});
  addNode(body, "ReduceSum", {"s_out"}, {"total"});
  addNode(body, "Less", {"total", "limit"}, {"c_out"});
  b.output("s");
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
  CHECK(verifyModule(*r->module).ok());
  REQUIRE(r->module->funcs().size() == 2);
  CHECK(r->module->funcs()[1]->name() == "loop_body");
  // The body takes the iteration, the condition, s and the captured x; limit is inlined.
  CHECK(r->module->funcs()[1]->numArgs() == 4);
  auto steps = [&](int64_t m) {
    HostTensor t(ElemType::I64, {});
    t.setI(0, m);
    return run(*r, {F32({2}, {1, 10}), t})[0].getF(0);
  };
  CHECK(steps(0) == 1);   // no iteration
  CHECK(steps(3) == 4);   // the trip count ends it
  CHECK(steps(50) == 10); // sum(s) = 11 * 10 = 110 ends it after 9 iterations
}

TEST_CASE("Loops with run-time trip counts nest: the inner one runs inside the outer body") {
  // s = x; for i < m: (for j < k: s = s + x); then s = (1 + m k) x.
  ModelBuilder b;
  b.input("x", pb::TensorProto::FLOAT, {2});
  b.input("m", pb::TensorProto::INT64, {});
  b.input("k", pb::TensorProto::INT64, {});
  initScalar(b.g, "go", pb::TensorProto::BOOL, 1);
  auto* n = b.node("Loop", {"m", "go", "x"}, {"s"}, "outer");
  auto* body = subgraph(n, "body", {"i", "c", "s_in"}, {"c", "s_out"});
  auto* inner = addNode(body, "Loop", {"k", "go", "s_in"}, {"s_out"});
  inner->set_name("inner");
  auto* innerBody = subgraph(inner, "body", {"j", "c2", "t"}, {"c2", "t_out"});
  addNode(innerBody, "Add", {"t", "x"}, {"t_out"});
  b.output("s");
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
  CHECK(verifyModule(*r->module).ok());
  REQUIRE(r->module->funcs().size() == 3);
  CHECK(r->module->funcs()[1]->name() == "outer_body");
  CHECK(r->module->funcs()[2]->name() == "inner_body");
  auto i64 = [](int64_t v) {
    HostTensor t(ElemType::I64, {});
    t.setI(0, v);
    return t;
  };
  auto out = run(*r, {F32({2}, {1, 10}), i64(3), i64(4)});
  CHECK(out[0].getF(0) == 13);
  CHECK(out[0].getF(1) == 130);

  SUBCASE("not inside an If branch with a run-time condition") {
    ModelBuilder f;
    f.input("x", pb::TensorProto::FLOAT, {2});
    f.input("m", pb::TensorProto::INT64, {});
    f.input("cond", pb::TensorProto::BOOL, {});
    initScalar(f.g, "go", pb::TensorProto::BOOL, 1);
    auto* branch = f.node("If", {"cond"}, {"y"}, "if");
    auto* thenG = subgraph(branch, "then_branch", {}, {"t"});
    auto* loop = addNode(thenG, "Loop", {"m", "go", "x"}, {"t"});
    loop->set_name("loop");
    addNode(subgraph(loop, "body", {"i", "c", "s"}, {"c", "s2"}), "Add", {"s", "x"}, {"s2"});
    addNode(subgraph(branch, "else_branch", {}, {"e"}), "Neg", {"x"}, {"e"});
    f.output("y");
    CHECK(firstError(kiln::onnx::importBytes(f.bytes(), "m.onnx", ""))
              .find("m.onnx: node 'loop' (Loop): error: a loop with a run-time trip count or "
                    "condition inside an If branch whose condition is run-time data") == 0);
  }
}

TEST_CASE("Loop with a known trip count unrolls, with a scan output") {
  // s = x; for i in 0..3: s = s + x; scan[i] = s * i.
  ModelBuilder b;
  b.input("x", pb::TensorProto::FLOAT, {2});
  initScalar(b.g, "m", pb::TensorProto::INT64, 3);
  initScalar(b.g, "go", pb::TensorProto::BOOL, 1);
  auto* n = b.node("Loop", {"m", "go", "x"}, {"s", "scan"}, "loop");
  auto* body = subgraph(n, "body", {"i", "c", "s_in"}, {"c_out", "s_out", "scan_out"});
  addNode(body, "Identity", {"c"}, {"c_out"});
  addNode(body, "Add", {"s_in", "x"}, {"s_out"});
  attrInt(addNode(body, "Cast", {"i"}, {"fi"}), "to", pb::TensorProto::FLOAT);
  addNode(body, "Mul", {"s_out", "fi"}, {"scan_out"});
  b.output("s");
  b.output("scan");
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
  CHECK(verifyModule(*r->module).ok());
  CHECK(r->module->funcs()[0]->resultTypes()[1].str() == "tensor<3x2xf32>");
  auto out = run(*r, {F32({2}, {1, 10})});
  CHECK(out[0].getF(0) == 4);
  CHECK(out[0].getF(1) == 40);
  // s after iteration i is (i + 2) x; scan row i is (i + 2) x i.
  std::vector<double> want{0, 0, 3, 30, 8, 80};
  for (int64_t i = 0; i < 6; ++i) CHECK(out[1].getF(i) == want[static_cast<size_t>(i)]);

  SUBCASE("a trip count from run-time data: the loop runs on the host, its scan output's "
          "length a data-dependent symbol") {
    b.g->mutable_initializer()->DeleteSubrange(0, 1);
    b.input("m", pb::TensorProto::INT64, {});
    auto h = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
    REQUIRE_MESSAGE(h.ok(), (h.ok() ? "" : h.diags().str()));
    CHECK(verifyModule(*h->module).ok());
    CHECK(h->module->funcs()[0]->resultTypes()[1].str() == "tensor<{scan_len}x2xf32>");
    const SymbolInfo* len = h->module->symbols().lookup("scan_len");
    REQUIRE(len);
    CHECK(len->dataDependent);
    CHECK(len->hi == kMaxLoopIterations);
    HostTensor m(ElemType::I64, {});
    m.setI(0, 3);
    auto o = run(*h, {F32({2}, {1, 10}), m});
    REQUIRE(o[1].shape() == std::vector<int64_t>{3, 2});
    for (int64_t i = 0; i < 6; ++i) CHECK(o[1].getF(i) == want[static_cast<size_t>(i)]);
    m.setI(0, 0);
    o = run(*h, {F32({2}, {1, 10}), m});
    CHECK(o[1].shape() == std::vector<int64_t>{0, 2});
  }
  SUBCASE("a condition computed from run-time data: the scan stops with it, its length "
          "bounded by the known trip count") {
    // Continue while sum(s) < 20: s = 2x = (2, 20) after the first iteration ends it.
    pb::GraphProto* g = n->mutable_attribute(0)->mutable_g();
    g->mutable_node(0)->set_output(0, "c_unused");
    addNode(g, "ReduceSum", {"s_out"}, {"total"});
    addNode(g, "Less", {"total", "limit"}, {"c_out"});
    initF32(b.g, "limit", {}, {20});
    auto h = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
    REQUIRE_MESSAGE(h.ok(), (h.ok() ? "" : h.diags().str()));
    CHECK(verifyModule(*h->module).ok());
    CHECK(h->module->symbols().lookup("scan_len")->hi == 3);
    auto o = run(*h, {F32({2}, {1, 10})});
    REQUIRE(o[1].shape() == std::vector<int64_t>{1, 2});
    CHECK(o[1].getF(0) == 0);
  }
  SUBCASE("a trip count past the unrolling limit is an error") {
    b.g->mutable_initializer(0)->set_int64_data(0, 100000);
    CHECK(firstError(kiln::onnx::importBytes(b.bytes(), "m.onnx", ""))
              .find("m.onnx: node 'loop' (Loop): error: the loop runs more than 4096 "
                    "iterations, kiln's limit for unrolling at import") == 0);
  }
}

TEST_CASE("A sequence a Loop appends to is its scan output; ConcatFromSequence stacks or "
          "concatenates it") {
  // What PyTorch exports for `ys = []; for _ in range(int(m)): s = s + x; ys.append(s)`.
  ModelBuilder b(14);
  b.input("x", pb::TensorProto::FLOAT, {2});
  b.input("m", pb::TensorProto::INT64, {});
  initScalar(b.g, "go", pb::TensorProto::BOOL, 1);
  b.node("SequenceEmpty", {}, {"empty"}, "empty");
  auto* n = b.node("Loop", {"m", "go", "x", "empty"}, {"s", "seq"}, "loop");
  auto* body = subgraph(n, "body", {"i", "c", "s_in", "seq_in"}, {"c", "s_out", "seq_out"});
  addNode(body, "Add", {"s_in", "x"}, {"s_out"});
  addNode(body, "SequenceInsert", {"seq_in", "s_out"}, {"seq_out"});
  attrInt(b.node("ConcatFromSequence", {"seq"}, {"stacked"}, "stack"), "new_axis", 1);
  auto* cat = b.node("ConcatFromSequence", {"seq"}, {"joined"}, "cat");
  attrInt(cat, "axis", 0);
  b.output("stacked");
  b.output("joined");
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
  CHECK(verifyModule(*r->module).ok());
  CHECK(r->module->funcs()[0]->resultTypes()[0].str() == "tensor<{seq_len}x2xf32>");
  CHECK(r->module->funcs()[0]->resultTypes()[1].str() == "tensor<{2*seq_len}xf32>");
  HostTensor m(ElemType::I64, {});
  m.setI(0, 3);
  auto out = run(*r, {F32({2}, {1, 10}), m});
  REQUIRE(out[0].shape() == std::vector<int64_t>{3, 2});
  std::vector<double> want{2, 20, 3, 30, 4, 40};
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(out[0].getF(i) == want[static_cast<size_t>(i)]);
    CHECK(out[1].getF(i) == want[static_cast<size_t>(i)]);
  }

  SUBCASE("a body that reads the sequence is an error") {
    addNode(body, "SequenceLength", {"seq_in"}, {"len"});
    CHECK(firstError(kiln::onnx::importBytes(b.bytes(), "m.onnx", ""))
              .find("m.onnx: node 'loop' (Loop): error: loop-carried value 1 ('empty') is a "
                    "sequence; kiln converts a sequence that the body only appends to") == 0);
  }
  SUBCASE("ConcatFromSequence of any other sequence is an error") {
    b.node("ConcatFromSequence", {"empty"}, {"other"}, "other");
    b.output("other");
    CHECK(firstError(kiln::onnx::importBytes(b.bytes(), "m.onnx", ""))
              .find("m.onnx: node 'other' (ConcatFromSequence): error: 'empty' is a sequence "
                    "kiln cannot hold") == 0);
  }
}

TEST_CASE("Scan in reverse over its input, with a forward and a reverse scan output") {
  ModelBuilder b(11);
  b.input("init", pb::TensorProto::FLOAT, {2});
  b.input("x", pb::TensorProto::FLOAT, {3, 2});
  auto* n = b.node("Scan", {"init", "x"}, {"sum", "fwd", "rev"}, "scan");
  attrInt(n, "num_scan_inputs", 1);
  attrInts(n, "scan_input_directions", {1});
  attrInts(n, "scan_output_directions", {0, 1});
  auto* body = subgraph(n, "body", {"s_in", "row"}, {"s_out", "f", "r"});
  addNode(body, "Add", {"s_in", "row"}, {"s_out"});
  addNode(body, "Identity", {"s_out"}, {"f"});
  addNode(body, "Identity", {"s_out"}, {"r"});
  b.output("sum");
  b.output("fwd");
  b.output("rev");
  auto r = kiln::onnx::importBytes(b.bytes(), "m.onnx", "");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.diags().str()));
  CHECK(verifyModule(*r->module).ok());
  auto out = run(*r, {F32({2}, {0, 0}), F32({3, 2}, {1, 2, 3, 4, 5, 6})});
  CHECK(out[0].getF(0) == 9);
  CHECK(out[0].getF(1) == 12);
  // Rows are read 2, 1, 0: running sums (5, 6), (8, 10), (9, 12).
  std::vector<double> fwd{5, 6, 8, 10, 9, 12}, rev{9, 12, 8, 10, 5, 6};
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(out[1].getF(i) == fwd[static_cast<size_t>(i)]);
    CHECK(out[2].getF(i) == rev[static_cast<size_t>(i)]);
  }
}
