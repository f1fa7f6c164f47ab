//===- ThreadPool.cpp -----------------------------------------------------===//
#include "runtime/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

using namespace tilefuse;

namespace {

constexpr int kRangeBits = 16;
constexpr uint64_t kRangeMask = (uint64_t(1) << kRangeBits) - 1;

/// How long an idle thread spins before it sleeps: longer than the gap
/// between two kernels of a step, far shorter than a step of Python.
constexpr std::chrono::microseconds kSpin(200);

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

/// Spins until `ready()` or kSpin has passed; true if ready.
template <typename Ready> bool spinUntil(Ready ready) {
  auto until = std::chrono::steady_clock::now() + kSpin;
  for (unsigned i = 1;; ++i) {
    if (ready())
      return true;
    relax();
    if (i % 256 == 0 && std::chrono::steady_clock::now() > until)
      return false;
  }
}

} // namespace

ThreadPool::ThreadPool(unsigned threads) {
  if (threads == 0) {
    if (const char *env = std::getenv("TILEFUSE_NUM_THREADS"))
      threads = unsigned(std::max(1, std::atoi(env)));
    else
      threads = std::max(1u, std::thread::hardware_concurrency());
  }
  threads = std::min<unsigned>(threads, unsigned(kRangeMask));
  for (unsigned i = 1; i < threads; ++i)
    workers.emplace_back([this] { workerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(sleepMutex);
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

void ThreadPool::runRanges(uint64_t generation) {
  uint64_t c = claims.load();
  while ((c >> kRangeBits) == generation && int64_t(c & kRangeMask) < parts) {
    if (!claims.compare_exchange_weak(c, c + 1))
      continue; // `c` now holds the current value
    int64_t p = int64_t(c & kRangeMask);
    (*task)(items * p / parts, items * (p + 1) / parts);
    // The last range done wakes a caller that went to sleep waiting.
    if (finished.fetch_add(1) + 1 == parts && callerSleeping.load()) {
      std::lock_guard<std::mutex> lock(sleepMutex);
      done.notify_one();
    }
    c = claims.load();
  }
}

void ThreadPool::workerLoop() {
  uint64_t seen = claims.load() >> kRangeBits;
  for (;;) {
    auto published = [&] { return stopping.load() || (claims.load() >> kRangeBits) != seen; };
    if (!spinUntil(published)) {
      std::unique_lock<std::mutex> lock(sleepMutex);
      ++sleepingWorkers;
      wake.wait(lock, published);
      --sleepingWorkers;
    }
    if (stopping)
      return;
    seen = claims.load() >> kRangeBits;
    runRanges(seen);
  }
}

void ThreadPool::parallelFor(int64_t n, int64_t minPerThread,
                             const std::function<void(int64_t, int64_t)> &fn) {
  if (n <= 0)
    return;
  int64_t count = std::min<int64_t>(size(), std::max<int64_t>(1, n / std::max<int64_t>(1, minPerThread)));
  if (count <= 1) {
    fn(0, n);
    return;
  }
  // One grid at a time: callers on other threads wait here.
  std::lock_guard<std::mutex> call(callMutex);
  task = &fn;
  items = n;
  parts = count;
  finished = 0;
  uint64_t generation = (claims.load() >> kRangeBits) + 1;
  claims.store(generation << kRangeBits); // publishes the job
  if (sleepingWorkers.load() > 0) {
    std::lock_guard<std::mutex> lock(sleepMutex);
    wake.notify_all();
  }
  runRanges(generation);
  auto allDone = [&] { return finished.load() == parts; };
  if (!spinUntil(allDone)) {
    std::unique_lock<std::mutex> lock(sleepMutex);
    callerSleeping = true;
    done.wait(lock, allDone);
    callerSleeping = false;
  }
  task = nullptr;
}
