// RUN: tilefuse-opt %s --fuse | FileCheck %s --check-prefix=FUSE
// RUN: tilefuse-opt %s --emit=tile --target=cpu | FileCheck %s
// RUN: tilefuse-opt %s --emit=cuda --target=cuda:sm_90 | FileCheck %s --check-prefix=CUDA
//
// A sum over a whole domain beside column sums of that domain (a loss's
// value beside layer_norm's dgamma and dbeta) is one kernel: the partial
// kernel folds it as column partials in the same walk over the rows, and
// program 0 of the combine kernel sums them over slices and columns (a loop
// of one trip there, none elsewhere: programs have no branches).

// FUSE-LABEL: func.func @stats(
// FUSE:         graph.fusion "kernel0"(%arg0, %arg1) {{.*}}reduced = array<i64: 0>} {{.*}} -> (tensor<96xf32>, tensor<f32>)
// FUSE-NOT:     graph.fusion
// CHECK-LABEL: func.func @stats_kernel0_partial_{{[0-9a-f]+}}(
// CHECK-COUNT-2: tile.scratch {elements = 96 : i64} : !tile.ptr<f64>
// CHECK-LABEL: func.func @stats_kernel0_combine_{{[0-9a-f]+}}(
// CHECK:         %[[PID:.*]] = tile.program_id
// CHECK:         %[[FIRST:.*]] = arith.cmpi eq, %[[PID]], %c0_i64
// CHECK:         %[[TRIPS:.*]] = arith.extui %[[FIRST]] : i1 to i64
// CHECK:         scf.for %{{.*}} = %c0_i64 to %[[TRIPS]]
// CHECK:           scf.for
// CHECK:             scf.for
// CHECK:           tile.reduce add %{{.*}} : vector<64xf64> -> f64
// CHECK:           tile.store_scalar %{{.*}}, %arg5[%c0_i64] : f32, !tile.ptr<f32>
// CUDA: stats_kernel0_partial_{{[0-9a-f]+}}: grid
// CUDA: stats_kernel0_combine_{{[0-9a-f]+}}: grid
func.func @stats(%x: tensor<4096x96xf32>, %y: tensor<4096x96xf32>) -> (tensor<96xf32>, tensor<f32>) {
  %0 = graph.mul %x, %y : tensor<4096x96xf32>
  %1 = graph.reduce_sum %0 {dims = array<i64: 0>} : (tensor<4096x96xf32>) -> tensor<96xf32>
  %2 = graph.reduce_sum %x {dims = array<i64: 0, 1>} : (tensor<4096x96xf32>) -> tensor<f32>
  return %1, %2 : tensor<96xf32>, tensor<f32>
}
