// Device targets and the resolution of device references against the declared set.
#include "ir/core/device.h"

#include <charconv>

#include "ir/core/ir.h"
#include "ir/text/printer.h"

namespace kiln {

const std::vector<std::string_view>& deviceKinds() {
  static const std::vector<std::string_view> kinds = {"ref", "sim", "cpu", "vulkan", "hip"};
  return kinds;
}

Result<DeviceTarget> parseDeviceTarget(std::string_view text, const Loc& where) {
  std::string_view kind = text.substr(0, text.find('['));
  std::string known;
  bool isKnown = false;
  for (std::string_view k : deviceKinds()) {
    known += (known.empty() ? "" : ", ") + std::string(k);
    isKnown = isKnown || k == kind;
  }
  if (!isKnown)
    return error(where, "unknown device kind '" + std::string(kind) + "' in '" + std::string(text) +
                            "' (kinds: " + known + "; write KIND[ORDINAL])");
  DeviceTarget t{std::string(kind), 0};
  if (kind.size() == text.size()) return t;
  std::string_view rest = text.substr(kind.size());
  std::string_view digits = rest.substr(1, rest.size() >= 2 ? rest.size() - 2 : 0);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), t.ordinal);
  if (rest.size() < 3 || rest.back() != ']' || ec != std::errc() ||
      end != digits.data() + digits.size() || t.ordinal < 0 || t.ordinal > 65535)
    return error(where, "bad device '" + std::string(text) +
                            "': expected KIND[ORDINAL] with an ordinal in [0, 65535], like " +
                            std::string(kind) + "[0]");
  return t;
}

namespace {

// One place in a function that names a device.
struct DeviceRef {
  DeviceTarget target;
  Loc loc;
  std::string what; // "op 'matmul' (%5)", "argument %x of @main", ...
  const Op* op = nullptr;
};

std::vector<DeviceRef> collectRefs(const Module& m) {
  std::vector<DeviceRef> refs;
  for (const auto& f : m.funcs()) {
    std::string fn = "@" + f->name();
    for (size_t i = 0; i < f->numArgs(); ++i)
      if (auto d = f->argDevice(i))
        refs.push_back({*d, f->loc(), "argument " + std::to_string(i) + " of " + fn});
    for (size_t i = 0; i < f->resultTypes().size(); ++i)
      if (auto d = f->resultDevice(i))
        refs.push_back({*d, f->loc(), "result " + std::to_string(i) + " of " + fn});
    for (const auto& op : f->ops())
      if (const auto& d = op->device())
        refs.push_back({*d, op->loc(), "op '" + std::string(op->name()) + "' in " + fn, op.get()});
  }
  return refs;
}

std::string declaredList(const Module& m) {
  std::string s;
  for (const DeviceDecl& d : m.devices()) s += (s.empty() ? "" : ", ") + d.target.str();
  return s.empty() ? "none" : s;
}

} // namespace

Status resolveDevices(Module& m, const DeviceFlags& flags) {
  for (const std::string& text : flags.devices) {
    Loc where = Loc::named("--device=" + text);
    KILN_TRY(DeviceTarget t, parseDeviceTarget(text, where));
    if (!m.findDevice(t)) KILN_CHECK(m.addDevice(DeviceDecl{"", t, where}));
  }
  std::vector<DeviceRef> refs = collectRefs(m);
  if (flags.autoDeclare)
    for (const DeviceRef& r : refs)
      if (!m.findDevice(r.target))
        KILN_CHECK(m.addDevice(DeviceDecl{"", r.target, Loc::named("--devices=auto")}));
  Diags diags;
  std::vector<DeviceTarget> reported;
  for (const DeviceRef& r : refs) {
    if (m.findDevice(r.target)) continue;
    // One error per missing device, at its first reference; the rest are counted.
    bool seen = false;
    for (const DeviceTarget& t : reported) seen = seen || t == r.target;
    if (seen) continue;
    reported.push_back(r.target);
    size_t more = 0;
    for (const DeviceRef& o : refs) more += o.target == r.target ? 1 : 0;
    std::string flag = "--device=" + r.target.str();
    Diag d = error(r.loc, r.what + " runs on device " + r.target.str() +
                              ", which is not declared; add " + flag);
    if (r.op) d.notes.push_back(note(r.op->loc(), "the op: " + printOp(*r.op)));
    if (more > 1)
      d.notes.push_back(note(r.loc, std::to_string(more - 1) + " more reference" +
                                        (more > 2 ? "s" : "") + " to " + r.target.str()));
    d.notes.push_back(note(r.loc, "declared devices: " + declaredList(m) +
                                      "; --devices=auto declares every device the program uses"));
    diags.add(std::move(d));
  }
  if (diags.hasErrors()) return diags;
  return ok();
}

} // namespace kiln
