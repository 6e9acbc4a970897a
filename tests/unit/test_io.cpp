// Unit tests for .npy files, tensor literals and printing, safetensors files and WeightStore:
// round trips of every element type, byte-exact headers, and corrupt or hostile files.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "ir/core/ir.h"
#include "ir/io/npy.h"
#include "ir/io/safetensors.h"
#include "ir/io/weights.h"

using namespace kiln;

namespace {

// A fresh directory per test, removed when the test ends.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("kiln-test-io-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The first error's message, or "" when the result is ok.
template <typename T> std::string firstError(const Result<T>& r) {
  return r.ok() ? "" : r.diags().list.at(0).message;
}

// A .npy v1.0 file with the given header dict (padded as numpy does) and raw data.
std::string npyBytes(const std::string& dict, const std::string& data, int major = 1) {
  std::string h = dict;
  size_t lenBytes = major == 1 ? 2 : 4;
  size_t unpadded = 8 + lenBytes + h.size() + 1;
  h.append((unpadded + 63) / 64 * 64 - unpadded, ' ');
  h += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < lenBytes; ++i) out += static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return out + h + data;
}

std::string f32Bytes(std::initializer_list<float> vs) {
  std::string s;
  for (float v : vs) s.append(reinterpret_cast<const char*>(&v), 4);
  return s;
}

HostTensor f32Tensor(std::vector<int64_t> shape, std::initializer_list<double> vs) {
  HostTensor t(ElemType::F32, std::move(shape));
  int64_t i = 0;
  for (double v : vs) t.setF(i++, v);
  return t;
}

// A safetensors file from a literal JSON header and data bytes.
std::string stBytes(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

} // namespace

// ---- .npy ----------------------------------------------------------------------------------

TEST_CASE("npy: f32 header is byte-identical to numpy's") {
  HostTensor t = f32Tensor({2, 3}, {1, 2, 3, 4, 5, 6});
  std::string bytes = serializeNpy(t);
  // numpy.save(np.arange(1, 7, dtype='<f4').reshape(2, 3)): 128-byte header, then data.
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string expected = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict +
                         std::string(128 - 10 - dict.size() - 1, ' ') + "\n" +
                         f32Bytes({1, 2, 3, 4, 5, 6});
  CHECK(bytes == expected);
}

TEST_CASE("npy: every element type round-trips") {
  for (ElemType e : {ElemType::F64, ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::I1,
                     ElemType::I8, ElemType::I16, ElemType::I32, ElemType::I64, ElemType::U8,
                     ElemType::U16, ElemType::U32, ElemType::U64}) {
    CAPTURE(elemTypeName(e));
    HostTensor t(e, {2, 3});
    // Negative values wrap for u8 and become true for i1; either way the bytes must survive.
    for (int64_t i = 0; i < 6; ++i) t.setI(i, i * 3 - 5);
    std::string bytes = serializeNpy(t);
    CHECK(bytes.size() % 64 == t.byteSize() % 64); // header is a multiple of 64 bytes
    auto back = parseNpy(bytes, "x.npy");
    REQUIRE(back.ok());
    CHECK(back->identical(t));
  }
}

TEST_CASE("npy: 0-d and 1-d shapes are written as Python tuples") {
  HostTensor scalar = f32Tensor({}, {7});
  CHECK(serializeNpy(scalar).find("'shape': (), }") != std::string::npos);
  HostTensor vec = f32Tensor({3}, {1, 2, 3});
  CHECK(serializeNpy(vec).find("'shape': (3,), }") != std::string::npos);
  auto back = parseNpy(serializeNpy(scalar), "s.npy");
  REQUIRE(back.ok());
  CHECK(back->rank() == 0);
  CHECK(back->getF(0) == 7.0);
}

TEST_CASE("npy: bf16 is '<u2' with a kiln_dtype key") {
  HostTensor t(ElemType::BF16, {2});
  t.setF(0, 1.5);
  t.setF(1, -2.0);
  std::string bytes = serializeNpy(t);
  CHECK(bytes.find("'descr': '<u2'") != std::string::npos);
  CHECK(bytes.find("'kiln_dtype': 'bf16'") != std::string::npos);
  auto back = parseNpy(bytes, "b.npy");
  REQUIRE(back.ok());
  CHECK(back->elem() == ElemType::BF16);
  CHECK(back->getF(0) == 1.5);
  CHECK(back->getF(1) == -2.0);
  auto v2 = parseNpy(npyBytes("{'descr': '|V2', 'fortran_order': False, 'kiln_dtype': 'bf16', "
                              "'shape': (1,), }",
                              bytes.substr(bytes.size() - 4, 2)),
                     "v.npy");
  REQUIRE(v2.ok());
  CHECK(v2->getF(0) == 1.5);
  CHECK(firstError(parseNpy(npyBytes("{'descr': '<f4', 'fortran_order': False, 'kiln_dtype': "
                                     "'bf16', 'shape': (1,), }",
                                     "abcd"),
                            "x.npy")) ==
        "kiln_dtype 'bf16' needs 2-byte data, but the descr is '<f4'");
  // Without the marker, '<u2' is numpy's uint16.
  auto plain = parseNpy(
      npyBytes("{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }", std::string(2, '\0')),
      "u.npy");
  REQUIRE(plain.ok());
  CHECK(plain->elem() == ElemType::U16);
}

TEST_CASE("npy: versions 2.0 and 3.0, key order and spacing variations") {
  std::string data = f32Bytes({1.5f, -2.0f});
  for (int major : {2, 3}) {
    auto t = parseNpy(
        npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data, major), "v");
    REQUIRE(t.ok());
    CHECK(t->getF(0) == 1.5);
    CHECK(t->getF(1) == -2.0);
  }
  auto t =
      parseNpy(npyBytes("{\"shape\":(1,2),\"fortran_order\":False,\"descr\":\"<f4\"}", data), "v");
  REQUIRE(t.ok());
  CHECK(t->shape() == std::vector<int64_t>{1, 2});
  // Single-byte types may use '|' or '<'.
  auto i8 =
      parseNpy(npyBytes("{'descr': '<i1', 'fortran_order': False, 'shape': (1,), }", "\xfe"), "i");
  REQUIRE(i8.ok());
  CHECK(i8->getI(0) == -2);
}

TEST_CASE("npy: i1 bytes other than 0 and 1 read as true") {
  auto t = parseNpy(npyBytes("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
                             std::string("\x00\x07\x01", 3)),
                    "b");
  REQUIRE(t.ok());
  CHECK(t->data()[0] == 0);
  CHECK(t->data()[1] == 1);
  CHECK(t->data()[2] == 1);
}

TEST_CASE("npy: malformed files are errors naming the file") {
  std::string f4 = f32Bytes({1, 2});
  struct Case {
    std::string bytes, message;
  };
  std::vector<Case> cases = {
      {"", "not a .npy file (bad magic)"},
      {"PK\x03\x04 zip file", "not a .npy file (bad magic)"},
      {std::string("\x93NUMPY\x04\x00\x10\x00", 10),
       "unsupported .npy version 4.0 (kiln reads 1.0, 2.0 and 3.0)"},
      {std::string("\x93NUMPY\x01\x00\x10", 9), "truncated .npy header"},
      {std::string("\x93NUMPY\x01\x00\xff\x00{}", 12),
       "truncated .npy header: it claims 255 bytes but the file has 2"},
      {npyBytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", f4),
       "big-endian .npy data ('>f4') is not supported"},
      {npyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", f4),
       "Fortran-order .npy data is not supported (save in C order)"},
      {npyBytes("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", f4),
       "unsupported .npy dtype '<c8'"},
      {npyBytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", f4),
       "unsupported .npy dtype: structured dtypes are not supported"},
      {npyBytes("{'descr': '<f4', 'shape': (2,), }", f4),
       "malformed .npy header: it needs 'descr', 'fortran_order' and 'shape'"},
      {npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", f4),
       "malformed .npy header: unexpected key 'x'"},
      {npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", f4),
       "malformed .npy header: 'shape' must hold non-negative integers"},
      {npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", f4),
       "malformed .npy header: 'shape' must be a tuple"},
      {npyBytes("{'descr': '<f4, 'fortran_order': False}", f4),
       "malformed .npy header: expected ',' or '}' (at offset 17)"},
      {npyBytes("{'descr' '<f4'}", f4), "malformed .npy header: expected ':' (at offset 9)"},
      {npyBytes("{'descr': '<f4", f4), "malformed .npy header: unterminated string (at offset 54)"},
      {npyBytes("{'descr': '<f4'", f4),
       "malformed .npy header: expected ',' or '}' (at offset 54)"},
      {npyBytes("[1, 2]", f4), "malformed .npy header: not a dict"},
      {npyBytes("{'shape': (99999999999999999999,)}", f4),
       "malformed .npy header: integer out of range (at offset 11)"},
      {npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f4),
       ".npy data size mismatch: shape and dtype need 12 bytes but the file holds 8"},
      {npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", f4),
       ".npy data size mismatch: shape and dtype need 4 bytes but the file holds 8"},
      {npyBytes("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
                f4),
       ".npy shape is too large"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.bytes);
    auto r = parseNpy(c.bytes, "bad.npy");
    REQUIRE(!r.ok());
    CHECK(r.diags().list[0].message == c.message);
    CHECK(r.diags().list[0].loc.str() == "bad.npy");
  }
  // Deep nesting is refused instead of recursing without bound.
  std::string deep = "{'descr': " + std::string(10000, '(') + "}";
  CHECK(firstError(parseNpy(npyBytes(deep, ""), "d"))
            .starts_with("malformed .npy header: nesting too deep"));
}

TEST_CASE("npy: every truncation of a valid file is an error, never a crash") {
  std::string good = serializeNpy(f32Tensor({2, 3}, {1, 2, 3, 4, 5, 6}));
  for (size_t n = 0; n < good.size(); ++n) CHECK(!parseNpy(good.substr(0, n), "t").ok());
}

TEST_CASE("npy: files on disk") {
  TempDir dir;
  HostTensor t(ElemType::I64, {3});
  t.setI(0, -1);
  t.setI(1, int64_t(1) << 40);
  t.setI(2, 7);
  REQUIRE(writeNpy(dir.file("a.npy"), t).ok());
  auto back = readNpy(dir.file("a.npy"));
  REQUIRE(back.ok());
  CHECK(back->getI(1) == int64_t(1) << 40);
  CHECK(back->identical(t));

  auto missing = readNpy(dir.file("missing.npy"));
  REQUIRE(!missing.ok());
  CHECK(missing.diags().list[0].str() ==
        dir.file("missing.npy") + ": error: cannot open: No such file or directory\n");
  CHECK(firstError(readNpy(dir.path.string())) == "is a directory");
  CHECK(!writeNpy(dir.file("no/such/dir/x.npy"), t).ok());
}

// ---- tensor literals -----------------------------------------------------------------------

TEST_CASE("literal: shapes, fill, special values") {
  Loc loc = Loc::named("--input");
  auto t = parseTensorLiteral("2x3xf32=1 2 3 4 5 6", loc);
  REQUIRE(t.ok());
  CHECK(t->elem() == ElemType::F32);
  CHECK(t->shape() == std::vector<int64_t>{2, 3});
  CHECK(t->getF(0) == 1.0);
  CHECK(t->getF(5) == 6.0);

  auto s = parseTensorLiteral("f32=7", loc);
  REQUIRE(s.ok());
  CHECK(s->rank() == 0);
  CHECK(s->getF(0) == 7.0);

  auto fill = parseTensorLiteral("4xi64=-3", loc);
  REQUIRE(fill.ok());
  for (int64_t i = 0; i < 4; ++i) CHECK(fill->getI(i) == -3);

  auto sp = parseTensorLiteral("4xf64=nan inf -inf +2.5e-1", loc);
  REQUIRE(sp.ok());
  CHECK(std::isnan(sp->getF(0)));
  CHECK(sp->getF(1) == INFINITY);
  CHECK(sp->getF(2) == -INFINITY);
  CHECK(sp->getF(3) == 0.25);

  auto b = parseTensorLiteral("4xi1=true false 1 0", loc);
  REQUIRE(b.ok());
  CHECK(b->getI(0) == 1);
  CHECK(b->getI(1) == 0);
  CHECK(b->getI(2) == 1);
  CHECK(b->getI(3) == 0);

  auto lim = parseTensorLiteral("2xi8=127,-128", loc);
  REQUIRE(lim.ok());
  CHECK(lim->getI(0) == 127);
  CHECK(lim->getI(1) == -128);

  auto empty = parseTensorLiteral("0x3xf32=", loc);
  REQUIRE(empty.ok());
  CHECK(empty->numElements() == 0);
}

TEST_CASE("literal: errors") {
  Loc loc = Loc::named("--input[0]");
  struct Case {
    const char* text;
    const char* message;
  };
  Case cases[] = {
      {"2x2xf32=1 2 3",
       "tensor literal of type tensor<2x2xf32> needs 4 values (or one to fill it), got 3"},
      {"2xf32=", "tensor literal of type tensor<2xf32> needs 2 values (or one to fill it), got 0"},
      {"f32", "bad tensor literal 'f32': expected TYPE=VALUES such as 2x3xf32=1 2 3 4 5 6"},
      {"2x3xq7=1", "unknown element type 'q7' in tensor literal '2x3xq7'"},
      {"ax3xf32=1", "bad dimension 'a' in tensor literal type 'ax3xf32'"},
      {"-1xf32=1", "bad dimension '-1' in tensor literal type '-1xf32'"},
      {"i32=1.5", "bad i32 value '1.5'"},
      {"i8=128", "value '128' is out of range for i8"},
      {"u8=-1", "value '-1' is out of range for u8"},
      {"i64=99999999999999999999", "value '99999999999999999999' is out of range for i64"},
      {"i1=2", "bad i1 value '2' (use true, false, 1 or 0)"},
      {"f32=1x", "bad number '1x'"},
      {"f64=1e999", "number '1e999' is out of range"},
      {"100000x100000xf32=0", "tensor literal '100000x100000xf32' is too large"},
      {"4294967296x4294967296xf32=0", "tensor literal '4294967296x4294967296xf32' is too large"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    auto r = parseTensorLiteral(c.text, loc);
    REQUIRE(!r.ok());
    CHECK(r.diags().list[0].str() == std::string("--input[0]: error: ") + c.message + "\n");
  }
}

// ---- printing ------------------------------------------------------------------------------

TEST_CASE("formatTensor") {
  CHECK(formatTensor(f32Tensor({2, 3}, {1, 2, 3, 4, 5, 6})) ==
        "tensor<2x3xf32> [[1, 2, 3], [4, 5, 6]]");
  CHECK(formatTensor(f32Tensor({}, {7})) == "tensor<f32> 7");
  CHECK(formatTensor(f32Tensor({6}, {0.5, 1e10, NAN, -INFINITY, 1.0 / 3, -0.0})) ==
        "tensor<6xf32> [0.5, 1e+10, nan, -inf, 0.333333, -0]");
  HostTensor b(ElemType::I1, {2});
  b.setI(0, 1);
  CHECK(formatTensor(b) == "tensor<2xi1> [true, false]");
  HostTensor iota(ElemType::I32, {10});
  for (int64_t i = 0; i < 10; ++i) iota.setI(i, i - 2);
  CHECK(formatTensor(iota, 4) == "tensor<10xi32> [-2, -1, ..., 6, 7]");
  CHECK(formatTensor(iota, 5) == "tensor<10xi32> [-2, -1, 0, ..., 6, 7]");
  CHECK(formatTensor(iota) == "tensor<10xi32> [-2, -1, 0, 1, ..., 4, 5, 6, 7]");
  CHECK(formatTensor(iota, 10) == "tensor<10xi32> [-2, -1, 0, 1, 2, 3, 4, 5, 6, 7]");
  HostTensor grid(ElemType::U8, {3, 3});
  for (int64_t i = 0; i < 9; ++i) grid.setI(i, 250 + i);
  CHECK(formatTensor(grid, 2) == "tensor<3x3xu8> [[250, ..., 252], ..., [0, ..., 2]]");
  CHECK(formatTensor(HostTensor(ElemType::F32, {0, 4})) == "tensor<0x4xf32> []");
}

// ---- safetensors ---------------------------------------------------------------------------

TEST_CASE("safetensors: write then read every element type") {
  TempDir dir;
  std::map<std::string, HostTensor> tensors;
  for (ElemType e : {ElemType::F64, ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::I1,
                     ElemType::I8, ElemType::I16, ElemType::I32, ElemType::I64, ElemType::U8,
                     ElemType::U16, ElemType::U32, ElemType::U64}) {
    HostTensor t(e, {3});
    for (int64_t i = 0; i < 3; ++i) t.setI(i, isBool(e) ? i % 2 : i + 1);
    tensors.emplace(std::string("t.") + std::string(elemTypeName(e)), t);
  }
  tensors.emplace("empty", HostTensor(ElemType::F32, {0, 2}));
  REQUIRE(writeSafetensors(dir.file("w.safetensors"), tensors).ok());

  auto file = SafetensorsFile::open(dir.file("w.safetensors"));
  REQUIRE(file.ok());
  CHECK((*file)->names().size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    CAPTURE(name);
    auto back = (*file)->tensor(name);
    REQUIRE(back.ok());
    CHECK(back->identical(t));
  }
  // The header is padded to a multiple of 8 so the data that follows is aligned.
  std::ifstream in(dir.file("w.safetensors"), std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  CHECK(n % 8 == 0);
}

TEST_CASE("safetensors: a hand-written file, and tensors outlive the file object") {
  TempDir dir;
  writeBytes(
      dir.file("h.safetensors"),
      stBytes(
          R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
          f32Bytes({0.25f, -4.0f})));
  HostTensor t;
  {
    auto file = SafetensorsFile::open(dir.file("h.safetensors"));
    REQUIRE(file.ok());
    CHECK((*file)->names() == std::vector<std::string>{"w"});
    auto w = (*file)->tensor("w");
    REQUIRE(w.ok());
    t = *w;
    auto missing = (*file)->tensor("v");
    CHECK(firstError(missing) == "no tensor 'v' in this file (it has: w)");
  }
  // The file object is gone; the mapping lives on through the tensor.
  CHECK(t.shape() == std::vector<int64_t>{2});
  CHECK(t.getF(0) == 0.25);
  CHECK(t.getF(1) == -4.0);
}

TEST_CASE("safetensors: unaligned offsets and non-0/1 bools are copied and normalized") {
  TempDir dir;
  std::string data = std::string("\x05", 1) + f32Bytes({3.0f}) + std::string("\x00\x09", 2);
  writeBytes(dir.file("u.safetensors"),
             stBytes(R"({"f":{"dtype":"F32","shape":[],"data_offsets":[1,5]},)"
                     R"("b":{"dtype":"BOOL","shape":[2],"data_offsets":[5,7]}})",
                     data));
  auto file = SafetensorsFile::open(dir.file("u.safetensors"));
  REQUIRE(file.ok());
  auto f = (*file)->tensor("f");
  REQUIRE(f.ok());
  CHECK(f->getF(0) == 3.0);
  CHECK(reinterpret_cast<uintptr_t>(f->data()) % 4 == 0);
  auto b = (*file)->tensor("b");
  REQUIRE(b.ok());
  CHECK(b->data()[0] == 0);
  CHECK(b->data()[1] == 1);
}

TEST_CASE("safetensors: corrupt files are errors") {
  TempDir dir;
  std::string eight = f32Bytes({1, 2});
  struct Case {
    std::string bytes, message;
  };
  std::vector<Case> cases = {
      {"", "not a safetensors file: shorter than its 8-byte header length"},
      {std::string("\x10\x00\x00", 3),
       "not a safetensors file: shorter than its 8-byte header length"},
      {std::string("\xff\x00\x00\x00\x00\x00\x00\x00{}", 10),
       "corrupt safetensors file: header length 255 exceeds the file size 10"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\xff{}", 10),
       "corrupt safetensors file: header length 18446744073709551615 exceeds the file size 10"},
      {stBytes("[1, 2]", ""), "safetensors header is not a JSON object"},
      {stBytes(R"({"__metadata__": 3})", ""), "'__metadata__' is not a JSON object"},
      {stBytes(R"({"w": 3})", ""), "tensor 'w': header entry is not an object"},
      {stBytes(R"({"w": {"dtype": "F32", "shape": [2]}})", eight),
       "tensor 'w': header entry needs 'dtype', 'shape' and 'data_offsets'"},
      {stBytes(R"({"w": {"dtype": 5, "shape": [2], "data_offsets": [0, 8]}})", eight),
       "tensor 'w': 'dtype' is not a string"},
      {stBytes(R"({"w": {"dtype": "F8_E4M3", "shape": [8], "data_offsets": [0, 8]}})", eight),
       "tensor 'w': unsupported dtype 'F8_E4M3' (kiln reads F64 F32 F16 BF16 BOOL I8 I16 I32 I64 "
       "U8 U16 U32 U64)"},
      {stBytes(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", eight),
       "tensor 'w': 'shape' must hold non-negative integers"},
      {stBytes(R"({"w": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}})", eight),
       "tensor 'w': 'shape' must hold non-negative integers"},
      {stBytes(R"({"w": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}})", eight),
       "tensor 'w': 'shape' is not an array"},
      {stBytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", eight),
       "tensor 'w': 'data_offsets' must be [begin, end] with non-negative integers"},
      {stBytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}})", eight),
       "tensor 'w': data_offsets [0, 12] are outside the data region of 8 bytes"},
      {stBytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", eight),
       "tensor 'w': data_offsets [8, 0] are outside the data region of 8 bytes"},
      {stBytes(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", eight),
       "tensor 'w': shape and dtype need 12 bytes but data_offsets span 8"},
      {stBytes(
           R"({"w": {"dtype": "F64", "shape": [4294967296, 4294967296, 2], "data_offsets": [0, 0]}})",
           eight),
       "tensor 'w': shape and dtype need more than 2^64 bytes but data_offsets span 0"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.bytes);
    writeBytes(dir.file("bad.safetensors"), c.bytes);
    auto r = SafetensorsFile::open(dir.file("bad.safetensors"));
    REQUIRE(!r.ok());
    CHECK(r.diags().list[0].message == c.message);
    CHECK(r.diags().list[0].loc.str() == dir.file("bad.safetensors"));
  }
  // Invalid JSON: nlohmann's exception becomes a diagnostic.
  writeBytes(dir.file("bad.safetensors"), stBytes("{\"w\": ", ""));
  CHECK(firstError(SafetensorsFile::open(dir.file("bad.safetensors")))
            .starts_with("malformed safetensors header: "));
  CHECK(firstError(SafetensorsFile::open(dir.file("none.safetensors"))) ==
        "cannot open: No such file or directory");
  CHECK(firstError(SafetensorsFile::open(dir.path.string())) == "not a regular file");
}

TEST_CASE("safetensors: every truncation of a valid file is an error, never a crash") {
  TempDir dir;
  REQUIRE(writeSafetensors(dir.file("ok.safetensors"), {{"a", f32Tensor({2}, {1, 2})}}).ok());
  std::ifstream in(dir.file("ok.safetensors"), std::ios::binary);
  std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t n = 0; n < good.size(); ++n) {
    writeBytes(dir.file("t.safetensors"), good.substr(0, n));
    CHECK(!SafetensorsFile::open(dir.file("t.safetensors")).ok());
  }
}

TEST_CASE("safetensors: writing refuses the reserved name") {
  TempDir dir;
  auto s = writeSafetensors(dir.file("m.safetensors"), {{"__metadata__", f32Tensor({1}, {1})}});
  CHECK(firstError(s) == "'__metadata__' is reserved and cannot name a tensor");
}

// ---- WeightStore ---------------------------------------------------------------------------

TEST_CASE("WeightStore: resolves, checks and caches weights") {
  TempDir dir;
  REQUIRE(writeSafetensors(dir.file("w.safetensors"), {{"layer.w", f32Tensor({2, 2}, {1, 2, 3, 4})},
                                                       {"layer.b", f32Tensor({2}, {5, 6})}})
              .ok());
  Module m;
  m.setBaseDir(dir.path.string());
  Loc at{"m.kir", 3, 1};
  auto decl = [&](const std::string& name, Type type, std::string file, std::string tensor) {
    REQUIRE(
        m.addWeight(WeightDecl{name, type, std::move(file), std::move(tensor), at, std::nullopt})
            .ok());
  };
  decl("w", Type::tensor(ElemType::F32, {2, 2}), "w.safetensors", "layer.w");
  decl("b", Type::tensor(ElemType::F32, {2}), dir.file("w.safetensors"), "layer.b");
  decl("half", Type::tensor(ElemType::F16, {2, 2}), "w.safetensors", "layer.w");
  decl("flat", Type::tensor(ElemType::F32, {4}), "w.safetensors", "layer.w");
  decl("gone", Type::tensor(ElemType::F32, {2}), "w.safetensors", "layer.gone");
  decl("nofile", Type::tensor(ElemType::F32, {2}), "missing.safetensors", "x");

  WeightStore store(m);
  auto w = store.get("w");
  REQUIRE(w.ok());
  CHECK(w->getF(3) == 4.0);
  auto again = store.get("w");
  REQUIRE(again.ok());
  CHECK(again->data() == w->data());
  auto b = store.get("b"); // absolute path, baseDir ignored
  REQUIRE(b.ok());
  CHECK(b->getF(1) == 6.0);

  std::string path = dir.file("w.safetensors");
  auto half = store.get("half");
  REQUIRE(!half.ok());
  CHECK(half.diags().list[0].str() ==
        "m.kir:3:1: error: weight @half: tensor 'layer.w' in '" + path +
            "' is tensor<2x2xf32> but the declaration says tensor<2x2xf16>\n");
  CHECK(firstError(store.get("flat")) ==
        "weight @flat: tensor 'layer.w' in '" + path +
            "' is tensor<2x2xf32> but the declaration says tensor<4xf32>");
  CHECK(firstError(store.get("gone")) ==
        "weight @gone: file '" + path + "' has no tensor 'layer.gone'");
  auto nofile = store.get("nofile");
  REQUIRE(!nofile.ok());
  const Diag& d = nofile.diags().list[0];
  CHECK(d.loc == at);
  CHECK(d.message == "cannot load weight @nofile from '" + dir.file("missing.safetensors") + "'");
  REQUIRE(d.notes.size() == 1);
  CHECK(d.notes[0].message == "cannot open: No such file or directory");
  CHECK(firstError(store.get("nope")) == "no weight named @nope is declared in the module");
}
