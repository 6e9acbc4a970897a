// The parts of a Transport that are the same over any implementation: point-to-point calls,
// checkSame and exchangeAll on top of its primitives, and the environment it reads.
#include "runtime/dist/transport.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace kiln::dist {

Status Transport::send(int to, int tag, const void* data, uint64_t bytes, const Wait& wait) {
  return exchange({Message{to, tag, const_cast<void*>(data), bytes}}, {}, wait);
}

Status Transport::recv(int from, int tag, void* data, uint64_t bytes, const Wait& wait) {
  return exchange({}, {Message{from, tag, data, bytes}}, wait);
}

Status Transport::checkSame(uint64_t value, const Wait& wait) {
  KILN_TRY(std::vector<uint64_t> all, allGather(value, wait));
  std::string differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      differ += "; rank " + std::to_string(r) + " has " + std::to_string(all[r]);
  if (differ.empty()) return ok();
  return error(wait.loc, prefix() + wait.what + " differs between ranks: rank 0 has " +
                             std::to_string(all[0]) + differ);
}

Result<std::vector<std::vector<uint8_t>>> exchangeAll(Transport& t,
                                                      const std::vector<int>& participants,
                                                      std::vector<uint8_t> mine, int tag,
                                                      const Wait& wait) {
  auto self = std::find(participants.begin(), participants.end(), t.rank());
  if (self == participants.end())
    return error(wait.loc, t.prefix() + wait.what + ": this rank is not a participant");
  size_t me = static_cast<size_t>(self - participants.begin());
  size_t n = participants.size();
  // First the sizes, so that every receive knows its length; then the blocks.
  std::vector<uint64_t> sizes(n, 0);
  sizes[me] = mine.size();
  std::vector<Message> sends, recvs;
  for (size_t i = 0; i < n; ++i) {
    if (i == me) continue;
    sends.push_back({participants[i], tag, &sizes[me], sizeof(uint64_t)});
    recvs.push_back({participants[i], tag, &sizes[i], sizeof(uint64_t)});
  }
  KILN_CHECK(t.exchange(sends, recvs, wait));
  std::vector<std::vector<uint8_t>> blocks(n);
  sends.clear();
  recvs.clear();
  for (size_t i = 0; i < n; ++i) {
    if (i == me) continue;
    blocks[i].resize(sizes[i]);
    sends.push_back({participants[i], tag, mine.data(), mine.size()});
    recvs.push_back({participants[i], tag, blocks[i].data(), blocks[i].size()});
  }
  KILN_CHECK(t.exchange(sends, recvs, wait));
  blocks[me] = std::move(mine);
  return blocks;
}

Result<double> timeoutFromEnv() {
  const char* v = std::getenv("KILN_MPI_TIMEOUT");
  if (!v || !*v) return 60.0;
  char* end = nullptr;
  double s = std::strtod(v, &end);
  if (*end || !(s > 0) || s > 1e9)
    return error(Loc::named("KILN_MPI_TIMEOUT"),
                 "expected a number of seconds greater than 0, got '" + std::string(v) + "'");
  return s;
}

bool launchedByMpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(var); v && std::atoi(v) > 1) return true;
  return false;
}

} // namespace kiln::dist
