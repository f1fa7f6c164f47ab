// RUN: tilefuse-opt %s --emit=graph | FileCheck %s --check-prefix=GRAPH
// RUN: tilefuse-opt %s --emit=primitive | FileCheck %s --check-prefix=PRIM
// RUN: tilefuse-opt %s --emit=fused --target=cpu | FileCheck %s --check-prefix=FUSED
// RUN: tilefuse-opt %s --emit=tile | FileCheck %s --check-prefix=TILE
// RUN: tilefuse-opt %s --emit=llvm | FileCheck %s --check-prefix=LLVM
// RUN: not tilefuse-opt %s --emit=llvm --target=cuda:sm_90 2>&1 | FileCheck %s --check-prefix=LLVMCUDA
// RUN: tilefuse-opt %s --emit=cuda --target=cuda:sm_90 | FileCheck %s --check-prefix=CUDA
// RUN: tilefuse-opt %s --emit=plan | FileCheck %s --check-prefix=PLAN
// RUN: not tilefuse-opt %s --emit=bogus 2>&1 | FileCheck %s --check-prefix=BOGUS

// Each stage of the one pipeline (passes/Pipelines.cpp) can be printed.
// GRAPH: graph.softmax
// PRIM-NOT: graph.softmax
// PRIM: graph.reduce_max
// PRIM: graph.exp
// FUSED: graph.fusion "kernel0"
// FUSED-NOT: graph.fusion "kernel1"
// TILE: func.func @softmax_kernel0_{{[0-9a-f]+}}({{.*}}!tile.ptr<f32>
// TILE: tile.reduce max
// LLVM: llvm.func @softmax_kernel0_{{[0-9a-f]+}}(
// LLVMCUDA: --emit=llvm is the CPU backend's stage; use --target=cpu
// CUDA: softmax_kernel0_{{[0-9a-f]+}}: grid 1 x block 32
// PLAN: memory plan: 1 steps
// PLAN: f32[4, 8] | 128 | 0 | 0..end | forward | softmax_kernel0
// BOGUS: unknown stage --emit=bogus; expected graph, primitive, fused, tile, llvm, cuda or plan
func.func @softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = graph.softmax %x {dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
