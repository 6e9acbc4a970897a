// parallelFor: runs tasks 0..n-1 on up to `jobs` threads (the calling thread is one of them)
// and returns each task's result in task order, so what the caller builds from them does not
// depend on the thread count. A failed task fails nothing else: the results say which failed.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "ir/core/diag.h"

namespace kiln {

// The thread count `jobs` asks for: itself when positive, else the hardware's threads.
unsigned resolveJobs(unsigned jobs);

template <typename T>
std::vector<Result<T>> parallelFor(size_t n, unsigned jobs,
                                   const std::function<Result<T>(size_t)>& task) {
  std::vector<std::optional<Result<T>>> slots(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) slots[i].emplace(task(i));
  };
  size_t threads = std::min<size_t>(resolveJobs(jobs), n);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break; // no more threads: the ones running (at least this one) do every task
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  std::vector<Result<T>> out;
  out.reserve(n);
  for (auto& s : slots) out.push_back(std::move(*s));
  return out;
}

} // namespace kiln
