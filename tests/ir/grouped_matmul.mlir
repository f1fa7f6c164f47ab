// RUN: tilefuse-opt %s -split-input-file -verify-diagnostics -canonicalize | FileCheck %s
// graph.grouped_matmul and its weights' gradient: the printed form with
// the inferred types, the transposed rhs folded into the op, and every
// shape error a user can hit.

// CHECK-LABEL: func.func @forms(
// CHECK:         graph.grouped_matmul %arg0, %arg1, %arg2 : (tensor<16x8xf32>, tensor<4x8x12xf32>, tensor<4xi32>) -> tensor<16x12xf32>
// CHECK:         graph.grouped_matmul_weight_grad %arg0, %arg3, %arg2 : (tensor<16x8xf32>, tensor<16x12xf32>, tensor<4xi32>) -> tensor<4x8x12xf32>
func.func @forms(%x: tensor<16x8xf32>, %w: tensor<4x8x12xf32>, %o: tensor<4xi32>, %dy: tensor<16x12xf32>) -> (tensor<16x12xf32>, tensor<4x8x12xf32>) {
  %y = graph.grouped_matmul %x, %w, %o : (tensor<16x8xf32>, tensor<4x8x12xf32>, tensor<4xi32>) -> tensor<16x12xf32>
  %dw = graph.grouped_matmul_weight_grad %x, %dy, %o : (tensor<16x8xf32>, tensor<16x12xf32>, tensor<4xi32>) -> tensor<4x8x12xf32>
  return %y, %dw : tensor<16x12xf32>, tensor<4x8x12xf32>
}

// -----

// A transposed rhs is read in place: transpose_rhs, [G, N, K].
// CHECK-LABEL: func.func @transposed(
// CHECK-NEXT:    %0 = graph.grouped_matmul %arg0, %arg1, %arg2 {transpose_rhs = true} : (tensor<16x8xf32>, tensor<4x12x8xf32>, tensor<4xi32>) -> tensor<16x12xf32>
// CHECK-NEXT:    return %0
func.func @transposed(%x: tensor<16x8xf32>, %w: tensor<4x12x8xf32>, %o: tensor<4xi32>) -> tensor<16x12xf32> {
  %t = graph.transpose %w {perm = array<i64: 0, 2, 1>} : (tensor<4x12x8xf32>) -> tensor<4x8x12xf32>
  %y = graph.grouped_matmul %x, %t, %o : (tensor<16x8xf32>, tensor<4x8x12xf32>, tensor<4xi32>) -> tensor<16x12xf32>
  return %y : tensor<16x12xf32>
}

// -----

// A weight gradient transposed is the one with its operands swapped.
// CHECK-LABEL: func.func @transposed_weight_grad(
// CHECK-NEXT:    %0 = graph.grouped_matmul_weight_grad %arg1, %arg0, %arg2 : (tensor<16x12xf32>, tensor<16x8xf32>, tensor<4xi32>) -> tensor<4x12x8xf32>
// CHECK-NEXT:    return %0
func.func @transposed_weight_grad(%x: tensor<16x8xf32>, %dy: tensor<16x12xf32>, %o: tensor<4xi32>) -> tensor<4x12x8xf32> {
  %dw = graph.grouped_matmul_weight_grad %x, %dy, %o : (tensor<16x8xf32>, tensor<16x12xf32>, tensor<4xi32>) -> tensor<4x8x12xf32>
  %t = graph.transpose %dw {perm = array<i64: 0, 2, 1>} : (tensor<4x8x12xf32>) -> tensor<4x12x8xf32>
  return %t : tensor<4x12x8xf32>
}

// -----

func.func @inner(%x: tensor<16x8xf32>, %w: tensor<4x7x12xf32>, %o: tensor<4xi64>) -> tensor<16x12xf32> {
  // expected-error @+2 {{'graph.grouped_matmul' op lhs 'tensor<16x8xf32>' and rhs 'tensor<4x7x12xf32>' must agree on K (lhs dim 1, rhs dim 1)}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.grouped_matmul %x, %w, %o : (tensor<16x8xf32>, tensor<4x7x12xf32>, tensor<4xi64>) -> tensor<16x12xf32>
  return %y : tensor<16x12xf32>
}

// -----

func.func @offsets(%x: tensor<16x8xf32>, %w: tensor<4x8x12xf32>, %o: tensor<3xi32>) -> tensor<16x12xf32> {
  // expected-error @+2 {{'graph.grouped_matmul' op offsets 'tensor<3xi32>' must be [4] (one end offset per group)}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.grouped_matmul %x, %w, %o : (tensor<16x8xf32>, tensor<4x8x12xf32>, tensor<3xi32>) -> tensor<16x12xf32>
  return %y : tensor<16x12xf32>
}

// -----

func.func @rank(%x: tensor<2x16x8xf32>, %w: tensor<4x8x12xf32>, %o: tensor<4xi32>) -> tensor<16x12xf32> {
  // expected-error @+2 {{'graph.grouped_matmul' op lhs must be [S, K], got 'tensor<2x16x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.grouped_matmul %x, %w, %o : (tensor<2x16x8xf32>, tensor<4x8x12xf32>, tensor<4xi32>) -> tensor<16x12xf32>
  return %y : tensor<16x12xf32>
}

// -----

func.func @types(%x: tensor<16x8xf32>, %w: tensor<4x8x12xbf16>, %o: tensor<4xi32>) -> tensor<16x12xf32> {
  // expected-error @+2 {{'graph.grouped_matmul' op operands 'tensor<16x8xf32>' and 'tensor<4x8x12xbf16>' must have the same element type}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.grouped_matmul %x, %w, %o : (tensor<16x8xf32>, tensor<4x8x12xbf16>, tensor<4xi32>) -> tensor<16x12xf32>
  return %y : tensor<16x12xf32>
}

// -----

func.func @float_offsets(%x: tensor<16x8xf32>, %w: tensor<4x8x12xf32>, %o: tensor<4xf32>) -> tensor<16x12xf32> {
  // expected-error @+1 {{'graph.grouped_matmul' op operand #2 must be statically shaped tensor of i32 or i64}}
  %y = graph.grouped_matmul %x, %w, %o : (tensor<16x8xf32>, tensor<4x8x12xf32>, tensor<4xf32>) -> tensor<16x12xf32>
  return %y : tensor<16x12xf32>
}

// -----

func.func @grad_rows(%x: tensor<16x8xf32>, %dy: tensor<15x12xf32>, %o: tensor<4xi32>) -> tensor<4x8x12xf32> {
  // expected-error @+2 {{'graph.grouped_matmul_weight_grad' op grad must be [S, N] with the lhs's S = 16, got 'tensor<15x12xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %dw = graph.grouped_matmul_weight_grad %x, %dy, %o : (tensor<16x8xf32>, tensor<15x12xf32>, tensor<4xi32>) -> tensor<4x8x12xf32>
  return %dw : tensor<4x8x12xf32>
}
