// The executor's side of running over ranks: device ownership, the module check, the inputs
// of each call, and buffers that cross ranks.
#include "runtime/dist/ranks.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <xxhash.h>

#include "runtime/module_format.h"

namespace kiln::dist {

Result<std::unique_ptr<Ranks>> Ranks::create(std::shared_ptr<Transport> transport,
                                             const Program& program) {
  auto r = std::unique_ptr<Ranks>(new Ranks());
  size_t n = static_cast<size_t>(transport->size()), d = program.devices.size();
  Loc loc = Loc::named("mpi");
  for (const std::string& spec : program.devices) {
    KILN_TRY(hal::DeviceId id, hal::parseDeviceId(spec, loc));
    r->devices_.push_back(id);
  }
  if (n > 1 && (d == 0 || d % n != 0)) {
    std::string list;
    for (const std::string& s : program.devices) list += " " + s;
    return error(loc, transport->prefix() + "the module runs on " + std::to_string(d) +
                          (d == 1 ? " device" : " devices") +
                          (list.empty() ? "" : " (" + list.substr(1) + ")") +
                          ", which do not split evenly over " + std::to_string(n) +
                          " ranks; run it with a number of ranks that divides " +
                          std::to_string(d));
  }
  r->transport_ = std::move(transport);
  const char* killRank = std::getenv("KILN_TEST_KILL_RANK");
  if (killRank && *killRank && std::atoi(killRank) == r->rank()) {
    const char* step = std::getenv("KILN_TEST_KILL_STEP");
    r->killStep_ = step ? std::atoi(step) : 0;
  }
  return r;
}

int Ranks::owner(const hal::DeviceId& device) const {
  size_t n = static_cast<size_t>(transport_->size()), d = devices_.size();
  for (size_t i = 0; i < d; ++i)
    if (devices_[i] == device) return static_cast<int>(i * n / d);
  return 0;
}

std::vector<int> Ranks::participants(const std::vector<hal::DeviceId>& devices) const {
  std::vector<bool> in(static_cast<size_t>(transport_->size()), false);
  for (const hal::DeviceId& d : devices) in[static_cast<size_t>(owner(d))] = true;
  std::vector<int> out;
  for (size_t r = 0; r < in.size(); ++r)
    if (in[r]) out.push_back(static_cast<int>(r));
  return out;
}

Result<std::vector<std::vector<uint8_t>>>
Ranks::gatherBlocks(const std::vector<hal::DeviceId>& devices,
                    std::vector<std::vector<uint8_t>> local, int tag, const Wait& wait) {
  if (local.size() != devices.size())
    return error(wait.loc, transport_->prefix() + wait.what + ": " + std::to_string(local.size()) +
                               " blocks for " + std::to_string(devices.size()) + " devices");
  // This rank's blocks, in device order, each after its size.
  std::vector<uint8_t> mine;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (owner(devices[i]) != rank()) continue;
    uint64_t n = local[i].size();
    const auto* p = reinterpret_cast<const uint8_t*>(&n);
    mine.insert(mine.end(), p, p + sizeof n);
    mine.insert(mine.end(), local[i].begin(), local[i].end());
  }
  std::vector<int> ranks = participants(devices);
  KILN_TRY(std::vector<std::vector<uint8_t>> packed,
           exchangeAll(*transport_, ranks, std::move(mine), tag, wait));
  std::vector<size_t> at(packed.size(), 0);
  for (size_t i = 0; i < devices.size(); ++i) {
    int o = owner(devices[i]);
    size_t p = static_cast<size_t>(std::find(ranks.begin(), ranks.end(), o) - ranks.begin());
    if (o == rank()) continue; // already in `local`
    const std::vector<uint8_t>& b = packed[p];
    uint64_t n = 0;
    if (at[p] + sizeof n > b.size())
      return error(wait.loc, transport_->prefix() + wait.what + ": rank " + std::to_string(o) +
                                 " sent fewer blocks than it owns");
    std::memcpy(&n, b.data() + at[p], sizeof n);
    at[p] += sizeof n;
    if (n > b.size() - at[p])
      return error(wait.loc, transport_->prefix() + wait.what + ": a block of rank " +
                                 std::to_string(o) + " is cut short");
    local[i].assign(b.begin() + static_cast<ptrdiff_t>(at[p]),
                    b.begin() + static_cast<ptrdiff_t>(at[p] + n));
    at[p] += n;
  }
  return local;
}

Status Ranks::checkModule(const Program& program) {
  // The module as a .kmod file holds it: its schedule, executables, weights (embedded, or
  // the paths of the files they are read from) and devices.
  KILN_TRY(std::string bytes, serializeProgram(program));
  return transport_->checkSame(XXH3_64bits(bytes.data(), bytes.size()),
                               Wait{Loc::named("mpi"), "the module (its hash)"});
}

Status Ranks::shareInputs(std::vector<HostTensor>& inputs, const Loc& loc) {
  // A header of u64s: count, then per input its element type, rank and dims; then each
  // input's bytes.
  std::vector<uint64_t> header;
  if (rank() == 0) {
    header.push_back(inputs.size());
    for (const HostTensor& t : inputs) {
      header.push_back(static_cast<uint64_t>(t.elem()));
      header.push_back(t.shape().size());
      for (int64_t d : t.shape()) header.push_back(static_cast<uint64_t>(d));
    }
  }
  Wait wait{loc, "receiving the inputs from rank 0"};
  uint64_t words = header.size();
  KILN_CHECK(transport_->broadcast(0, &words, sizeof words, wait));
  if (words > (uint64_t{1} << 32))
    return error(loc, transport_->prefix() + "the inputs' description is too large");
  header.resize(words);
  KILN_CHECK(transport_->broadcast(0, header.data(), words * sizeof(uint64_t), wait));
  if (rank() != 0) {
    std::vector<HostTensor> received;
    size_t at = 1;
    auto next = [&]() { return at < header.size() ? header[at++] : 0; };
    for (uint64_t i = 0; i < header[0]; ++i) {
      auto elem = static_cast<ElemType>(next());
      uint64_t rankOf = next();
      std::vector<int64_t> shape;
      for (uint64_t k = 0; k < rankOf; ++k) shape.push_back(static_cast<int64_t>(next()));
      received.push_back(HostTensor::uninitialized(elem, std::move(shape)));
    }
    inputs = std::move(received);
  }
  for (HostTensor& t : inputs)
    KILN_CHECK(transport_->broadcast(0, t.mutableData(), t.byteSize(), wait));
  return ok();
}

Status Ranks::sendBuffer(hal::Buffer& buffer, int to, int tag, const Wait& wait) {
  if (const uint8_t* p = buffer.map()) return transport_->send(to, tag, p, buffer.byteSize(), wait);
  std::vector<uint8_t> staging(buffer.byteSize());
  KILN_CHECK(buffer.read(0, staging.data(), staging.size()));
  return transport_->send(to, tag, staging.data(), staging.size(), wait);
}

Status Ranks::recvBuffer(hal::Buffer& buffer, int from, int tag, const Wait& wait) {
  if (uint8_t* p = buffer.map()) return transport_->recv(from, tag, p, buffer.byteSize(), wait);
  std::vector<uint8_t> staging(buffer.byteSize());
  KILN_CHECK(transport_->recv(from, tag, staging.data(), staging.size(), wait));
  return buffer.write(0, staging.data(), staging.size());
}

void Ranks::maybeKillAt(size_t step) const {
  if (killStep_ >= 0 && static_cast<size_t>(killStep_) == step) std::raise(SIGKILL);
}

} // namespace kiln::dist
