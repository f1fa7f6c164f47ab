// RUN: tilefuse-opt %s --decompose-composites --emit=tile --target=cpu | FileCheck %s
// RUN: tilefuse-opt %s --decompose-composites --emit=tile --target=cuda:sm_90 | FileCheck %s --check-prefix=CUDA
//
// CPU row kernels are compute-bound: a value that one pass over the row
// computes and a later pass reads again is kept in a scratch row
// (TargetInfo::rowScratchBytes), and a block divided by a row's sum is
// multiplied by its reciprocal. GPU programs recompute (memory-bound).

// softmax: exp(x - max) is stored by the sum's pass (1000 = 31 blocks of
// 32 and a masked tail of 8) and loaded by the output's pass.
// CHECK-LABEL: func.func @softmax_kernel0_{{[0-9a-f]+}}(
// CHECK:         %[[ROW:.*]] = tile.scratch {elements = 1000 : i64} : !tile.ptr<f32>
// CHECK:         tile.reduce max
// CHECK:         scf.for
// CHECK:           math.exp
// CHECK:           tile.store %{{.*}}, %[[ROW]][%{{.*}}], %{{.*}}
// CHECK:         tile.reduce add
// CHECK:         scf.for
// CHECK-NOT:       math.exp
// CHECK:           tile.load %[[ROW]]
// CHECK:           arith.divf %{{.*}}, %{{.*}} : f32
// CHECK-NOT:       arith.divf
// CHECK:           arith.mulf %{{.*}}, %{{.*}} : vector<32xf32>
// CHECK:         return
// CUDA-LABEL: func.func @softmax_kernel0_{{[0-9a-f]+}}(
// CUDA-NOT:      tile.scratch
// CUDA-COUNT-2:  math.exp
func.func @softmax(%x: tensor<64x1000xf32>) -> tensor<64x1000xf32> {
  %0 = graph.softmax %x {dim = 1 : i64} : (tensor<64x1000xf32>) -> tensor<64x1000xf32>
  return %0 : tensor<64x1000xf32>
}

// log_softmax reads exp only in the sum: nothing to keep.
// CHECK-LABEL: func.func @log_softmax_kernel0_{{[0-9a-f]+}}(
// CHECK-NOT:     tile.scratch
// CHECK:         return
func.func @log_softmax(%x: tensor<64x1000xf32>) -> tensor<64x1000xf32> {
  %0 = graph.log_softmax %x {dim = 1 : i64} : (tensor<64x1000xf32>) -> tensor<64x1000xf32>
  return %0 : tensor<64x1000xf32>
}

// A column reduction split into slices of rows: each program walks its
// rows in memory order, in groups of 4 rows: for every block of the 1024
// columns the group folds into f64 registers (the inner loop's iteration
// values), added once to the accumulators kept in a scratch row.
// CHECK-LABEL: func.func @columns_kernel0_partial_{{[0-9a-f]+}}(
// CHECK:         %[[ACC:.*]] = tile.scratch {elements = 1024 : i64} : !tile.ptr<f64>
// CHECK:         scf.for
// CHECK:           tile.store %{{.*}}, %[[ACC]]
// CHECK:         scf.for %[[G:.*]] = %c0_i64 to
// CHECK:           arith.minsi
// CHECK:           scf.for
// CHECK:             %[[SUM:.*]] = scf.for {{.*}} iter_args({{.*}}) -> (vector<{{[0-9]+}}xf64>)
// CHECK:               tile.load %arg0
// CHECK-NOT:           tile.load %[[ACC]]
// CHECK:               scf.yield
// CHECK:             %[[OLD:.*]] = tile.load %[[ACC]]
// CHECK:             %[[NEW:.*]] = arith.addf %[[OLD]], %[[SUM]]
// CHECK:             tile.store %[[NEW]], %[[ACC]]
// CHECK:         scf.for
// CHECK:           tile.load %[[ACC]]
// CHECK:           tile.store %{{.*}}, %arg1
// CHECK-LABEL: func.func @columns_kernel0_combine_{{[0-9a-f]+}}(
func.func @columns(%x: tensor<65536x1024xf32>) -> tensor<1024xf32> {
  %0 = graph.reduce_sum %x {dims = array<i64: 0>} : (tensor<65536x1024xf32>) -> tensor<1024xf32>
  return %0 : tensor<1024xf32>
}
