// RUN: tilefuse-opt %s -split-input-file -verify-diagnostics | FileCheck %s
// graph.sort: the printed form with the inferred types (values of the
// operand's type, i64 indices), and the shape errors a user can hit.

// CHECK-LABEL: func.func @sort(
// CHECK:         graph.sort %arg0 {descending = true} : (tensor<2x9xf32>) -> (tensor<2x9xf32>, tensor<2x9xi64>)
func.func @sort(%x: tensor<2x9xf32>) -> (tensor<2x9xf32>, tensor<2x9xi64>) {
  %v, %i = graph.sort %x {descending = true} : (tensor<2x9xf32>) -> (tensor<2x9xf32>, tensor<2x9xi64>)
  return %v, %i : tensor<2x9xf32>, tensor<2x9xi64>
}

// -----

func.func @sort_scalar(%x: tensor<f32>) -> (tensor<f32>, tensor<i64>) {
  // expected-error @+2 {{'graph.sort' op sorts along the last dimension: the operand must have rank >= 1, got 'tensor<f32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %v, %i = graph.sort %x : (tensor<f32>) -> (tensor<f32>, tensor<i64>)
  return %v, %i : tensor<f32>, tensor<i64>
}
