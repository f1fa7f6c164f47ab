//===- CudaRenderer.cpp - tile kernels as CUDA C --------------------------===//
//
// A printer, no cost model (decisions were made by fusion and the tile
// lowering): one tile program is one thread block and one lane of a block is
// one thread, so a block value is a per-thread scalar and every tile op has
// a one-line C spelling, except block reductions (warp shuffles, then shared
// memory across warps; see the prelude). Values are numbered SSA-style.
//
//===----------------------------------------------------------------------===//
#include "codegen/cuda/CudaRenderer.h"

#include "ir/tile/TileDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace mlir;
using namespace tilefuse;

namespace {

/// Helpers every kernel file starts with. max/min propagate NaN (as the
/// graph dialect's maximum/minimum); block reductions leave the result in
/// every thread.
constexpr const char *kPrelude = R"(
template <typename T> __device__ __forceinline__ T tf_max(T a, T b) {
  return (a != a || b != b) ? (a + b) : (a > b ? a : b);
}
template <typename T> __device__ __forceinline__ T tf_min(T a, T b) {
  return (a != a || b != b) ? (a + b) : (a < b ? a : b);
}
template <typename T> struct tf_add_op { __device__ T operator()(T a, T b) const { return a + b; } };
template <typename T> struct tf_max_op { __device__ T operator()(T a, T b) const { return tf_max(a, b); } };
template <typename T> struct tf_min_op { __device__ T operator()(T a, T b) const { return tf_min(a, b); } };

// Folds one value per thread of the block; every thread gets the result.
// Warps reduce with shuffles, warp results meet in shared memory.
template <typename T, typename Op> __device__ T tf_block_reduce(T v, Op op) {
  __shared__ T partial[32];
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  int warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) partial[warp] = v;
  __syncthreads();
  v = partial[0];
  for (int w = 1; w < warps; ++w) v = op(v, partial[w]);
  return v;
}

// Folds a thread's own lanes.
template <typename T, int V, typename Op> __device__ __forceinline__ T tf_fold(const T (&v)[V], Op op) {
  T a = v[0];
#pragma unroll
  for (int j = 1; j < V; ++j) a = op(a, v[j]);
  return a;
}

// A thread's V consecutive lanes as one aligned memory access (V = 4 f32:
// one 128-bit load or store).
template <typename T, int V> struct alignas(sizeof(T) * V) tf_pack { T v[V]; };

// Each access of tf_load/tf_store (address, bytes, required alignment):
// nothing on a GPU; the CPU emulation of the tests checks it.
#ifndef TF_CHECK_ACCESS
#define TF_CHECK_ACCESS(pointer, bytes, alignment)
#endif

// Lanes l0..l0+V-1 of a block at p[base + lane * S], lanes from `limit` on
// masked. Contiguous (S = 1), complete and aligned: one vector access;
// otherwise one access per lane.
template <typename T, int V, long long S>
__device__ __forceinline__ void tf_load(T (&out)[V], const T *__restrict__ p, long long base,
                                        long long limit) {
  long long l0 = (long long)threadIdx.x * V;
  const T *a = p + base + l0 * S;
  if (S == 1 && l0 + V <= limit && (unsigned long long)a % sizeof(tf_pack<T, V>) == 0) {
    TF_CHECK_ACCESS(a, sizeof(tf_pack<T, V>), sizeof(tf_pack<T, V>));
    tf_pack<T, V> w = *reinterpret_cast<const tf_pack<T, V> *>(a);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = w.v[j];
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (l0 + j < limit) TF_CHECK_ACCESS(a + j * S, sizeof(T), 1);
      out[j] = l0 + j < limit ? a[j * S] : (T)0;
    }
  }
}
// Lanes l0..l0+V-1 at p[base + (lane / D) * S], only lanes in [first, limit)
// (tile.load with a first lane or a lane divisor): one access per lane.
template <typename T, int V, long long S, long long D>
__device__ __forceinline__ void tf_load_lanes(T (&out)[V], const T *__restrict__ p, long long base,
                                              long long first, long long limit) {
  long long l0 = (long long)threadIdx.x * V;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    long long l = l0 + j;
    bool on = l >= first && l < limit;
    const T *a = p + base + (l / D) * S;
    if (on) TF_CHECK_ACCESS(a, sizeof(T), 1);
    out[j] = on ? *a : (T)0;
  }
}
template <typename T, int V, long long S>
__device__ __forceinline__ void tf_store(const T (&in)[V], T *__restrict__ p, long long base,
                                         long long limit) {
  long long l0 = (long long)threadIdx.x * V;
  T *a = p + base + l0 * S;
  if (S == 1 && l0 + V <= limit && (unsigned long long)a % sizeof(tf_pack<T, V>) == 0) {
    tf_pack<T, V> w;
#pragma unroll
    for (int j = 0; j < V; ++j) w.v[j] = in[j];
    TF_CHECK_ACCESS(a, sizeof(tf_pack<T, V>), sizeof(tf_pack<T, V>));
    *reinterpret_cast<tf_pack<T, V> *>(a) = w;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (l0 + j < limit) {
        TF_CHECK_ACCESS(a + j * S, sizeof(T), 1);
        a[j * S] = in[j];
      }
  }
}
)";

class Renderer {
public:
  explicit Renderer(llvm::raw_string_ostream &os) : os(os) {}

  LogicalResult kernel(func::FuncOp f);

private:
  std::string name(Value v) {
    auto it = names.find(v);
    if (it != names.end())
      return it->second;
    std::string n = "v" + std::to_string(names.size());
    names[v] = n;
    return n;
  }
  /// Whether `v` is held as an array of `lanes` values per thread (a
  /// block value that is not the same in every lane).
  bool perLane(Value v) const {
    return lanes > 1 && llvm::isa<VectorType>(v.getType()) && !uniform.contains(v);
  }
  /// `v` at lane j of this thread.
  std::string at(Value v) { return perLane(v) ? name(v) + "[j]" : name(v); }
  std::string laneLoop() const {
    return "for (int j = 0; j < " + std::to_string(lanes) + "; ++j) ";
  }
  /// Name of an array holding `v` per lane, copying a uniform value out.
  FailureOr<std::string> laneArray(Value v, Operation *where, int indent);

  FailureOr<std::string> cType(Type t, Operation *where);
  LogicalResult op(Operation &op, int indent);
  LogicalResult block(Block &b, int indent);
  void line(int indent, const std::string &text) {
    os << std::string(indent * 2, ' ') << text << "\n";
  }
  /// `result = expr`, per lane when the result is a block value (`expr`
  /// spells lane j of its operands with at()).
  LogicalResult assign(Value result, Operation *where, int indent, const std::string &expr) {
    FailureOr<std::string> t = cType(result.getType(), where);
    if (failed(t))
      return failure();
    if (!perLane(result)) {
      line(indent, *t + " " + name(result) + " = " + expr + ";");
      return success();
    }
    line(indent, *t + " " + name(result) + "[" + std::to_string(lanes) + "];");
    line(indent, "#pragma unroll");
    line(indent, laneLoop() + name(result) + "[j] = " + expr + ";");
    return success();
  }
  LogicalResult assign(Operation &op, int indent, const std::string &expr) {
    return assign(op.getResult(0), &op, indent, expr);
  }

  llvm::raw_string_ostream &os;
  llvm::DenseMap<Value, std::string> names;
  /// Block values equal in every lane (splats), held as one scalar.
  llvm::DenseSet<Value> uniform;
  /// Lanes of a block each thread holds (cudaLanesPerThread).
  int64_t lanes = 1;
  int64_t laneCopies = 0; ///< arrays laneArray made in this kernel
};

FailureOr<std::string> Renderer::laneArray(Value v, Operation *where, int indent) {
  if (perLane(v))
    return name(v);
  FailureOr<std::string> t = cType(v.getType(), where);
  if (failed(t))
    return failure();
  // A fresh name each time: the same value may be spread in several scopes.
  std::string copy = name(v) + "_lanes" + std::to_string(laneCopies++);
  line(indent, *t + " " + copy + "[" + std::to_string(lanes) + "];");
  line(indent, "#pragma unroll");
  line(indent, laneLoop() + copy + "[j] = " + name(v) + ";");
  return copy;
}

FailureOr<std::string> Renderer::cType(Type t, Operation *where) {
  if (auto v = llvm::dyn_cast<VectorType>(t))
    t = v.getElementType();
  if (auto p = llvm::dyn_cast<tile::PtrType>(t)) {
    FailureOr<std::string> e = cType(p.getPointee(), where);
    if (failed(e))
      return failure();
    return *e + "*";
  }
  if (t.isF32()) return std::string("float");
  if (t.isF64()) return std::string("double");
  if (t.isF16()) return std::string("__half");
  if (t.isBF16()) return std::string("__nv_bfloat16");
  if (t.isInteger(1)) return std::string("bool");
  if (t.isInteger(8)) return std::string("signed char");
  if (t.isInteger(32)) return std::string("int");
  if (t.isInteger(64) || t.isIndex()) return std::string("long long");
  return where->emitOpError() << "has type " << t << ", which the CUDA renderer cannot spell";
}

std::string literal(Attribute a) {
  if (auto d = llvm::dyn_cast<SplatElementsAttr>(a))
    a = d.getSplatValue<Attribute>();
  if (auto f = llvm::dyn_cast<FloatAttr>(a)) {
    double v = f.getValueAsDouble();
    bool f32 = !f.getType().isF64();
    if (std::isnan(v))
      return f32 ? "__int_as_float(0x7fc00000)" : "__longlong_as_double(0x7ff8000000000000ll)";
    if (std::isinf(v))
      return std::string(v < 0 ? "-" : "") +
             (f32 ? "__int_as_float(0x7f800000)" : "__longlong_as_double(0x7ff0000000000000ll)");
    std::string s = llvm::formatv("{0:e17}", v).str();
    return f32 ? "float(" + s + ")" : s;
  }
  if (auto i = llvm::dyn_cast<IntegerAttr>(a)) {
    if (i.getType().isInteger(1))
      return i.getValue().isZero() ? "false" : "true";
    return std::to_string(i.getValue().getSExtValue()) + "ll";
  }
  return "";
}

std::string cmpf(arith::CmpFPredicate p, const std::string &a, const std::string &b) {
  using P = arith::CmpFPredicate;
  switch (p) {
  case P::OEQ: return a + " == " + b;
  case P::UNE: return a + " != " + b;
  case P::OLT: return a + " < " + b;
  case P::OLE: return a + " <= " + b;
  case P::OGT: return a + " > " + b;
  case P::OGE: return a + " >= " + b;
  case P::UNO: return "(" + a + " != " + a + ") || (" + b + " != " + b + ")";
  case P::ORD: return "(" + a + " == " + a + ") && (" + b + " == " + b + ")";
  default: return "";
  }
}

std::string cmpi(arith::CmpIPredicate p, const std::string &a, const std::string &b) {
  using P = arith::CmpIPredicate;
  switch (p) {
  case P::eq: return a + " == " + b;
  case P::ne: return a + " != " + b;
  case P::slt: return a + " < " + b;
  case P::sle: return a + " <= " + b;
  case P::sgt: return a + " > " + b;
  case P::sge: return a + " >= " + b;
  case P::ult: return "(unsigned long long)" + a + " < (unsigned long long)" + b;
  case P::ule: return "(unsigned long long)" + a + " <= (unsigned long long)" + b;
  case P::ugt: return "(unsigned long long)" + a + " > (unsigned long long)" + b;
  case P::uge: return "(unsigned long long)" + a + " >= (unsigned long long)" + b;
  }
  return "";
}

LogicalResult Renderer::block(Block &b, int indent) {
  for (Operation &o : b)
    if (failed(op(o, indent)))
      return failure();
  return success();
}

LogicalResult Renderer::op(Operation &o, int indent) {
  auto in = [&](unsigned i) { return at(o.getOperand(i)); };
  auto bin = [&](const char *sym) { return assign(o, indent, in(0) + " " + sym + " " + in(1)); };
  auto call = [&](const std::string &fn) {
    std::string args;
    for (unsigned i = 0; i < o.getNumOperands(); ++i)
      args += (i ? ", " : "") + in(i);
    return assign(o, indent, fn + "(" + args + ")");
  };
  auto isF32 = [&](Value v) { return getElementTypeOrSelf(v.getType()).isF32(); };
  auto unsignedOf = [&](Value v) {
    return getElementTypeOrSelf(v.getType()).isInteger(32) ? std::string("unsigned int")
                                                           : std::string("unsigned long long");
  };

  if (auto k = llvm::dyn_cast<arith::ConstantOp>(o)) {
    auto dense = llvm::dyn_cast<DenseElementsAttr>(k.getValue());
    if (dense && !dense.isSplat())
      return o.emitOpError("a non-uniform block constant has no per-thread spelling");
    if (dense)
      uniform.insert(k.getResult());
    return assign(o, indent, literal(k.getValue()));
  }
  if (llvm::isa<tile::ProgramIdOp>(o))
    return assign(o, indent, "(long long)blockIdx.x");
  if (llvm::isa<tile::LanesOp>(o))
    return assign(o, indent,
                  lanes > 1 ? "(long long)threadIdx.x * " + std::to_string(lanes) + " + j"
                            : std::string("(long long)threadIdx.x"));
  if (llvm::isa<vector::SplatOp, vector::BroadcastOp>(o)) {
    // A scalar made a block stays one scalar.
    if (!llvm::isa<VectorType>(o.getOperand(0).getType())) {
      uniform.insert(o.getResult(0));
      names[o.getResult(0)] = name(o.getOperand(0));
      return success();
    }
    return assign(o, indent, in(0));
  }
  if (auto ld = llvm::dyn_cast<tile::LoadOp>(o)) {
    FailureOr<std::string> t = cType(ld.getType(), &o);
    if (failed(t))
      return failure();
    std::string v = name(ld.getResult());
    std::string first = ld.getFirst() ? in(3) : std::string("0");
    if ((ld.getFirst() || ld.getDiv() != 1) && lanes == 1)
      return assign(o, indent,
                    "(long long)threadIdx.x >= " + first + " && (long long)threadIdx.x < " +
                        in(2) + " ? " + in(0) + "[" + in(1) + " + (long long)threadIdx.x / " +
                        std::to_string(ld.getDiv()) + "ll * " + std::to_string(ld.getStride()) +
                        "ll] : (" + *t + ")0");
    if (ld.getFirst() || ld.getDiv() != 1) {
      line(indent, *t + " " + v + "[" + std::to_string(lanes) + "];");
      line(indent, "tf_load_lanes<" + *t + ", " + std::to_string(lanes) + ", " +
                       std::to_string(ld.getStride()) + ", " + std::to_string(ld.getDiv()) +
                       ">(" + v + ", " + in(0) + ", " + in(1) + ", " + first + ", " + in(2) +
                       ");");
      return success();
    }
    if (lanes == 1)
      return assign(o, indent, "threadIdx.x < " + in(2) + " ? " + in(0) + "[" + in(1) +
                                   " + (long long)threadIdx.x * " +
                                   std::to_string(ld.getStride()) + "ll] : (" + *t + ")0");
    line(indent, *t + " " + v + "[" + std::to_string(lanes) + "];");
    line(indent, "tf_load<" + *t + ", " + std::to_string(lanes) + ", " +
                     std::to_string(ld.getStride()) + ">(" + v + ", " + in(0) + ", " + in(1) +
                     ", " + in(2) + ");");
    return success();
  }
  if (auto g = llvm::dyn_cast<tile::GatherOp>(o)) {
    FailureOr<std::string> t = cType(g.getType(), &o);
    if (failed(t))
      return failure();
    return assign(o, indent, in(2) + " ? " + in(0) + "[" + in(1) + "] : (" + *t + ")0");
  }
  if (llvm::isa<tile::LoadScalarOp>(o))
    return assign(o, indent, in(0) + "[" + in(1) + "]");
  if (auto st = llvm::dyn_cast<tile::StoreOp>(o)) {
    if (lanes == 1) {
      line(indent, "if (threadIdx.x < " + in(3) + ") " + in(1) + "[" + in(2) +
                       " + (long long)threadIdx.x * " + std::to_string(st.getStride()) +
                       "ll] = " + in(0) + ";");
      return success();
    }
    FailureOr<std::string> t = cType(st.getValue().getType(), &o);
    FailureOr<std::string> v = laneArray(st.getValue(), &o, indent);
    if (failed(t) || failed(v))
      return failure();
    line(indent, "tf_store<" + *t + ", " + std::to_string(lanes) + ", " +
                     std::to_string(st.getStride()) + ">(" + *v + ", " + in(1) + ", " + in(2) +
                     ", " + in(3) + ");");
    return success();
  }
  if (llvm::isa<tile::ScatterOp>(o)) {
    if (lanes > 1)
      line(indent, "#pragma unroll");
    line(indent, (lanes > 1 ? laneLoop() : std::string()) + "if (" + in(3) + ") " + in(1) +
                     "[" + in(2) + "] = " + in(0) + ";");
    return success();
  }
  if (llvm::isa<tile::StoreScalarOp>(o)) {
    line(indent, "if (threadIdx.x == 0) " + in(1) + "[" + in(2) + "] = " + in(0) + ";");
    return success();
  }
  if (auto r = llvm::dyn_cast<tile::ReduceOp>(o)) {
    FailureOr<std::string> t = cType(r.getType(), &o);
    if (failed(t))
      return failure();
    const char *fn = r.getKind() == tile::ReduceKind::add   ? "tf_add_op"
                     : r.getKind() == tile::ReduceKind::max ? "tf_max_op"
                                                            : "tf_min_op";
    std::string combine = std::string(fn) + "<" + *t + ">()";
    if (lanes == 1)
      return assign(o, indent, "tf_block_reduce<" + *t + ">(" + in(0) + ", " + combine + ")");
    // A thread folds its own lanes first, then the block meets.
    FailureOr<std::string> v = laneArray(r.getOperand(), &o, indent);
    if (failed(v))
      return failure();
    return assign(o, indent, "tf_block_reduce<" + *t + ">(tf_fold(" + *v + ", " + combine +
                                 "), " + combine + ")");
  }
  if (auto f = llvm::dyn_cast<scf::ForOp>(o)) {
    for (auto [arg, init] : llvm::zip(f.getRegionIterArgs(), f.getInitArgs()))
      if (failed(assign(arg, &o, indent, at(init))))
        return failure();
    std::string iv = name(f.getInductionVar());
    line(indent, "for (long long " + iv + " = " + name(f.getLowerBound()) + "; " + iv + " < " +
                     name(f.getUpperBound()) + "; " + iv + " += " + name(f.getStep()) + ") {");
    Block &body = *f.getBody();
    for (Operation &inner : body.without_terminator())
      if (failed(op(inner, indent + 1)))
        return failure();
    auto yield = llvm::cast<scf::YieldOp>(body.getTerminator());
    // Yielded values become the iteration values of the next trip.
    for (auto [arg, v] : llvm::zip(f.getRegionIterArgs(), yield.getOperands())) {
      if (perLane(arg))
        line(indent + 1, "#pragma unroll");
      line(indent + 1, (perLane(arg) ? laneLoop() : std::string()) + at(arg) + " = " + at(v) + ";");
    }
    line(indent, "}");
    for (auto [res, arg] : llvm::zip(f.getResults(), f.getRegionIterArgs()))
      names[res] = name(arg);
    return success();
  }
  if (llvm::isa<func::ReturnOp>(o)) {
    line(indent, "return;");
    return success();
  }
  // Arithmetic.
  if (llvm::isa<arith::AddFOp, arith::AddIOp>(o)) return bin("+");
  if (llvm::isa<arith::SubFOp, arith::SubIOp>(o)) return bin("-");
  if (llvm::isa<arith::MulFOp, arith::MulIOp>(o)) return bin("*");
  if (llvm::isa<arith::DivFOp, arith::DivSIOp>(o)) return bin("/");
  if (llvm::isa<arith::RemSIOp>(o)) return bin("%");
  if (llvm::isa<arith::DivUIOp, arith::RemUIOp>(o)) {
    std::string u = unsignedOf(o.getResult(0));
    return assign(o, indent, "(" + u + ")" + in(0) + (llvm::isa<arith::DivUIOp>(o) ? " / " : " % ") +
                                 "(" + u + ")" + in(1));
  }
  if (llvm::isa<arith::AndIOp>(o)) return bin(o.getResult(0).getType().isInteger(1) ||
                                              getElementTypeOrSelf(o.getResult(0).getType()).isInteger(1) ? "&&" : "&");
  if (llvm::isa<arith::OrIOp>(o)) return bin(getElementTypeOrSelf(o.getResult(0).getType()).isInteger(1) ? "||" : "|");
  if (llvm::isa<arith::XOrIOp>(o)) return bin(getElementTypeOrSelf(o.getResult(0).getType()).isInteger(1) ? "!=" : "^");
  if (llvm::isa<arith::ShLIOp>(o)) return bin("<<");
  if (llvm::isa<arith::ShRUIOp>(o)) {
    std::string u = unsignedOf(o.getResult(0));
    return assign(o, indent, "(" + u + ")" + in(0) + " >> " + in(1));
  }
  if (llvm::isa<arith::MaximumFOp, arith::MaxSIOp>(o)) return call("tf_max");
  if (llvm::isa<arith::MinimumFOp, arith::MinSIOp>(o)) return call("tf_min");
  if (llvm::isa<arith::NegFOp>(o)) return assign(o, indent, "-" + in(0));
  if (auto c = llvm::dyn_cast<arith::CmpFOp>(o)) {
    std::string e = cmpf(c.getPredicate(), in(0), in(1));
    if (e.empty())
      return o.emitOpError("has a comparison predicate the CUDA renderer does not spell");
    return assign(o, indent, e);
  }
  if (auto c = llvm::dyn_cast<arith::CmpIOp>(o))
    return assign(o, indent, cmpi(c.getPredicate(), in(0), in(1)));
  if (llvm::isa<arith::SelectOp>(o))
    return assign(o, indent, in(0) + " ? " + in(1) + " : " + in(2));
  if (auto m = llvm::dyn_cast<arith::MulUIExtendedOp>(o)) {
    if (failed(assign(m.getLow(), &o, indent,
                      "(unsigned int)" + in(0) + " * (unsigned int)" + in(1))) ||
        failed(assign(m.getHigh(), &o, indent,
                      "__umulhi((unsigned int)" + in(0) + ", (unsigned int)" + in(1) + ")")))
      return failure();
    return success();
  }
  if (llvm::isa<arith::ExtFOp, arith::TruncFOp, arith::SIToFPOp, arith::FPToSIOp,
                arith::ExtSIOp, arith::TruncIOp>(o)) {
    FailureOr<std::string> t = cType(o.getResult(0).getType(), &o);
    if (failed(t))
      return failure();
    return assign(o, indent, "(" + *t + ")(" + in(0) + ")");
  }
  if (llvm::isa<arith::UIToFPOp, arith::ExtUIOp>(o)) {
    FailureOr<std::string> t = cType(o.getResult(0).getType(), &o);
    if (failed(t))
      return failure();
    Type from = getElementTypeOrSelf(o.getOperand(0).getType());
    std::string u = from.isInteger(1) ? "bool" : from.isInteger(8) ? "unsigned char"
                    : from.isInteger(32) ? "unsigned int" : "unsigned long long";
    return assign(o, indent, "(" + *t + ")((" + u + ")" + in(0) + ")");
  }
  // Math: f32 spellings with an f suffix.
  auto math = [&](const char *fn) {
    return call(isF32(o.getResult(0)) ? std::string(fn) + "f" : std::string(fn));
  };
  if (llvm::isa<math::ExpOp>(o)) return math("exp");
  if (llvm::isa<math::LogOp>(o)) return math("log");
  if (llvm::isa<math::TanhOp>(o)) return math("tanh");
  if (llvm::isa<math::SqrtOp>(o)) return math("sqrt");
  if (llvm::isa<math::ErfOp>(o)) return math("erf");
  if (llvm::isa<math::Log1pOp>(o)) return math("log1p");
  if (llvm::isa<math::ExpM1Op>(o)) return math("expm1");
  if (llvm::isa<math::FloorOp>(o)) return math("floor");
  if (llvm::isa<arith::RemFOp>(o)) return math("fmod");
  if (llvm::isa<math::PowFOp>(o)) return math("pow");
  if (llvm::isa<math::AbsFOp>(o)) return math("fabs");
  if (llvm::isa<math::AbsIOp>(o)) return assign(o, indent, in(0) + " < 0 ? -" + in(0) + " : " + in(0));
  return o.emitOpError("has no CUDA spelling in the renderer");
}

LogicalResult Renderer::kernel(func::FuncOp f) {
  names.clear();
  uniform.clear();
  laneCopies = 0;
  int64_t blockLanes = f->getAttrOfType<IntegerAttr>(tile::kBlockAttr).getInt();
  lanes = cudaLanesPerThread(blockLanes);
  int64_t threads = blockLanes / lanes;
  // tf_block_reduce shuffles with full-warp masks: every warp of the block
  // must be whole (TargetInfo's CUDA blocks are powers of two >= 32).
  if (threads % 32 != 0 || threads > 1024)
    return f.emitError("a CUDA block of ") << blockLanes << " lanes runs " << threads
                                           << " threads; blocks must be whole warps of 32, "
                                              "at most 1024 threads";
  os << "\n// " << f.getSymName() << ": grid "
     << f->getAttrOfType<IntegerAttr>(tile::kGridAttr).getInt() << " x block " << blockLanes << " ("
     << threads << " threads x " << lanes << " lanes); fuses";
  for (Attribute a : f->getAttrOfType<ArrayAttr>(tile::kFusedOpsAttr))
    os << " " << llvm::cast<StringAttr>(a).getValue();
  os << "\nextern \"C\" __global__ void __launch_bounds__(" << threads << ") " << f.getSymName()
     << "(";
  for (BlockArgument arg : f.getArguments()) {
    FailureOr<std::string> t = cType(arg.getType(), f);
    if (failed(t))
      return failure();
    os << (arg.getArgNumber() ? ", " : "") << *t << " __restrict__ " << name(arg);
  }
  os << ") {\n";
  if (failed(block(f.getBody().front(), 1)))
    return failure();
  os << "}\n";
  return success();
}

} // namespace

namespace {
/// The prelude, and the half/bfloat16 headers only where the kernels use
/// those types (they are most of NVRTC's parsing time).
std::string withPrelude(const std::string &kernels) {
  std::string head;
  if (kernels.find("__half") != std::string::npos)
    head += "#include <cuda_fp16.h>\n";
  if (kernels.find("__nv_bfloat16") != std::string::npos)
    head += "#include <cuda_bf16.h>\n";
  return head + kPrelude + kernels;
}
} // namespace

FailureOr<std::string> tilefuse::renderCudaKernels(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  Renderer r(os);
  for (auto f : module.getOps<func::FuncOp>())
    if (f->hasAttr(tile::kKernelAttr) && failed(r.kernel(f)))
      return failure();
  return withPrelude(text);
}

FailureOr<std::vector<std::string>> tilefuse::renderCudaKernelUnits(ModuleOp module) {
  std::vector<std::string> units;
  for (auto f : module.getOps<func::FuncOp>()) {
    if (!f->hasAttr(tile::kKernelAttr))
      continue;
    std::string text;
    llvm::raw_string_ostream os(text);
    Renderer r(os);
    if (failed(r.kernel(f)))
      return failure();
    units.push_back(withPrelude(text));
  }
  return units;
}
