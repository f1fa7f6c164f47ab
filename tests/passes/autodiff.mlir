// RUN: tilefuse-opt %s "--autodiff=function=mul_sum wrt=0,1" | FileCheck %s
// RUN: tilefuse-opt %s "--autodiff=function=relu_max wrt=0" | FileCheck %s --check-prefix=TIE

// d/da sum(a * b) = b, d/db = a: the cotangent of the sum is broadcast back,
// multiplied by the other operand, and both gradients are returned after
// the loss.
// CHECK-LABEL: func.func @mul_sum_value_and_grad(
// CHECK-SAME:      %[[A:[^:]+]]: tensor<3xf32>, %[[B:[^:]+]]: tensor<3xf32>) -> (tensor<f32>, tensor<3xf32>, tensor<3xf32>)
// CHECK:         %[[M:.+]] = graph.mul %[[A]], %[[B]]
// CHECK:         %[[L:.+]] = graph.reduce_sum %[[M]]
// CHECK:         %[[ONE:.+]] = graph.full 1.000000e+00 : tensor<f32>
// CHECK:         %[[R:.+]] = graph.reshape %[[ONE]] : (tensor<f32>) -> tensor<1xf32>
// CHECK:         %[[G:.+]] = graph.broadcast_in_dim %[[R]] {dims = array<i64: 0>} : (tensor<1xf32>) -> tensor<3xf32>
// CHECK-DAG:     %[[GA:.+]] = graph.mul %[[G]], %[[B]]
// CHECK-DAG:     %[[GB:.+]] = graph.mul %[[G]], %[[A]]
// CHECK:         return %[[L]], %[[GA]], %[[GB]]
func.func @mul_sum(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<f32> {
  %0 = graph.mul %a, %b : tensor<3xf32>
  %1 = graph.reduce_sum %0 {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// maximum splits the cotangent evenly on ties (PyTorch's rule): where the
// operands are equal each gets half, where one strictly loses it gets none.
// TIE-LABEL: func.func @relu_max_value_and_grad(
// TIE:         %[[EQ:.+]] = graph.eq %arg0, %[[Z:.+]] : tensor<4xf32>
// TIE:         %[[LT:.+]] = graph.lt %arg0, %[[Z]] : tensor<4xf32>
// TIE:         %[[KEPT:.+]] = graph.select %[[LT]]
// TIE:         graph.select %[[EQ]], %{{.+}}, %[[KEPT]]
func.func @relu_max(%x: tensor<4xf32>) -> tensor<f32> {
  %z = graph.full 0.0 : tensor<4xf32>
  %0 = graph.maximum %x, %z : tensor<4xf32>
  %1 = graph.reduce_sum %0 {dims = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}
