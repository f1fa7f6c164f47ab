//===- GraphBase.td - the graph dialect and its type constraints -*- tablegen -*-===//
//
// The graph dialect is tilefuse's tensor-level IR: value semantics, ranked and
// statically shaped tensors, explicit broadcasts. Every later stage (autodiff,
// fusion, codegen) relies on shapes being fully known here.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_GRAPH_BASE
#define TILEFUSE_GRAPH_BASE

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Graph_Dialect : Dialect {
  let name = "graph";
  let cppNamespace = "::tilefuse::graph";
  let summary = "Tensor-level operations of a traced training step";
  let description = [{
    Ops on ranked, statically shaped tensors of f32, f16, bf16, f64, i32, i64
    and i1. Broadcasting is never implicit: operands of elementwise ops have
    identical shapes, and `graph.broadcast_in_dim` makes every broadcast
    visible. Composite ops (softmax, layer_norm, cross_entropy, ...) exist so
    that passes can pick hand-written rules for them; `--decompose` rewrites
    them into primitives.
  }];
  let hasConstantMaterializer = 1;
}

def Graph_ElementType : AnyTypeOf<[F32, F16, BF16, F64, I32, I64, I1],
    "f32, f16, bf16, f64, i32, i64 or i1">;
def Graph_FloatType : AnyTypeOf<[F32, F16, BF16, F64], "f32, f16, bf16 or f64">;
def Graph_IndexElementType : AnyTypeOf<[I32, I64], "i32 or i64">;

class Graph_StaticTensorOf<list<Type> allowed, string what> : Type<
    And<[RankedTensorOf<allowed>.predicate, HasStaticShapePred]>,
    "statically shaped tensor of " # what, "::mlir::RankedTensorType">;

def Graph_Tensor : Graph_StaticTensorOf<[F32, F16, BF16, F64, I32, I64, I1],
    "f32, f16, bf16, f64, i32, i64 or i1">;
def Graph_FloatTensor : Graph_StaticTensorOf<[F32, F16, BF16, F64],
    "f32, f16, bf16 or f64">;
def Graph_IndexTensor : Graph_StaticTensorOf<[I32, I64], "i32 or i64">;
def Graph_BoolTensor : Graph_StaticTensorOf<[I1], "i1">;
def Graph_SeedTensor : Type<
    And<[RankedTensorOf<[I64]>.predicate,
         CPred<"::llvm::cast<::mlir::RankedTensorType>($_self).getRank() == 0">]>,
    "0-d tensor of i64 (a random seed)", "::mlir::RankedTensorType">;

#endif // TILEFUSE_GRAPH_BASE
