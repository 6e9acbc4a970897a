// TensorProto → HostTensor: raw_data, the typed repeated fields, and external data files,
// every size checked against the declared shape before a byte is copied (or, for a proto
// the caller gives up, before its raw_data is moved).
#include "frontends/onnx/tensor.h"

#include <cstring>
#include <filesystem>
#include <fstream>

namespace kiln::onnx {

std::optional<ElemType> elemTypeOf(int32_t t) {
  switch (t) {
  case pb::TensorProto::FLOAT: return ElemType::F32;
  case pb::TensorProto::DOUBLE: return ElemType::F64;
  case pb::TensorProto::FLOAT16: return ElemType::F16;
  case pb::TensorProto::BFLOAT16: return ElemType::BF16;
  case pb::TensorProto::BOOL: return ElemType::I1;
  case pb::TensorProto::INT8: return ElemType::I8;
  case pb::TensorProto::INT16: return ElemType::I16;
  case pb::TensorProto::INT32: return ElemType::I32;
  case pb::TensorProto::INT64: return ElemType::I64;
  case pb::TensorProto::UINT8: return ElemType::U8;
  case pb::TensorProto::UINT16: return ElemType::U16;
  case pb::TensorProto::UINT32: return ElemType::U32;
  case pb::TensorProto::UINT64: return ElemType::U64;
  default: return std::nullopt;
  }
}

std::string onnxTypeName(int32_t t) {
  if (pb::TensorProto::DataType_IsValid(t))
    return pb::TensorProto::DataType_Name(static_cast<pb::TensorProto::DataType>(t));
  return "type " + std::to_string(t);
}

int32_t onnxTypeOf(ElemType t) {
  switch (t) {
  case ElemType::F32: return pb::TensorProto::FLOAT;
  case ElemType::F64: return pb::TensorProto::DOUBLE;
  case ElemType::F16: return pb::TensorProto::FLOAT16;
  case ElemType::BF16: return pb::TensorProto::BFLOAT16;
  case ElemType::I1: return pb::TensorProto::BOOL;
  case ElemType::I8: return pb::TensorProto::INT8;
  case ElemType::I16: return pb::TensorProto::INT16;
  case ElemType::I32: return pb::TensorProto::INT32;
  case ElemType::I64: return pb::TensorProto::INT64;
  case ElemType::U8: return pb::TensorProto::UINT8;
  case ElemType::U16: return pb::TensorProto::UINT16;
  case ElemType::U32: return pb::TensorProto::UINT32;
  case ElemType::U64: return pb::TensorProto::UINT64;
  }
  return pb::TensorProto::UNDEFINED;
}

namespace {

Result<std::string> readExternal(const pb::TensorProto& t, const std::string& baseDir, size_t bytes,
                                 const Loc& loc) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    try {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset")
        offset = std::stoll(kv.value());
      else if (kv.key() == "length")
        length = std::stoll(kv.value());
    } catch (const std::exception&) {
      return error(loc, "tensor '" + t.name() + "': bad external data " + kv.key() + " '" +
                            kv.value() + "'");
    }
  }
  if (location.empty())
    return error(loc, "tensor '" + t.name() + "': external data without a location");
  if (baseDir.empty())
    return error(loc, "tensor '" + t.name() + "': external data '" + location +
                          "' cannot be resolved for a model read from memory");
  std::filesystem::path p = std::filesystem::path(location);
  if (p.is_absolute() || location.find("..") != std::string::npos)
    return error(loc, "tensor '" + t.name() + "': external data location '" + location +
                          "' must be a relative path inside the model's folder");
  p = std::filesystem::path(baseDir) / p;
  std::ifstream in(p, std::ios::binary);
  if (!in)
    return error(loc,
                 "tensor '" + t.name() + "': cannot open external data file '" + p.string() + "'");
  in.seekg(0, std::ios::end);
  auto size = static_cast<int64_t>(in.tellg());
  if (length < 0) length = static_cast<int64_t>(bytes);
  if (offset < 0 || length != static_cast<int64_t>(bytes) || offset > size ||
      size - offset < length)
    return error(loc, "tensor '" + t.name() + "': external data '" + p.string() + "' holds " +
                          std::to_string(size) + " bytes; offset " + std::to_string(offset) +
                          " length " + std::to_string(length) + " does not fit the " +
                          std::to_string(bytes) + " bytes the tensor needs");
  std::string data(bytes, '\0');
  in.seekg(offset);
  in.read(data.data(), static_cast<std::streamsize>(bytes));
  if (!in) return error(loc, "tensor '" + t.name() + "': reading '" + p.string() + "' failed");
  return data;
}

} // namespace

namespace {

// tensorFromProto and takeTensorFromProto: with `take`, raw_data moves out of `take` (which
// is `t`) into the tensor instead of being copied.
Result<HostTensor> convert(const pb::TensorProto& t, const std::string& baseDir, const Loc& loc,
                           pb::TensorProto* take) {
  std::optional<ElemType> elem = elemTypeOf(t.data_type());
  if (!elem)
    return error(loc, "tensor '" + t.name() + "' has element type " + onnxTypeName(t.data_type()) +
                          ", which kiln does not support");
  std::vector<int64_t> shape(t.dims().begin(), t.dims().end());
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > (int64_t(1) << 34))
      return error(loc, "tensor '" + t.name() + "' has an invalid shape");
  // Sizes are checked against the data before anything is allocated, so a shape that
  // claims more than the file holds costs nothing.
  auto bytes = static_cast<size_t>(n) * static_cast<size_t>(elemTypeBytes(*elem));
  auto sizeError = [&](size_t have) {
    return error(loc, "tensor '" + t.name() + "' holds " + std::to_string(have) +
                          " elements or bytes but its shape needs " + std::to_string(n));
  };
  if (t.data_location() == pb::TensorProto::EXTERNAL) {
    KILN_TRY(std::string data, readExternal(t, baseDir, bytes, loc));
    HostTensor out(*elem, shape);
    if (bytes) std::memcpy(out.mutableData(), data.data(), bytes);
    return out;
  }
  if (t.has_raw_data()) {
    if (t.raw_data().size() != bytes) return sizeError(t.raw_data().size());
    if (take && bytes) {
      // A swap, not a copy: the tensor views the string the parser filled.
      auto raw = std::make_shared<std::string>();
      raw->swap(*take->mutable_raw_data());
      const void* data = raw->data();
      return HostTensor::view(*elem, shape, data, std::move(raw));
    }
    HostTensor out(*elem, shape);
    if (bytes) std::memcpy(out.mutableData(), t.raw_data().data(), bytes);
    return out;
  }
  int stored = 0;
  switch (*elem) {
  case ElemType::F32: stored = t.float_data_size(); break;
  case ElemType::F64: stored = t.double_data_size(); break;
  case ElemType::I64: stored = t.int64_data_size(); break;
  case ElemType::U32:
  case ElemType::U64: stored = t.uint64_data_size(); break;
  default: stored = t.int32_data_size(); break;
  }
  if (static_cast<int64_t>(stored) != n) return sizeError(static_cast<size_t>(stored));
  HostTensor out(*elem, shape);
  auto count = [&](int size) -> Status {
    if (static_cast<int64_t>(size) != n) return sizeError(static_cast<size_t>(size));
    return ok();
  };
  switch (*elem) {
  case ElemType::F32:
    KILN_CHECK(count(t.float_data_size()));
    for (int64_t i = 0; i < n; ++i) out.setF(i, t.float_data(static_cast<int>(i)));
    break;
  case ElemType::F64:
    KILN_CHECK(count(t.double_data_size()));
    for (int64_t i = 0; i < n; ++i) out.setF(i, t.double_data(static_cast<int>(i)));
    break;
  case ElemType::I64:
    KILN_CHECK(count(t.int64_data_size()));
    for (int64_t i = 0; i < n; ++i) out.setI(i, t.int64_data(static_cast<int>(i)));
    break;
  case ElemType::U32:
  case ElemType::U64: // both in uint64_data
    KILN_CHECK(count(t.uint64_data_size()));
    for (int64_t i = 0; i < n; ++i)
      out.setI(i, static_cast<int64_t>(t.uint64_data(static_cast<int>(i))));
    break;
  case ElemType::F16:
  case ElemType::BF16: {
    // 16-bit floats are stored bit patterns in int32_data.
    KILN_CHECK(count(t.int32_data_size()));
    for (int64_t i = 0; i < n; ++i) {
      auto bits = static_cast<uint16_t>(t.int32_data(static_cast<int>(i)));
      std::memcpy(out.mutableData() + 2 * i, &bits, 2);
    }
    break;
  }
  default:
    KILN_CHECK(count(t.int32_data_size()));
    for (int64_t i = 0; i < n; ++i) out.setI(i, t.int32_data(static_cast<int>(i)));
    break;
  }
  return out;
}

} // namespace

Result<HostTensor> tensorFromProto(const pb::TensorProto& t, const std::string& baseDir,
                                   const Loc& loc) {
  return convert(t, baseDir, loc, nullptr);
}

Result<HostTensor> takeTensorFromProto(pb::TensorProto& t, const std::string& baseDir,
                                       const Loc& loc) {
  return convert(t, baseDir, loc, &t);
}

} // namespace kiln::onnx
