// `kiln dump`: what a .kmod file holds, after the loader validated all of it.
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli.h"
#include "ir/text/parser.h"
#include "runtime/cpu/payload.h"
#include "runtime/gpu/payload.h"
#include "runtime/module_format.h"

namespace kiln::cli {

namespace {
// Kernels listed per executable; a large model's dump stays readable.
constexpr size_t kMaxKernelsListed = 16;
} // namespace

const char* const kDumpHelp = R"(usage: kiln dump FILE.kmod

Validates a module file (header, version, section bounds, checksums) and prints its
sections, devices, functions with their memory (peak live set and sum of tensor sizes),
kernels and weights.
)";

int runDump(const std::vector<std::string>& args) {
  auto parsed = parseArgs(args, {}, "dump");
  if (!parsed.ok()) return fail(parsed.diags());
  const ParsedArgs& a = *parsed;
  if (a.help) {
    std::cout << kDumpHelp;
    return 0;
  }
  if (a.positional.size() != 1)
    return fail(error(Loc{}, "kiln dump needs exactly one .kmod file, got " +
                                 std::to_string(a.positional.size())));
  const std::string& path = a.positional[0];
  auto program = loadProgramFile(path);
  if (!program.ok()) return fail(program.diags());
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  std::string data = bytes.str();
  auto sections = validateContainer(data, path);
  if (!sections.ok()) return fail(sections.diags());
  const Program& p = *program;

  std::ostringstream out;
  out << "module " << path << ": format version " << kFormatVersion << ", " << data.size()
      << " bytes, " << sections->size() << " sections\n";
  out << "sections:\n";
  for (const SectionInfo& s : *sections) {
    char hash[19];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(s.hash));
    out << "  " << s.name << std::string(s.name.size() < 12 ? 12 - s.name.size() : 1, ' ')
        << "offset " << s.offset << ", " << s.size << " bytes, xxh3 " << hash << "\n";
  }
  out << "devices:";
  for (const std::string& d : p.devices) out << " " << d;
  out << "\n";
  if (!p.host->symbols().all().empty()) {
    out << "symbols:\n";
    for (const auto& [name, info] : p.host->symbols().all()) {
      out << "  " << name << " in [" << info.lo << ", " << info.hi << "]";
      if (info.divisor != 1) out << " divisible_by " << info.divisor;
      out << "\n";
    }
  }
  out << "functions:\n";
  for (const std::string& e : p.entries) {
    const Func* f = p.host->lookupFunc(e);
    out << "  @" << e << "(";
    for (size_t i = 0; i < f->numArgs(); ++i) {
      out << (i ? ", " : "") << f->arg(i)->type().str();
      if (std::optional<size_t> r = f->argDonation(i)) out << " donate " << *r;
    }
    out << ") -> (";
    for (size_t i = 0; i < f->resultTypes().size(); ++i)
      out << (i ? ", " : "") << f->resultTypes()[i].str();
    out << ")\n";
    for (const FunctionStats& s : p.stats) {
      if (s.name != e) continue;
      out << "    " << s.dispatches << " dispatches; peak memory " << s.peakBytes
          << " bytes, sum of tensors " << s.totalBytes << " bytes";
      if (!s.boundAt.empty()) out << " (at " << s.boundAt << ")";
      out << "; weights " << s.weightBytes << " bytes\n";
      out << "    peak = " << s.peakExpr << "\n    sum  = " << s.totalExpr << "\n";
    }
  }
  out << "executables:\n";
  for (const ExecutableImage& x : p.executables) {
    out << "  " << x.target << ": " << x.payload.size() << " bytes";
    // A cpu executable: the CPU its code is for, the features it needs, its kernels and the
    // push constants each reads.
    if (x.target == "cpu") {
      auto cpu = cpu::parseCpuPayload(x.payload);
      if (!cpu.ok()) {
        out << " (unreadable: " << cpu.diags().list[0].message << ")\n";
        continue;
      }
      std::string features;
      for (const std::string& f : cpu->features) features += (features.empty() ? "" : " ") + f;
      out << ", code for " << cpu->cpu << " (" << cpu->kernels.size() << " kernels, shared object "
          << cpu->sharedObject.size()
          << " bytes), needs: " << (features.empty() ? "nothing" : features) << "\n";
      size_t shown = 0;
      for (const cpu::CpuKernelInfo& k : cpu->kernels) {
        if (++shown > kMaxKernelsListed) {
          out << "    ... " << cpu->kernels.size() - kMaxKernelsListed << " more\n";
          break;
        }
        std::string push;
        for (const std::string& sym : k.symbols) push += (push.empty() ? "" : ", ") + sym;
        out << "    @" << k.name << ": " << k.args.size() << " buffers, push [" << push << "]\n";
      }
      continue;
    }
    // A GPU executable (amdgpu, cuda): each architecture's code and its kernels' launch shapes.
    if (x.target == "amdgpu" || x.target == "cuda") {
      auto gpuPayload = gpu::parseGpuPayload(x.payload);
      if (!gpuPayload.ok()) {
        out << " (unreadable: " << gpuPayload.diags().list[0].message << ")\n";
        continue;
      }
      out << "\n";
      for (const gpu::GpuImage& img : gpuPayload->images) {
        out << "    " << img.arch << ": " << img.kernels.size() << " kernels, "
            << (img.kind == gpu::GpuCodeKind::Ptx ? "PTX " : "HSA code object ") << img.code.size()
            << " bytes\n";
        size_t shown = 0;
        for (const gpu::GpuKernelInfo& k : img.kernels) {
          if (++shown > kMaxKernelsListed) {
            out << "      ... " << img.kernels.size() - kMaxKernelsListed << " more\n";
            break;
          }
          out << "      @" << k.name << ": workgroup [" << k.workgroupSize[0] << ", "
              << k.workgroupSize[1] << ", " << k.workgroupSize[2] << "], shared "
              << k.staticSharedBytes + k.dynamicSharedBytes << " bytes, kernargs " << k.kernargBytes
              << " bytes\n";
        }
      }
      continue;
    }
    // Executables whose payload is kiln IR (ref, sim) list their kernels and what each runs.
    auto kernels = parseModule(x.payload, path + ":exec." + x.target);
    if (kernels.ok()) {
      out << ", " << (*kernels)->funcs().size() << " kernels\n";
      size_t shown = 0;
      for (const auto& k : (*kernels)->funcs()) {
        if (++shown > kMaxKernelsListed) {
          out << "    ... " << (*kernels)->funcs().size() - kMaxKernelsListed << " more\n";
          break;
        }
        out << "    @" << k->name() << ":";
        for (const auto& op : k->ops())
          if (op->kind() != OpKind::Return) out << " " << op->name();
        out << "\n";
      }
    } else {
      out << "\n";
    }
  }
  out << "weights:\n";
  if (p.host->weights().empty()) out << "  (none)\n";
  for (const WeightDecl& w : p.host->weights()) {
    auto it = p.embeddedWeights.find(w.name);
    out << "  @" << w.name << " : " << w.type.str() << ", ";
    if (it != p.embeddedWeights.end())
      out << it->second.byteSize() << " bytes, embedded\n";
    else
      out << "external \"" << w.file << "\"[\"" << w.tensor << "\"]\n";
  }
  std::cout << out.str();
  return 0;
}

} // namespace kiln::cli
