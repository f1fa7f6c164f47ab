//===- CompileProgress.h - progress of long compiles on stderr --*- C++ -*-===//
//
// A compile that takes longer than two seconds (a deep model: hundreds of
// kernels through LLVM or NVRTC) says what it is doing on stderr: the stage
// and kernels done / total, on one line rewritten in place. Shown when
// stderr is a terminal; TILEFUSE_PROGRESS=1 shows it anywhere (logs),
// TILEFUSE_PROGRESS=0 never, TILEFUSE_PROGRESS=always from the first
// second (for tests).
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_COMPILEPROGRESS_H
#define TILEFUSE_RUNTIME_COMPILEPROGRESS_H

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace tilefuse {

class CompileProgress {
public:
  /// Starts timing the compile of `what` ("@main for cpu") and makes it the
  /// one current() returns until destroyed.
  explicit CompileProgress(std::string what);
  ~CompileProgress();
  CompileProgress(const CompileProgress &) = delete;
  CompileProgress &operator=(const CompileProgress &) = delete;

  /// The compile in progress on any thread, or null (compiles do not nest).
  static CompileProgress *current();

  /// A new stage; `kernels` > 0 starts counting kernels done out of it.
  void stage(const std::string &name, int64_t kernels = 0);
  /// `n` more kernels are done (thread-safe).
  void kernelsDone(int64_t n);

private:
  void show(); ///< with mutex held
  std::string what, stageName;
  int64_t total = 0, done = 0;
  bool printed = false;
  int mode; ///< 0 never, 1 after 2 s, 2 always
  bool terminal;
  std::chrono::steady_clock::time_point start;
  std::mutex mutex;
};

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_COMPILEPROGRESS_H
