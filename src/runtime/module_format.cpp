// .kmod writing and validated loading (see module_format.h for the layout).
#include "runtime/module_format.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <xxhash.h>

#include <nlohmann/json.hpp>

#include "ir/io/mapped_file.h"
#include "ir/io/weights.h"
#include "ir/text/parser.h"
#include "ir/text/printer.h"
#include "ir/verify/verifier.h"

namespace kiln {

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'M', 'O', 'D', '\0'};
constexpr uint64_t kHeaderBytes = 64;
constexpr uint64_t kEntryBytes = 48;
constexpr uint64_t kAlign = 64;
constexpr size_t kNameBytes = 16;

uint64_t alignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

void putU32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void putU64(std::string& s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t getU32(std::string_view s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}
uint64_t getU64(std::string_view s, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

uint64_t hashOf(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

// A section as it will be written: its bytes (meta, host, an executable), or for the weights
// section the embedded tensors, each at its 64-byte aligned offset in the section, written
// from where they are held instead of from a copy.
struct PendingSection {
  uint32_t kind;
  std::string name;
  std::string data;
  std::vector<std::pair<uint64_t, const HostTensor*>> tensors;
  uint64_t size = 0;
  uint64_t hash = 0;
};

nlohmann::json statsJson(const FunctionStats& s) {
  return {{"name", s.name},
          {"dispatches", s.dispatches},
          {"peak_bytes", s.peakBytes},
          {"total_bytes", s.totalBytes},
          {"weight_bytes", s.weightBytes},
          {"peak_expr", s.peakExpr},
          {"total_expr", s.totalExpr},
          {"bound_at", s.boundAt}};
}

// Where the bytes go: false when they could not be written.
using ByteSink = std::function<bool(const char* data, size_t size)>;

constexpr char kZeros[kAlign] = {};

// Emits the tensor section's bytes (zero gaps, then each tensor) in order.
bool emitTensors(const PendingSection& s, const ByteSink& put) {
  uint64_t at = 0;
  for (const auto& [offset, t] : s.tensors) {
    if (!put(kZeros, offset - at)) return false;
    if (!put(reinterpret_cast<const char*>(t->data()), t->byteSize())) return false;
    at = offset + t->byteSize();
  }
  return true;
}

// The module's bytes, in file order, to `put`: the header and section table first (each
// section's checksum is computed before anything is written), then the sections.
Status emitProgram(const Program& p, const ByteSink& put, const Loc& where) {
  if (!p.host) return error(Loc{}, "internal: program without a host module");
  nlohmann::json meta;
  meta["entries"] = p.entries;
  meta["devices"] = p.devices;
  meta["executables"] = nlohmann::json::array();
  meta["weights"] = nlohmann::json::array();
  meta["stats"] = nlohmann::json::array();
  for (const FunctionStats& s : p.stats) meta["stats"].push_back(statsJson(s));

  const std::map<std::string, HostTensor>& embedded = p.embeddedWeights;
  std::vector<PendingSection> sections;
  PendingSection weights{kWeightsSection, "weights", {}, {}, 0, 0};
  for (const auto& [name, t] : embedded) {
    weights.size = alignUp(weights.size);
    meta["weights"].push_back({{"name", name},
                               {"dtype", std::string(elemTypeName(t.elem()))},
                               {"shape", t.shape()},
                               {"offset", weights.size},
                               {"size", t.byteSize()}});
    weights.tensors.emplace_back(weights.size, &t);
    weights.size += t.byteSize();
  }

  // External weights are referenced by absolute path, so the module can move.
  std::set<std::string> entrySet(p.entries.begin(), p.entries.end());
  PrintOptions opts;
  opts.locs = true;
  opts.funcFilter = [&](const Func& f) { return entrySet.count(f.name()) != 0; };
  std::string host = printModule(*p.host, opts);
  for (const WeightDecl& w : p.host->weights()) {
    if (embedded.count(w.name)) continue;
    std::filesystem::path file(w.file);
    if (file.is_relative()) file = std::filesystem::path(p.host->baseDir()) / file;
    std::error_code ec;
    std::filesystem::path abs = std::filesystem::absolute(file, ec);
    if (ec) return error(w.loc, "cannot resolve the path of weight file '" + w.file + "'");
    // Rewrite the declaration line (printed as `= "FILE"[`) to the absolute path.
    std::string from = "weight @" + w.name + " : " + w.type.str() + " = \"" + w.file + "\"";
    std::string to = "weight @" + w.name + " : " + w.type.str() + " = \"" + abs.string() + "\"";
    if (size_t at = host.find(from); at != std::string::npos) host.replace(at, from.size(), to);
  }

  sections.push_back({kHostSection, "host", std::move(host), {}, 0, 0});
  for (const ExecutableImage& e : p.executables) {
    std::string name = "exec." + e.target;
    if (name.size() >= kNameBytes)
      return error(Loc{}, "executable target name '" + e.target + "' is too long");
    meta["executables"].push_back({{"target", e.target}, {"section", name}});
    sections.push_back({kExecSection, name, e.payload, {}, 0, 0});
  }
  if (!embedded.empty()) sections.push_back(std::move(weights));
  sections.insert(sections.begin(), PendingSection{kMetaSection, "meta", meta.dump(1), {}, 0, 0});

  for (PendingSection& s : sections) {
    if (s.kind != kWeightsSection) {
      s.size = s.data.size();
      s.hash = hashOf(s.data);
      continue;
    }
    // The same checksum as over the section's bytes in one piece (XXH3's streaming form).
    std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(),
                                                                          XXH3_freeState);
    if (!state || XXH3_64bits_reset(state.get()) == XXH_ERROR)
      return error(Loc{}, "internal: cannot create a checksum state");
    auto update = [&](const char* d, size_t n) {
      return XXH3_64bits_update(state.get(), d, n) != XXH_ERROR;
    };
    if (!emitTensors(s, update)) return error(Loc{}, "internal: the weights checksum failed");
    s.hash = XXH3_64bits_digest(state.get());
  }

  uint64_t tableEnd = kHeaderBytes + kEntryBytes * sections.size();
  std::string head(tableEnd, '\0');
  std::memcpy(head.data(), kMagic, 8);
  putU32(head, 8, kFormatVersion);
  putU32(head, 12, static_cast<uint32_t>(sections.size()));
  uint64_t size = tableEnd;
  for (size_t i = 0; i < sections.size(); ++i) {
    size = alignUp(size);
    size_t e = kHeaderBytes + kEntryBytes * i;
    putU32(head, e, sections[i].kind);
    putU64(head, e + 8, size);
    putU64(head, e + 16, sections[i].size);
    putU64(head, e + 24, sections[i].hash);
    std::memcpy(head.data() + e + 32, sections[i].name.data(), sections[i].name.size());
    size += sections[i].size;
  }
  putU64(head, 16, size);
  putU64(head, 24, hashOf(head));

  auto failed = [&] { return error(where, std::string("cannot write: ") + std::strerror(errno)); };
  if (!put(head.data(), head.size())) return failed();
  uint64_t at = tableEnd;
  for (const PendingSection& s : sections) {
    if (!put(kZeros, alignUp(at) - at)) return failed();
    bool good = s.kind == kWeightsSection ? emitTensors(s, put) : put(s.data.data(), s.data.size());
    if (!good) return failed();
    at = alignUp(at) + s.size;
  }
  return ok();
}

} // namespace

Result<std::string> serializeProgram(const Program& p) {
  std::string out;
  KILN_CHECK(emitProgram(
      p,
      [&](const char* d, size_t n) {
        out.append(d, n);
        return true;
      },
      Loc{}));
  return out;
}

Status writeProgramFile(const std::string& path, const Program& program) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return error(Loc::named(path), std::string("cannot write: ") + std::strerror(errno));
  Status s = emitProgram(
      program, [&](const char* d, size_t n) { return n == 0 || std::fwrite(d, 1, n, f) == n; },
      Loc::named(path));
  bool closed = std::fclose(f) == 0;
  if (s.ok() && !closed)
    s = error(Loc::named(path), std::string("cannot write: ") + std::strerror(errno));
  // A module cut short would only be refused when loaded.
  if (!s.ok()) std::remove(path.c_str());
  return s;
}

Result<std::vector<SectionInfo>> validateContainer(std::string_view b, const std::string& name) {
  Loc loc = Loc::named(name);
  if (b.size() < kHeaderBytes)
    return error(loc, "truncated module: " + std::to_string(b.size()) +
                          " bytes, shorter than the 64-byte header");
  if (std::memcmp(b.data(), kMagic, 8) != 0) return error(loc, "not a kiln module (bad magic)");
  uint32_t version = getU32(b, 8);
  if (version != kFormatVersion)
    return error(loc, "module format version " + std::to_string(version) +
                          " is not supported; this kiln reads version " +
                          std::to_string(kFormatVersion) + " (recompile the module)");
  uint32_t count = getU32(b, 12);
  if (count == 0 || count > kMaxSections)
    return error(loc, "corrupt module: " + std::to_string(count) + " sections (1 to " +
                          std::to_string(kMaxSections) + " allowed)");
  uint64_t declared = getU64(b, 16);
  if (declared != b.size())
    return error(loc, (b.size() < declared ? "truncated module: the header says "
                                           : "corrupt module: the header says ") +
                          std::to_string(declared) + " bytes, the file has " +
                          std::to_string(b.size()));
  uint64_t tableEnd = kHeaderBytes + kEntryBytes * count;
  if (tableEnd > b.size()) return error(loc, "truncated module: the section table is cut off");
  std::string head(b.substr(0, tableEnd));
  putU64(head, 24, 0);
  if (hashOf(head) != getU64(b, 24)) return error(loc, "corrupt module: header checksum mismatch");
  for (size_t i = 32; i < 64; ++i)
    if (b[i] != 0) return error(loc, "corrupt module: reserved header bytes are not zero");

  std::vector<SectionInfo> out;
  uint64_t cursor = tableEnd;
  for (uint32_t i = 0; i < count; ++i) {
    size_t e = kHeaderBytes + kEntryBytes * i;
    SectionInfo s;
    s.kind = getU32(b, e);
    s.offset = getU64(b, e + 8);
    s.size = getU64(b, e + 16);
    s.hash = getU64(b, e + 24);
    std::string_view rawName = b.substr(e + 32, kNameBytes);
    s.name = std::string(rawName.substr(0, rawName.find('\0')));
    std::string what = "section " + std::to_string(i) + " ('" + s.name + "')";
    if (s.kind < kMetaSection || s.kind > kWeightsSection || getU32(b, e + 4) != 0)
      return error(loc, "corrupt module: " + what + " has unknown kind " + std::to_string(s.kind));
    if (s.offset % kAlign != 0 || s.offset < cursor || s.offset > b.size() ||
        s.size > b.size() - s.offset)
      return error(loc, "corrupt module: " + what + " lies outside the file or overlaps another");
    for (uint64_t p = cursor; p < s.offset; ++p)
      if (b[p] != 0) return error(loc, "corrupt module: non-zero padding before " + what);
    if (hashOf(b.substr(s.offset, s.size)) != s.hash)
      return error(loc, "corrupt module: checksum mismatch in " + what);
    cursor = s.offset + s.size;
    out.push_back(std::move(s));
  }
  if (cursor != b.size())
    return error(loc, "corrupt module: trailing bytes after the last section");
  return out;
}

namespace {

Result<nlohmann::json> parseMeta(std::string_view text, const Loc& loc) {
  nlohmann::json meta = nlohmann::json::parse(text, nullptr, false);
  if (meta.is_discarded() || !meta.is_object())
    return error(loc, "corrupt module: the meta section is not a JSON object");
  for (const char* key : {"entries", "devices", "executables", "weights", "stats"})
    if (!meta.contains(key) || !meta[key].is_array())
      return error(loc, std::string("corrupt module: meta has no '") + key + "' list");
  return meta;
}

// Reads one field with the expected JSON type, or explains what is wrong.
template <typename T> Result<T> field(const nlohmann::json& j, const char* key, const Loc& loc) {
  if (!j.is_object() || !j.contains(key))
    return error(loc, std::string("corrupt module: meta entry without '") + key + "'");
  const nlohmann::json& v = j[key];
  if constexpr (std::is_same_v<T, std::string>) {
    if (v.is_string()) return v.get<std::string>();
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
  }
  return error(loc, std::string("corrupt module: meta field '") + key + "' has the wrong type");
}

Result<HostTensor> weightFromMeta(const nlohmann::json& w, std::string_view data,
                                  std::shared_ptr<const void> owner, const Loc& loc) {
  KILN_TRY(std::string name, field<std::string>(w, "name", loc));
  KILN_TRY(std::string dtype, field<std::string>(w, "dtype", loc));
  KILN_TRY(uint64_t offset, field<uint64_t>(w, "offset", loc));
  KILN_TRY(uint64_t size, field<uint64_t>(w, "size", loc));
  std::optional<ElemType> elem = parseElemType(dtype);
  if (!elem) return error(loc, "corrupt module: weight '" + name + "' has dtype '" + dtype + "'");
  if (!w.contains("shape") || !w["shape"].is_array())
    return error(loc, "corrupt module: weight '" + name + "' has no shape");
  std::vector<int64_t> shape;
  uint64_t n = 1;
  for (const auto& d : w["shape"]) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40))
      return error(loc, "corrupt module: weight '" + name + "' has a bad dim");
    if (__builtin_mul_overflow(n, d.get<uint64_t>(), &n))
      return error(loc, "corrupt module: weight '" + name + "' is too large");
    shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(elemTypeBytes(*elem)), &bytes) ||
      bytes != size || offset % kAlign != 0 || offset > data.size() || size > data.size() - offset)
    return error(loc, "corrupt module: weight '" + name + "' does not fit the weights section");
  return HostTensor::view(*elem, shape, data.data() + offset, std::move(owner));
}

} // namespace

Result<Program> loadProgram(std::string_view bytes, std::shared_ptr<const void> owner,
                            const std::string& name, const std::string& baseDir) {
  Loc loc = Loc::named(name);
  KILN_TRY(std::vector<SectionInfo> sections, validateContainer(bytes, name));
  auto section = [&](const std::string& n) -> const SectionInfo* {
    for (const SectionInfo& s : sections)
      if (s.name == n) return &s;
    return nullptr;
  };
  auto data = [&](const SectionInfo& s) { return bytes.substr(s.offset, s.size); };
  const SectionInfo* metaSec = section("meta");
  const SectionInfo* hostSec = section("host");
  if (!metaSec || !hostSec) return error(loc, "corrupt module: no meta or host section");
  KILN_TRY(nlohmann::json meta, parseMeta(data(*metaSec), loc));

  Program p;
  for (const auto& e : meta["entries"]) {
    if (!e.is_string()) return error(loc, "corrupt module: an entry name is not a string");
    p.entries.push_back(e.get<std::string>());
  }
  for (const auto& d : meta["devices"]) {
    if (!d.is_string()) return error(loc, "corrupt module: a device is not a string");
    p.devices.push_back(d.get<std::string>());
  }
  for (const auto& e : meta["executables"]) {
    KILN_TRY(std::string target, field<std::string>(e, "target", loc));
    KILN_TRY(std::string secName, field<std::string>(e, "section", loc));
    const SectionInfo* s = section(secName);
    if (!s || s->kind != kExecSection)
      return error(loc, "corrupt module: executable '" + target + "' has no section");
    p.executables.push_back({target, std::string(data(*s))});
  }
  const SectionInfo* weightsSec = section("weights");
  std::string_view weightData = weightsSec ? data(*weightsSec) : std::string_view();
  for (const auto& w : meta["weights"]) {
    KILN_TRY(HostTensor t, weightFromMeta(w, weightData, owner, loc));
    p.embeddedWeights[w["name"].get<std::string>()] = std::move(t);
  }
  for (const auto& s : meta["stats"]) {
    FunctionStats fs;
    KILN_TRY(fs.name, field<std::string>(s, "name", loc));
    KILN_TRY(fs.dispatches, field<uint64_t>(s, "dispatches", loc));
    KILN_TRY(fs.peakBytes, field<uint64_t>(s, "peak_bytes", loc));
    KILN_TRY(fs.totalBytes, field<uint64_t>(s, "total_bytes", loc));
    KILN_TRY(fs.weightBytes, field<uint64_t>(s, "weight_bytes", loc));
    KILN_TRY(fs.peakExpr, field<std::string>(s, "peak_expr", loc));
    KILN_TRY(fs.totalExpr, field<std::string>(s, "total_expr", loc));
    KILN_TRY(fs.boundAt, field<std::string>(s, "bound_at", loc));
    p.stats.push_back(std::move(fs));
  }

  KILN_TRY(std::unique_ptr<Module> host, parseModule(data(*hostSec), name + ":host"));
  KILN_CHECK(verifyModule(*host));
  host->setBaseDir(baseDir);
  for (const std::string& e : p.entries)
    if (!host->lookupFunc(e))
      return error(loc, "corrupt module: entry @" + e + " is not in the host program");
  for (const auto& [w, t] : p.embeddedWeights) {
    const WeightDecl* d = host->lookupWeight(w);
    if (!d || d->type.elem() != t.elem() || !d->type.isStatic() ||
        d->type.staticShape() != t.shape())
      return error(loc,
                   "corrupt module: embedded weight '" + w + "' does not match its declaration");
  }
  p.host = std::move(host);
  return p;
}

Result<Program> loadProgramFile(const std::string& path) {
  KILN_TRY(MappedFile file, mapFile(path));
  if (file.size == 0) return error(Loc::named(path), "truncated module: the file is empty");
  std::string dir = std::filesystem::path(path).parent_path().string();
  KILN_TRY(Program p,
           loadProgram(std::string_view(reinterpret_cast<const char*>(file.data), file.size),
                       file.mapping, path, dir.empty() ? "." : dir));
  // External weights must be present before anything runs.
  WeightStore store(*p.host);
  for (const WeightDecl& w : p.host->weights())
    if (!p.embeddedWeights.count(w.name)) KILN_CHECK(store.get(w.name));
  return p;
}

} // namespace kiln
