//===- CacheDir.h - where compiled code is kept between processes -*- C++ -*-===//
#ifndef TILEFUSE_CODEGEN_CACHEDIR_H
#define TILEFUSE_CODEGEN_CACHEDIR_H

#include <cstdlib>
#include <string>

namespace tilefuse {

/// The folder of tilefuse's disk caches (cubins, CPU machine code):
/// $TILEFUSE_CACHE_DIR, else $XDG_CACHE_HOME/tilefuse, else
/// ~/.cache/tilefuse.
inline std::string cacheRoot() {
  if (const char *d = std::getenv("TILEFUSE_CACHE_DIR"); d && *d)
    return d;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/tilefuse";
  const char *home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/tilefuse";
}

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CACHEDIR_H
