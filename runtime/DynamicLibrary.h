//===- DynamicLibrary.h - libraries loaded at run time ------------*- C++ -*-===//
//
// The CUDA executor's libraries (the driver, cuBLAS, cuDNN, NCCL) are
// loaded with dlopen, never linked: a build with the CUDA toolkit runs on a
// machine without them and says which one is missing. These two helpers
// find a library and look its entry points up, naming the ones it lacks.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_DYNAMICLIBRARY_H
#define TILEFUSE_RUNTIME_DYNAMICLIBRARY_H

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include <dlfcn.h>

namespace tilefuse {

/// The lib64 folders of a CUDA toolkit's libraries, which are not always on
/// the loader's path: those of the environment variables `first` names,
/// then $CUDA_HOME, $CUDA_PATH and /usr/local/cuda.
inline std::vector<std::string> cudaLibraryFolders(std::initializer_list<const char *> first = {}) {
  std::vector<std::string> folders;
  auto add = [&](const char *var) {
    if (const char *v = std::getenv(var))
      folders.push_back(std::string(v) + "/lib64");
  };
  for (const char *var : first)
    add(var);
  add("CUDA_HOME");
  add("CUDA_PATH");
  folders.push_back("/usr/local/cuda/lib64");
  return folders;
}

/// The first of `names` the loader finds (already loaded, or on its path),
/// else the first of them in one of `folders`; null when none is found.
inline void *openLibrary(std::initializer_list<const char *> names,
                         const std::vector<std::string> &folders = {}) {
  for (const char *n : names)
    if (void *lib = dlopen(n, RTLD_NOW | RTLD_LOCAL))
      return lib;
  for (const std::string &folder : folders)
    for (const char *n : names)
      if (void *lib = dlopen((folder + "/" + n).c_str(), RTLD_NOW | RTLD_LOCAL))
        return lib;
  return nullptr;
}

/// Entry points of one loaded library, looked up by name.
class SymbolTable {
public:
  explicit SymbolTable(void *library) : library(library) {}
  /// Sets `fn` to `symbol`'s address, or null (then named by missing()).
  template <typename Fn> void load(Fn &fn, const char *symbol) {
    fn = reinterpret_cast<Fn>(dlsym(library, symbol));
    if (!fn)
      missingSymbols += std::string(missingSymbols.empty() ? "" : ", ") + symbol;
  }
  /// The symbols load() did not find, comma-separated; "" when none.
  const std::string &missing() const { return missingSymbols; }

private:
  void *library;
  std::string missingSymbols;
};

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_DYNAMICLIBRARY_H
