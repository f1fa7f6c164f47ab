// RUN: tilefuse-opt %s --emit=graph | FileCheck %s --check-prefix=GRAPH
// RUN: tilefuse-opt %s --emit=primitive | FileCheck %s --check-prefix=PRIM
// RUN: tilefuse-opt %s --emit=fused --target=cpu | FileCheck %s --check-prefix=FUSED
// RUN: not tilefuse-opt %s --emit=llvm 2>&1 | FileCheck %s --check-prefix=LATER
// RUN: not tilefuse-opt %s --emit=bogus 2>&1 | FileCheck %s --check-prefix=BOGUS

// Each stage of the one pipeline (passes/Pipelines.cpp) can be printed.
// GRAPH: graph.softmax
// PRIM-NOT: graph.softmax
// PRIM: graph.reduce_max
// PRIM: graph.exp
// FUSED: graph.fusion "kernel0"
// FUSED-NOT: graph.fusion "kernel1"
// LATER: --emit=llvm is not available yet
// BOGUS: unknown stage --emit=bogus; expected graph, primitive or fused
func.func @softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = graph.softmax %x {dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
