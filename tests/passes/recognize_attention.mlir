// RUN: tilefuse-opt %s --recognize-attention --canonicalize | FileCheck %s
// RUN: tilefuse-opt %s --recognize-attention "--autodiff=function=causal_loss wrt=0,1,2" | FileCheck %s --check-prefix=GRAD
//
// Attention written out with matmul and softmax becomes graph.attention:
// the causal triangle becomes the flag, another constant mask the mask
// operand; chains it cannot prove equal are left alone.

// gpt2_mini's form: transpose, matmul, scale, select against -1e9 with the
// causal triangle, softmax, matmul.
// CHECK-LABEL: func.func @causal
// CHECK-NEXT:    %[[O:.*]], %{{.*}} = graph.attention %arg0, %arg1, %arg2 {causal = true, scale = 2.500000e-01 : f64}
// CHECK-NEXT:    return %[[O]]
func.func @causal(%q: tensor<2x4x3x16xf32>, %k: tensor<2x4x3x16xf32>, %v: tensor<2x4x3x8xf32>) -> tensor<2x4x3x8xf32> {
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x3x16xf32>) -> tensor<2x4x16x3xf32>
  %s = graph.matmul %q, %kt : (tensor<2x4x3x16xf32>, tensor<2x4x16x3xf32>) -> tensor<2x4x3x3xf32>
  %c = graph.full 2.500000e-01 : tensor<2x4x3x3xf32>
  %s2 = graph.mul %s, %c : tensor<2x4x3x3xf32>
  %m = graph.constant dense<[[true, false, false], [true, true, false], [true, true, true]]> : tensor<3x3xi1>
  %mb = graph.broadcast_in_dim %m {dims = array<i64: 2, 3>} : (tensor<3x3xi1>) -> tensor<2x4x3x3xi1>
  %fill = graph.full -1.000000e+09 : tensor<2x4x3x3xf32>
  %w = graph.select %mb, %s2, %fill : (tensor<2x4x3x3xi1>, tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  %p = graph.softmax %w {dim = 3 : i64} : (tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  %o = graph.matmul %p, %v : (tensor<2x4x3x3xf32>, tensor<2x4x3x8xf32>) -> tensor<2x4x3x8xf32>
  return %o : tensor<2x4x3x8xf32>
}

// Another constant mask (every row keeps a key) and K^T as a matmul flag,
// no scale.
// CHECK-LABEL: func.func @masked
// CHECK:         %[[M:.*]] = graph.reshape %{{.*}} : (tensor<2x3xi1>) -> tensor<1x1x2x3xi1>
// CHECK-NEXT:    %[[O:.*]], %{{.*}} = graph.attention %arg0, %arg1, %arg2, %[[M]] {scale = 1.000000e+00 : f64}
func.func @masked(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x3x4xf32>, %v: tensor<1x2x3x4xf32>) -> tensor<1x2x2x4xf32> {
  %s = graph.matmul %q, %k {transpose_rhs = true} : (tensor<1x2x2x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x2x3xf32>
  %m = graph.constant dense<[[true, false, true], [false, true, true]]> : tensor<2x3xi1>
  %mb = graph.broadcast_in_dim %m {dims = array<i64: 2, 3>} : (tensor<2x3xi1>) -> tensor<1x2x2x3xi1>
  %fill = graph.full 0xFFF0000000000000 : tensor<1x2x2x3xf32>
  %w = graph.select %mb, %s, %fill : (tensor<1x2x2x3xi1>, tensor<1x2x2x3xf32>, tensor<1x2x2x3xf32>) -> tensor<1x2x2x3xf32>
  %p = graph.softmax %w {dim = 3 : i64} : (tensor<1x2x2x3xf32>) -> tensor<1x2x2x3xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x2x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x2x4xf32>
  return %o : tensor<1x2x2x4xf32>
}

// Left alone: a row that keeps no key (written out it averages every key,
// fused it would be 0), a fill that is not far enough below, and
// probabilities used twice.
// CHECK-LABEL: func.func @refused
// CHECK-NOT:     graph.attention
// CHECK:         return
func.func @refused(%q: tensor<1x1x2x4xf32>, %k: tensor<1x1x2x4xf32>, %v: tensor<1x1x2x4xf32>) -> (tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>, tensor<1x1x2x2xf32>) {
  %s = graph.matmul %q, %k {transpose_rhs = true} : (tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x2xf32>
  %m = graph.constant dense<[[[[true, false], [false, false]]]]> : tensor<1x1x2x2xi1>
  %fill = graph.full -1.000000e+09 : tensor<1x1x2x2xf32>
  %w = graph.select %m, %s, %fill : (tensor<1x1x2x2xi1>, tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %p = graph.softmax %w {dim = 3 : i64} : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %o = graph.matmul %p, %v : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  %s1 = graph.matmul %q, %k {transpose_rhs = true} : (tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x2xf32>
  %m1 = graph.constant dense<[[[[true, false], [true, true]]]]> : tensor<1x1x2x2xi1>
  %near = graph.full -1.000000e+04 : tensor<1x1x2x2xf32>
  %w1 = graph.select %m1, %s1, %near : (tensor<1x1x2x2xi1>, tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %p1 = graph.softmax %w1 {dim = 3 : i64} : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %o1 = graph.matmul %p1, %v : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  %s2 = graph.matmul %q, %k {transpose_rhs = true} : (tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x2xf32>
  %p2 = graph.softmax %s2 {dim = 3 : i64} : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32>
  %o2 = graph.matmul %p2, %v : (tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32>
  return %o, %o1, %o2, %p2 : tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>, tensor<1x1x2x2xf32>
}

// Recognized before differentiation, the backward is graph.attention_grad
// reading the forward's output and log-sum-exp.
// GRAD-LABEL: func.func @causal_loss_value_and_grad
// GRAD:         %[[O:.*]], %[[LSE:.*]] = graph.attention %arg0, %arg1, %arg2 {causal = true, scale = 5.000000e-01 : f64}
// GRAD:         %{{.*}}, %{{.*}}, %{{.*}} = graph.attention_grad %arg0, %arg1, %arg2, %[[O]], %[[LSE]], %{{.*}} {causal = true, scale = 5.000000e-01 : f64}
func.func @causal_loss(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x2x4xf32>, %v: tensor<1x2x2x4xf32>) -> tensor<f32> {
  %s = graph.matmul %q, %k {transpose_rhs = true} : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x2xf32>
  %c = graph.full 5.000000e-01 : tensor<1x2x2x2xf32>
  %s2 = graph.mul %c, %s : tensor<1x2x2x2xf32>
  %m = graph.constant dense<[[true, false], [true, true]]> : tensor<2x2xi1>
  %mb = graph.broadcast_in_dim %m {dims = array<i64: 2, 3>} : (tensor<2x2xi1>) -> tensor<1x2x2x2xi1>
  %fill = graph.full 0xFFF0000000000000 : tensor<1x2x2x2xf32>
  %w = graph.select %mb, %s2, %fill : (tensor<1x2x2x2xi1>, tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %p = graph.softmax %w {dim = 3 : i64} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x2x2xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %l = graph.reduce_sum %o {dims = array<i64: 0, 1, 2, 3>} : (tensor<1x2x2x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
