//===- ThreadPool.cpp -----------------------------------------------------===//
#include "runtime/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef __unix__
#include <link.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#endif

using namespace tilefuse;

namespace {

// The claim word: generation (32 bits) | ranges of the job (16) | next
// unclaimed range (16). A thread checks a claim against the word alone, so
// a thread late from an earlier job can neither pass the check with the
// next job's range count nor claim in it.
constexpr int kRangeBits = 16;
constexpr uint64_t kRangeMask = (uint64_t(1) << kRangeBits) - 1;
constexpr int kGenerationShift = 2 * kRangeBits;
inline uint64_t generationOf(uint64_t c) { return c >> kGenerationShift; }
inline int64_t partsOf(uint64_t c) { return int64_t((c >> kRangeBits) & kRangeMask); }
inline int64_t nextOf(uint64_t c) { return int64_t(c & kRangeMask); }

/// Whether this process started grid threads (a pool's workers, an OpenMP
/// team), and whether it is a child forked after that: libgomp cannot start
/// a team in such a child, and the parent's workers do not exist there, so
/// its grids run on the caller alone. A child of a process that started
/// none makes its own pool as usual. Registered when the library loads.
std::atomic<bool> threadsStarted{false};
std::atomic<bool> forkedChild{false};
#if defined(__unix__) || defined(__APPLE__)
const int registerFork =
    pthread_atfork(nullptr, nullptr, [] { forkedChild = threadsStarted.load(); });
#endif

/// Whether this thread is running a range of a grid: a grid started there
/// runs inline (a second lock of the call mutex would never return).
thread_local bool inGrid = false;

/// Marks this thread as running a range while it lives.
struct InGrid {
  bool before = inGrid;
  InGrid() { inGrid = true; }
  ~InGrid() { inGrid = before; }
};

/// OpenMP runtimes loaded in this process (libgomp, under any name; LLVM's
/// libomp; Intel's libiomp5): grids share threads with another library
/// only when there is one.
int openMPRuntimesLoaded() {
  int count = 0;
#ifdef __unix__
  dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *data) {
        const char *path = info->dlpi_name ? info->dlpi_name : "";
        const char *base = std::strrchr(path, '/');
        base = base ? base + 1 : path;
        if (std::strncmp(base, "libgomp-plugin", 14) == 0) // offload plugins, not runtimes
          return 0;
        for (const char *name : {"libgomp", "libomp.", "libomp-", "libiomp5"})
          if (std::strncmp(base, name, std::strlen(name)) == 0) {
            ++*static_cast<int *>(data);
            break;
          }
        return 0;
      },
      &count);
#endif
  return count;
}

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
  if (!workers.empty())
    threadsStarted = true;
  // TILEFUSE_THREAD_POOL=own|openmp fixes the team (A/B measurements).
  const char *env = std::getenv("TILEFUSE_THREAD_POOL");
  if (env && *env) {
    bool own = std::strcmp(env, "own") == 0, omp = std::strcmp(env, "openmp") == 0;
    if (own || omp)
      teamFromEnvironment = true;
    if (!own && !(omp && hasOpenMP()))
      std::fprintf(stderr,
                   "tilefuse: TILEFUSE_THREAD_POOL=%s ignored: %s; grids run on %s\n", env,
                   omp ? "this build has no OpenMP" : "it takes 'own' or 'openmp'",
                   omp ? "tilefuse's own threads" : "the team tilefuse chooses");
    openMP = omp && hasOpenMP();
  }
}

bool ThreadPool::forked() { return forkedChild.load(); }

bool ThreadPool::hasOpenMP() {
#ifdef _OPENMP
  return true;
#else
  return false;
#endif
}

ThreadPool::Team ThreadPool::setTeam(Team wanted) {
  // OpenMP's threads are the other library's only where one runtime serves
  // the process (a second one, under another name, would be a third set of
  // threads).
  if (!teamFromEnvironment)
    openMP = wanted == Team::OpenMP && hasOpenMP() && openMPRuntimesLoaded() == 1;
  return team();
}

unsigned ThreadPool::threadsPerGrid() const {
  if (inGrid || forkedChild.load())
    return 1;
#ifdef _OPENMP
  if (team() == Team::OpenMP)
    return unsigned(std::max(1, std::min(int(size()), omp_get_max_threads())));
#endif
  return size();
}

ThreadPool::Team ThreadPool::team() const {
  return openMP.load() && !forkedChild.load() ? Team::OpenMP : Team::Own;
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
  // Never destroyed: joining the workers at exit would run their
  // thread-local state's destructors (oneDNN handles) after the libraries
  // those belong to have shut down.
  static ThreadPool *pool = new ThreadPool;
  return *pool;
}

void ThreadPool::runRanges(uint64_t generation) {
  uint64_t c = claims.load();
  while (generationOf(c) == generation && nextOf(c) < partsOf(c)) {
    if (!claims.compare_exchange_weak(c, c + 1))
      continue; // `c` now holds the current value
    // Claimed: the job cannot change before this range is finished.
    int64_t p = nextOf(c), n = partsOf(c);
    {
      InGrid scope;
      (*task)(items * p / n, items * (p + 1) / n);
    }
    // The last range done wakes a caller that went to sleep waiting.
    if (finished.fetch_add(1) + 1 == n && callerSleeping.load()) {
      std::lock_guard<std::mutex> lock(sleepMutex);
      done.notify_one();
    }
    c = claims.load();
  }
}

void ThreadPool::workerLoop() {
  // The generation the pool was made with, not the current one: a worker
  // that starts after the first grid was published must still take part.
  uint64_t seen = 0;
  for (;;) {
    auto published = [&] { return stopping.load() || generationOf(claims.load()) != seen; };
    if (!spinUntil(published)) {
      std::unique_lock<std::mutex> lock(sleepMutex);
      ++sleepingWorkers;
      wake.wait(lock, published);
      --sleepingWorkers;
    }
    if (stopping)
      return;
    seen = generationOf(claims.load());
    runRanges(seen);
  }
}

void ThreadPool::parallelFor(int64_t n, int64_t minPerRange,
                             const std::function<void(int64_t, int64_t)> &fn) {
  if (n <= 0)
    return;
  // A few ranges per thread: a thread that starts late or loses its core
  // for a while (a shared machine, another process) leaves its last ranges
  // to the others instead of holding up the whole grid. With one range per
  // thread, layer_norm's forward and backward (a 32-program kernel) took 120-124 ms against
  // 105-113 ms with four, gpt2_mini's step 15.0 ms against 13.9 (medians,
  // 2 threads, the two variants in turn in one process).
  constexpr int64_t kRangesPerThread = 4;
  int64_t ranges = std::max<int64_t>(1, n / std::max<int64_t>(1, minPerRange));
  // One thread inside a range or in a forked child; the OpenMP team's size
  // otherwise.
  int64_t threads = threadsPerGrid();
  int64_t count = threads <= 1 ? 1
                               : std::min<int64_t>({threads * kRangesPerThread, ranges,
                                                    int64_t(kRangeMask)});
  if (count <= 1) {
    InGrid scope;
    fn(0, n);
    return;
  }
  // One grid at a time: callers on other threads wait here.
  std::lock_guard<std::mutex> call(callMutex);
#ifdef _OPENMP
  if (team() == Team::OpenMP) {
    // The same claims on the process's OpenMP threads, as many as the
    // caller's OpenMP setting allows (torch.set_num_threads sets it, see
    // threadsPerGrid): a larger team would be threads beyond the ones the
    // other library keeps. The region's end is the wait for every range.
    std::atomic<int64_t> next{0};
    threadsStarted = true;
#pragma omp parallel num_threads(int(threads))
    for (int64_t p; (p = next.fetch_add(1)) < count;) {
      InGrid scope;
      fn(n * p / count, n * (p + 1) / count);
    }
    return;
  }
#endif
  task = &fn;
  items = n;
  finished = 0;
  uint64_t generation = (generationOf(claims.load()) + 1) & 0xffffffffu; // wraps in the word
  // Publishes the job (task and items are written before, read by a
  // thread only after it claimed one of its ranges).
  claims.store((generation << kGenerationShift) | (uint64_t(count) << kRangeBits));
  if (sleepingWorkers.load() > 0) {
    std::lock_guard<std::mutex> lock(sleepMutex);
    wake.notify_all();
  }
  runRanges(generation);
  auto allDone = [&] { return finished.load() == count; };
  if (!spinUntil(allDone)) {
    std::unique_lock<std::mutex> lock(sleepMutex);
    callerSleeping = true;
    done.wait(lock, allDone);
    callerSleeping = false;
  }
  task = nullptr;
}
