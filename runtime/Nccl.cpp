//===- Nccl.cpp -----------------------------------------------------------===//
#include "runtime/Nccl.h"
#include "runtime/DynamicLibrary.h"

#include <cstring>

using namespace tilefuse;

namespace {

// NCCL 2's stable ABI (nccl.h), declared here: the toolkit does not ship
// NCCL's header, and the library is only loaded at run time.
using ncclResult_t = int;
struct ncclUniqueId {
  char internal[128];
};
enum : int { ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt64 = 4, ncclFloat16 = 6,
             ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 };
enum : int { ncclSum = 0, ncclMax = 2, ncclMin = 3 };

struct Api {
  ncclResult_t (*getUniqueId)(ncclUniqueId *) = nullptr;
  ncclResult_t (*commInitRank)(void **, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*commDestroy)(void *) = nullptr;
  ncclResult_t (*allReduce)(const void *, void *, size_t, int, int, void *, void *) = nullptr;
  ncclResult_t (*broadcast)(const void *, void *, size_t, int, int, void *, void *) = nullptr;
  ncclResult_t (*reduceScatter)(const void *, void *, size_t, int, int, void *, void *) = nullptr;
  ncclResult_t (*allGather)(const void *, void *, size_t, int, void *, void *) = nullptr;
  const char *(*getErrorString)(ncclResult_t) = nullptr;
  std::string unavailable;

  static Api &get() {
    static Api api;
    return api;
  }

private:
  Api() {
    void *lib = openLibrary({"libnccl.so.2", "libnccl.so"});
    if (!lib) {
      unavailable = "NCCL is not installed (libnccl.so.2 cannot be loaded; PyTorch's CUDA "
                    "wheels bring it: import torch first, or add its folder to "
                    "LD_LIBRARY_PATH)";
      return;
    }
    SymbolTable symbols(lib);
    symbols.load(getUniqueId, "ncclGetUniqueId");
    symbols.load(commInitRank, "ncclCommInitRank");
    symbols.load(commDestroy, "ncclCommDestroy");
    symbols.load(allReduce, "ncclAllReduce");
    symbols.load(broadcast, "ncclBroadcast");
    symbols.load(reduceScatter, "ncclReduceScatter");
    symbols.load(allGather, "ncclAllGather");
    symbols.load(getErrorString, "ncclGetErrorString");
    if (!symbols.missing().empty())
      unavailable = "NCCL is too old (libnccl.so.2 lacks " + symbols.missing() + ")";
  }
};

Api &api() {
  Api &a = Api::get();
  if (!a.unavailable.empty())
    throw CompileError("collectives on the GPU: " + a.unavailable);
  return a;
}

void check(ncclResult_t rc, const std::string &what) {
  if (rc == 0)
    return;
  const char *text = Api::get().getErrorString ? Api::get().getErrorString(rc) : nullptr;
  throw CompileError("NCCL: " + what + " failed: " + (text ? text : "error") + " (" +
                     std::to_string(rc) + ")");
}

int ncclType(DType t) {
  switch (t) {
  case DType::F32: return ncclFloat32;
  case DType::F64: return ncclFloat64;
  case DType::F16: return ncclFloat16;
  case DType::BF16: return ncclBfloat16;
  case DType::I32: return ncclInt32;
  case DType::I64: return ncclInt64;
  case DType::I1: return ncclUint8;
  }
  return ncclInt8;
}

} // namespace

std::string nccl::unavailableReason() { return Api::get().unavailable; }

std::string nccl::uniqueId() {
  ncclUniqueId id;
  check(api().getUniqueId(&id), "making a unique id");
  return std::string(id.internal, sizeof(id.internal));
}

nccl::Comm::Comm(const std::string &uniqueId, int64_t rank, int64_t size)
    : rank_(rank), size_(size) {
  if (uniqueId.size() != sizeof(ncclUniqueId))
    throw CompileError("NCCL: a unique id has " + std::to_string(sizeof(ncclUniqueId)) +
                       " bytes, got " + std::to_string(uniqueId.size()));
  if (rank < 0 || rank >= size)
    throw CompileError("NCCL: rank " + std::to_string(rank) + " of " + std::to_string(size));
  ncclUniqueId id;
  std::memcpy(id.internal, uniqueId.data(), sizeof(id.internal));
  check(api().commInitRank(&comm, int(size), id, int(rank)),
        "joining the communicator as rank " + std::to_string(rank) + " of " +
            std::to_string(size));
}

nccl::Comm::~Comm() {
  if (comm)
    Api::get().commDestroy(comm);
}

void nccl::Comm::enqueue(const CollectiveParams &c, DType dtype, uint64_t input, uint64_t output,
                         int64_t inputElements, int64_t outputElements, void *stream) {
  Api &a = api();
  auto in = reinterpret_cast<const void *>(input);
  auto out = reinterpret_cast<void *>(output);
  int type = ncclType(dtype);
  int op = c.reduce == ReduceOp::Max ? ncclMax : c.reduce == ReduceOp::Min ? ncclMin : ncclSum;
  std::string what = collectiveName(c.kind);
  switch (c.kind) {
  case CollectiveKind::AllReduce:
    check(a.allReduce(in, out, size_t(outputElements), type, op, comm, stream), what);
    break;
  case CollectiveKind::Broadcast:
    check(a.broadcast(in, out, size_t(outputElements), type, int(c.root), comm, stream), what);
    break;
  case CollectiveKind::ReduceScatter:
    check(a.reduceScatter(in, out, size_t(outputElements), type, op, comm, stream), what);
    break;
  case CollectiveKind::AllGather:
    check(a.allGather(in, out, size_t(inputElements), type, comm, stream), what);
    break;
  }
}
