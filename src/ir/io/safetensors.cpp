// safetensors reading (mmap, every offset checked) and writing.
//
// nlohmann::json reports malformed or mistyped JSON by throwing; this file is the boundary
// where those exceptions become diagnostics, so none escapes to callers.
#include "ir/io/safetensors.h"

#include "ir/io/mapped_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

namespace kiln {

namespace {

using nlohmann::json;

struct StDtype {
  ElemType elem;
  const char* name;
};

constexpr StDtype kDtypes[] = {
    {ElemType::F64, "F64"},   {ElemType::F32, "F32"}, {ElemType::F16, "F16"},
    {ElemType::BF16, "BF16"}, {ElemType::I1, "BOOL"}, {ElemType::I8, "I8"},
    {ElemType::I16, "I16"},   {ElemType::I32, "I32"}, {ElemType::I64, "I64"},
    {ElemType::U8, "U8"},     {ElemType::U16, "U16"}, {ElemType::U32, "U32"},
    {ElemType::U64, "U64"},
};

const char* dtypeName(ElemType e) {
  for (const StDtype& d : kDtypes)
    if (d.elem == e) return d.name;
  return "F32";
}

// The reference implementation refuses headers above 100 MB; so does kiln, which also
// keeps a corrupt length from making it parse gigabytes of data as JSON.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

// Validates one header entry and turns it into an Entry.
Result<SafetensorsFile::Entry> parseEntry(const std::string& name, const json& v, uint64_t dataSize,
                                          const Loc& loc) {
  auto bad = [&](const std::string& why) { return error(loc, "tensor '" + name + "': " + why); };
  if (!v.is_object()) return bad("header entry is not an object");
  auto dt = v.find("dtype");
  auto sh = v.find("shape");
  auto off = v.find("data_offsets");
  if (dt == v.end() || sh == v.end() || off == v.end())
    return bad("header entry needs 'dtype', 'shape' and 'data_offsets'");
  if (!dt->is_string()) return bad("'dtype' is not a string");
  std::string dtype = dt->get<std::string>();
  std::optional<ElemType> elem;
  for (const StDtype& d : kDtypes)
    if (dtype == d.name) elem = d.elem;
  if (!elem)
    return bad("unsupported dtype '" + dtype +
               "' (kiln reads F64 F32 F16 BF16 BOOL I8 I16 I32 I64 U8 U16 U32 U64)");

  if (!sh->is_array()) return bad("'shape' is not an array");
  std::vector<int64_t> shape;
  uint64_t bytes = static_cast<uint64_t>(elemTypeBytes(*elem));
  bool overflow = false;
  for (const json& d : *sh) {
    if (!d.is_number_unsigned() ||
        d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return bad("'shape' must hold non-negative integers");
    shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    overflow = overflow || __builtin_mul_overflow(bytes, d.get<uint64_t>(), &bytes);
  }
  if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    return bad("'data_offsets' must be [begin, end] with non-negative integers");
  uint64_t begin = (*off)[0].get<uint64_t>();
  uint64_t end = (*off)[1].get<uint64_t>();
  if (begin > end || end > dataSize)
    return bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
               "] are outside the data region of " + std::to_string(dataSize) + " bytes");
  if (overflow || bytes != end - begin)
    return bad("shape and dtype need " +
               (overflow ? std::string("more than 2^64") : std::to_string(bytes)) +
               " bytes but data_offsets span " + std::to_string(end - begin));
  return SafetensorsFile::Entry{*elem, std::move(shape), static_cast<size_t>(begin),
                                static_cast<size_t>(end)};
}

} // namespace

Result<std::shared_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  Loc loc = Loc::named(path);
  KILN_TRY(MappedFile mapped, mapFile(path));
  uint64_t size = mapped.size;
  if (size < 8) return error(loc, "not a safetensors file: shorter than its 8-byte header length");
  std::shared_ptr<const void> mapping = mapped.mapping;
  const uint8_t* bytes = mapped.data;

  uint64_t headerLen = 0;
  for (int i = 0; i < 8; ++i) headerLen |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  if (headerLen > size - 8)
    return error(loc, "corrupt safetensors file: header length " + std::to_string(headerLen) +
                          " exceeds the file size " + std::to_string(size));
  if (headerLen > kMaxHeaderBytes)
    return error(loc, "safetensors header of " + std::to_string(headerLen) +
                          " bytes is larger than the 100 MB limit");
  uint64_t dataSize = size - 8 - headerLen;

  auto file = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = mapping;
  file->data_ = bytes + 8 + headerLen;
  try {
    json header = json::parse(bytes + 8, bytes + 8 + headerLen);
    if (!header.is_object()) return error(loc, "safetensors header is not a JSON object");
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        if (!value.is_object()) return error(loc, "'__metadata__' is not a JSON object");
        continue;
      }
      KILN_TRY(Entry e, parseEntry(name, value, dataSize, loc));
      file->entries_.emplace(name, std::move(e));
    }
  } catch (const std::exception& e) {
    return error(loc, std::string("malformed safetensors header: ") + e.what());
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() = default;

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

Result<HostTensor> SafetensorsFile::tensor(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::string have;
    for (const auto& [n, e] : entries_) have += (have.empty() ? "" : ", ") + n;
    return error(Loc::named(path_), "no tensor '" + name + "' in this file (it has: " +
                                        (have.empty() ? "nothing" : have) + ")");
  }
  const Entry& e = it->second;
  HostTensor view = HostTensor::view(e.elem, e.shape, data_ + e.begin, mapping_);
  // Offsets need not be aligned to the element size, and BOOL bytes need not be 0/1;
  // kernels may assume both, so such tensors get their own normalized copy.
  bool aligned = reinterpret_cast<uintptr_t>(data_ + e.begin) % elemTypeBytes(e.elem) == 0;
  bool cleanBools = true;
  if (e.elem == ElemType::I1)
    for (size_t i = e.begin; i < e.end && cleanBools; ++i) cleanBools = data_[i] <= 1;
  if (aligned && cleanBools) return view;
  HostTensor copy = view.clone();
  if (!cleanBools)
    for (int64_t i = 0; i < copy.numElements(); ++i) copy.setI(i, copy.data()[i] != 0);
  return copy;
}

Status writeSafetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors) {
  Loc loc = Loc::named(path);
  std::string header;
  try {
    json h = json::object();
    uint64_t offset = 0;
    for (const auto& [name, t] : tensors) {
      if (name == "__metadata__")
        return error(loc, "'__metadata__' is reserved and cannot name a tensor");
      uint64_t bytes = t.byteSize();
      h[name] = {{"dtype", dtypeName(t.elem())},
                 {"shape", t.shape()},
                 {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
    }
    header = h.dump();
  } catch (const std::exception& e) {
    return error(loc, std::string("cannot write safetensors header: ") + e.what());
  }
  // Padding with spaces keeps the data 8-byte aligned, as the format recommends.
  header.append((8 - header.size() % 8) % 8, ' ');

  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return error(loc, std::string("cannot write: ") + std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>((header.size() >> (8 * i)) & 0xff);
  bool good = std::fwrite(len, 1, 8, f) == 8;
  good = good && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const auto& [name, t] : tensors)
    good = good && (t.byteSize() == 0 || std::fwrite(t.data(), 1, t.byteSize(), f) == t.byteSize());
  good = (std::fclose(f) == 0) && good;
  if (!good) return error(loc, std::string("write failed: ") + std::strerror(errno));
  return ok();
}

} // namespace kiln
