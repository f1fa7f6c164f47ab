//===- CompileProgress.cpp ------------------------------------------------===//
#include "runtime/CompileProgress.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

using namespace tilefuse;

namespace {
std::atomic<CompileProgress *> active{nullptr};

/// 0 never, 1 after two seconds, 2 always.
int modeFromEnvironment(bool terminal) {
  const char *v = std::getenv("TILEFUSE_PROGRESS");
  if (!v || !*v)
    return terminal ? 1 : 0;
  if (!std::strcmp(v, "always"))
    return 2;
  return std::strcmp(v, "0") ? 1 : 0;
}
} // namespace

CompileProgress::CompileProgress(std::string what)
    : what(std::move(what)), terminal(isatty(2)), start(std::chrono::steady_clock::now()) {
  mode = modeFromEnvironment(terminal);
  active.store(this);
}

CompileProgress::~CompileProgress() {
  active.store(nullptr);
  if (!printed)
    return;
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "%stilefuse: compiled %s in %.1f s%s\n", terminal ? "\r\033[K" : "",
               what.c_str(), s, "");
}

CompileProgress *CompileProgress::current() { return active.load(); }

void CompileProgress::stage(const std::string &name, int64_t kernels) {
  std::lock_guard<std::mutex> lock(mutex);
  stageName = name;
  total = kernels;
  done = 0;
  show();
}

void CompileProgress::kernelsDone(int64_t n) {
  std::lock_guard<std::mutex> lock(mutex);
  done += n;
  show();
}

void CompileProgress::show() {
  if (mode == 0)
    return;
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (mode == 1 && s < 2.0)
    return;
  char counts[64] = "";
  if (total > 0)
    std::snprintf(counts, sizeof counts, " (%lld/%lld kernels)", (long long)done,
                  (long long)total);
  // A terminal gets one line rewritten in place; a log one line per update.
  std::fprintf(stderr, "%stilefuse: compiling %s: %s%s, %.1f s%s", terminal ? "\r\033[K" : "",
               what.c_str(), stageName.c_str(), counts, s, terminal ? "" : "\n");
  std::fflush(stderr);
  printed = true;
}
