//===- ThreadPool.cpp -----------------------------------------------------===//
#include "runtime/ThreadPool.h"

#include <algorithm>
#include <cstdlib>

using namespace tilefuse;

ThreadPool::ThreadPool(unsigned threads) {
  if (threads == 0) {
    if (const char *env = std::getenv("TILEFUSE_NUM_THREADS"))
      threads = unsigned(std::max(1, std::atoi(env)));
    else
      threads = std::max(1u, std::thread::hardware_concurrency());
  }
  for (unsigned i = 1; i < threads; ++i)
    workers.emplace_back([this, i] { workerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wake.notify_all();
  for (std::thread &t : workers)
    t.join();
}

ThreadPool &ThreadPool::global() {
  static ThreadPool pool;
  return pool;
}

void ThreadPool::workerLoop(unsigned index) {
  uint64_t seen = 0;
  for (;;) {
    std::pair<int64_t, int64_t> range;
    const std::function<void(int64_t, int64_t)> *fn;
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return stopping || generation != seen; });
      if (stopping)
        return;
      seen = generation;
      range = index < ranges.size() ? ranges[index] : std::make_pair<int64_t, int64_t>(0, 0);
      fn = task;
    }
    if (range.first < range.second)
      (*fn)(range.first, range.second);
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (--pending == 0)
        done.notify_one();
    }
  }
}

void ThreadPool::parallelFor(int64_t n, int64_t minPerThread,
                             const std::function<void(int64_t, int64_t)> &fn) {
  if (n <= 0)
    return;
  int64_t parts = std::min<int64_t>(size(), std::max<int64_t>(1, n / std::max<int64_t>(1, minPerThread)));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  // One grid at a time: callers on other threads wait here.
  std::lock_guard<std::mutex> call(callMutex);
  std::vector<std::pair<int64_t, int64_t>> split(parts);
  for (int64_t p = 0; p < parts; ++p)
    split[p] = {n * p / parts, n * (p + 1) / parts};
  {
    std::lock_guard<std::mutex> lock(mutex);
    ranges = split;
    task = &fn;
    // Workers 1..parts-1 take a range each; the others wake and go back.
    pending = unsigned(workers.size());
    ++generation;
  }
  wake.notify_all();
  fn(split[0].first, split[0].second);
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return pending == 0; });
  task = nullptr;
}
