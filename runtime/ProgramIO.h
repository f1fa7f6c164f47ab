//===- ProgramIO.h - Programs as bytes ------------------------------*- C++ -*-===//
//
// A versioned, checksummed binary form of a Program, so a program compiled
// on one machine runs on another (the runtime reads it without MLIR).
//
//   "TFPROGRM" | u32 version | u64 payload bytes | u64 FNV-1a of payload | payload
//
// All integers little-endian. Reading checks everything: magic, version,
// size, checksum, every length and index; a bad file is a CompileError
// that says which.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_PROGRAMIO_H
#define TILEFUSE_RUNTIME_PROGRAMIO_H

#include "runtime/Program.h"

#include <string>

namespace tilefuse {

constexpr uint32_t kProgramFormatVersion = 12;

std::string serializeProgram(const Program &program);
/// Throws CompileError for anything that is not a valid program of this
/// format version.
Program deserializeProgram(const std::string &bytes);

/// 64-bit FNV-1a, the checksum of the format.
uint64_t fnv1a64(const void *data, size_t size);

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_PROGRAMIO_H
