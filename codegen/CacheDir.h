//===- CacheDir.h - where compiled code is kept between processes -*- C++ -*-===//
#ifndef TILEFUSE_CODEGEN_CACHEDIR_H
#define TILEFUSE_CODEGEN_CACHEDIR_H

#include <cstdlib>
#include <string>
#include <unistd.h>

namespace tilefuse {

/// The folder of tilefuse's disk caches (cubins, CPU machine code):
/// $TILEFUSE_CACHE_DIR, else $XDG_CACHE_HOME/tilefuse, else
/// ~/.cache/tilefuse; without a home, a folder of this user's in /tmp (not
/// one that other users share).
inline std::string cacheRoot() {
  if (const char *d = std::getenv("TILEFUSE_CACHE_DIR"); d && *d)
    return d;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/tilefuse";
  if (const char *home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/tilefuse";
  return "/tmp/tilefuse-cache-" + std::to_string(geteuid());
}

} // namespace tilefuse

#endif // TILEFUSE_CODEGEN_CACHEDIR_H
