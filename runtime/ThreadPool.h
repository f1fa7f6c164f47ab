//===- ThreadPool.h - a fixed set of workers for kernel grids ------*- C++ -*-===//
//
// Kernels split their programs into contiguous ranges; the caller's thread
// and the workers claim ranges until none is left, so a worker that wakes
// late costs at most its range, not a wait. A pool of N threads has N - 1
// workers. Small grids run inline: waking workers costs more than they save.
//
// A training step runs its kernels back to back, a few microseconds apart.
// Waking a sleeping thread costs tens of microseconds on a virtual machine,
// more than many of those kernels take, so workers (and a waiting caller)
// spin for a short while before they sleep, as OpenMP runtimes do.
//
// In a process where another library runs OpenMP regions between
// tilefuse's kernels (PyTorch, around the graphs its torch.compile backend
// hands over), that library's idle threads spin for milliseconds after each
// region, on the cores tilefuse's workers need. There the pool can run its
// grids on the process's OpenMP threads instead (Team::OpenMP): the threads
// that spin are then the ones that take the next grid.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_THREADPOOL_H
#define TILEFUSE_RUNTIME_THREADPOOL_H

#include <atomic>
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

  /// The threads that run a grid's ranges beside the caller: this pool's
  /// own workers, or the process's OpenMP threads (at most size(), and no
  /// more than the caller's omp_get_max_threads()). Either way one grid of
  /// this pool runs at a time.
  enum class Team { Own, OpenMP };
  /// Chooses the team; returns the one in force, which stays as it was
  /// where TILEFUSE_THREAD_POOL (own | openmp) chose it. OpenMP is refused
  /// (Own) where the build has no OpenMP or the process has loaded more
  /// than one OpenMP runtime (their threads would not be shared; counted on
  /// Linux only: elsewhere OpenMP is refused). TILEFUSE_THREAD_POOL=openmp
  /// skips that count.
  Team setTeam(Team wanted);
  Team team() const;
  /// The threads (the caller's included) a grid started on this thread
  /// runs on now.
  unsigned threadsPerGrid() const;
  /// Whether this build can run grids on OpenMP threads.
  static bool hasOpenMP();
  /// Whether this process is a child forked after its parent started grid
  /// threads (libgomp cannot start a team there).
  static bool forked();
  /// Calls fn(begin, end) over a partition of [0, n) and waits for all.
  /// Ranges hold at least `minPerRange` items (tiny grids stay on one
  /// thread); there are up to four per thread, claimed as threads get free.
  /// `fn` must not throw: it runs on other threads (and in an OpenMP
  /// region), where an exception ends the process. A grid started inside
  /// `fn`, or in a child forked after this process started grid threads,
  /// runs on the calling thread alone.
  void parallelFor(int64_t n, int64_t minPerRange,
                   const std::function<void(int64_t, int64_t)> &fn);

  /// The process-wide pool.
  static ThreadPool &global();

private:
  void workerLoop();
  /// Runs ranges of job `generation` until none is left unclaimed.
  void runRanges(uint64_t generation);

  std::vector<std::thread> workers;
  std::mutex callMutex; ///< one grid at a time, on either team
  std::mutex sleepMutex;
  std::condition_variable wake, done;

  // The current job, written by the caller before it publishes `claims`
  // and read by a thread only after it claimed one of the job's ranges
  // (the caller waits for every range, so the job cannot change under it).
  const std::function<void(int64_t, int64_t)> *task = nullptr;
  int64_t items = 0;
  /// (generation << 32) | (ranges of the job << 16) | next unclaimed range.
  std::atomic<uint64_t> claims{0};
  std::atomic<int64_t> finished{0}; ///< ranges of the current job done
  std::atomic<int> sleepingWorkers{0};
  std::atomic<bool> callerSleeping{false};
  std::atomic<bool> stopping{false};
  std::atomic<bool> openMP{false};
  bool teamFromEnvironment = false;
};

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_THREADPOOL_H
