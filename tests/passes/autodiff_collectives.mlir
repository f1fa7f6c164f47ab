// RUN: tilefuse-opt %s -split-input-file "--autodiff=function=gather wrt=0" | FileCheck %s
// RUN: tilefuse-opt %s -split-input-file "--autodiff=function=reduce wrt=0" | FileCheck %s --check-prefix=SUM
// RUN: not tilefuse-opt %s -split-input-file "--autodiff=function=largest wrt=0" 2>&1 | FileCheck %s --check-prefix=MAX

// The VJPs of collectives: all-gather's is a reduce-scatter (each rank
// gets the sum of the cotangents of its rows), a sum all-reduce's is an
// all-reduce; the wait passes cotangents through.
// CHECK-LABEL: func.func @gather_value_and_grad
// CHECK:         graph.all_gather_start %{{.+}} {group = "dp", group_size = 2 : i64} : tensor<3xf32> -> tensor<6xf32>
// CHECK:         %[[P:.+]] = graph.reduce_scatter_start %{{.+}} {group = "dp", group_size = 2 : i64} : tensor<6xf32> -> tensor<3xf32>
// CHECK:         %[[G:.+]] = graph.collective_wait %[[P]] : tensor<3xf32>
// CHECK:         return %{{.+}}, %[[G]]
func.func @gather(%x: tensor<3xf32>) -> tensor<f32> {
  %p = graph.all_gather_start %x {group = "dp", group_size = 2 : i64} : tensor<3xf32> -> tensor<6xf32>
  %w = graph.collective_wait %p : tensor<6xf32>
  %s = graph.reduce_sum %w {dims = array<i64: 0>} : (tensor<6xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// SUM-LABEL: func.func @reduce_value_and_grad
// SUM-COUNT-2: graph.all_reduce_start
func.func @reduce(%x: tensor<3xf32>) -> tensor<f32> {
  %p = graph.all_reduce_start %x {group = "dp", group_size = 2 : i64} : tensor<3xf32> -> tensor<3xf32>
  %w = graph.collective_wait %p : tensor<3xf32>
  %s = graph.reduce_sum %w {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// MAX: 'graph.all_reduce_start' op has no differentiation rule
func.func @largest(%x: tensor<3xf32>) -> tensor<f32> {
  %p = graph.all_reduce_start %x {group = "dp", group_size = 2 : i64, reduce = "max"} : tensor<3xf32> -> tensor<3xf32>
  %w = graph.collective_wait %p : tensor<3xf32>
  %s = graph.reduce_sum %w {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
