// The .kmod module file: a versioned binary container for a Program.
//
// Layout (little-endian):
//   0   8  magic "KILNMOD\0"
//   8   4  format version (kFormatVersion)
//   12  4  number of sections (at most kMaxSections)
//   16  8  file size in bytes
//   24  8  xxh3-64 of the header and section table, computed with this field zeroed
//   32 32  zero
//   64     section table, 48 bytes per section:
//            u32 kind, u32 zero, u64 offset, u64 size, u64 xxh3-64 of the data,
//            char name[16] (NUL-padded)
//   then the sections, each at a 64-byte aligned offset, in table order; the gaps are zero.
//
// Sections: "meta" (JSON: entries, devices, stats, weight index, executables), "host"
// (IR text of the host program, with locations), "exec.TARGET" (one per executable
// target), "weights" (embedded weight data, each weight 64-byte aligned).
//
// The loader checks, before anything runs: size, magic, version, header checksum,
// section bounds/order/overlap, zero padding (so every byte of the file is covered by a
// check), every section's checksum, then the meta JSON and weight index against the
// weights section, then parses and verifies the host program. A flipped byte or a
// truncation anywhere is refused with an error that says what is wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/program.h"

namespace kiln {

// 2: launches carry their grid (`workgroups`) and push constants (`push`); the cpu payload
// holds no IR (KILNCPU2) and kernels it does not compile come as an `exec.ref` executable.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kMaxSections = 64;

struct SectionInfo {
  uint32_t kind = 0;
  std::string name;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t hash = 0;
};

enum SectionKind : uint32_t {
  kMetaSection = 1,
  kHostSection = 2,
  kExecSection = 3,
  kWeightsSection = 4
};

// The serialized file. Weights not in program.embeddedWeights stay references; their
// declarations' file paths are written as absolute paths.
Result<std::string> serializeProgram(const Program& program);
// The same bytes, written as a stream: each embedded weight goes from where it is held to the
// file (no copy of the weights or of the module is built in memory). A failed write removes
// the file.
Status writeProgramFile(const std::string& path, const Program& program);

// Validates the container (everything but the host program's IR) and lists its sections.
Result<std::vector<SectionInfo>> validateContainer(std::string_view bytes, const std::string& name);

// Loads a program from bytes that `owner` keeps alive (embedded weights view into them).
// `name` prefixes errors; `baseDir` resolves relative external weight paths.
Result<Program> loadProgram(std::string_view bytes, std::shared_ptr<const void> owner,
                            const std::string& name, const std::string& baseDir);
// Maps the file and loads it; external weight files are opened and checked too.
Result<Program> loadProgramFile(const std::string& path);

} // namespace kiln
