//===- ThreadPool.h - a fixed set of workers for kernel grids ------*- C++ -*-===//
//
// Kernels split their programs into one contiguous range per worker; the
// caller's thread takes the first range, so a pool of N threads has N - 1
// workers. Small grids run inline: waking workers costs more than they save.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_THREADPOOL_H
#define TILEFUSE_RUNTIME_THREADPOOL_H

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tilefuse {

class ThreadPool {
public:
  /// `threads` = 0 uses TILEFUSE_NUM_THREADS or the machine's core count.
  explicit ThreadPool(unsigned threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  unsigned size() const { return unsigned(workers.size()) + 1; }
  /// Calls fn(begin, end) over a partition of [0, n) and waits for all.
  /// `minPerThread` keeps tiny ranges on one thread.
  void parallelFor(int64_t n, int64_t minPerThread,
                   const std::function<void(int64_t, int64_t)> &fn);

  /// The process-wide pool.
  static ThreadPool &global();

private:
  void workerLoop(unsigned index);

  std::vector<std::thread> workers;
  std::mutex mutex, callMutex;
  std::condition_variable wake, done;
  const std::function<void(int64_t, int64_t)> *task = nullptr;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  uint64_t generation = 0;
  unsigned pending = 0;
  bool stopping = false;
};

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_THREADPOOL_H
