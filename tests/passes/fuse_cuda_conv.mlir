// RUN: tilefuse-opt %s --split-input-file --verify-diagnostics --fuse=target=cuda:sm_90 | FileCheck %s
// CUDA runs graph.conv and its gradients through cuDNN: fusion keeps them
// as library calls between the kernels around them; cuDNN pads both sides
// of a dimension alike, so unequal padding is refused with the way out.

// CHECK-LABEL: func.func @kept(
// CHECK:         graph.conv %arg0, %arg1
// CHECK:         graph.fusion
// CHECK:         graph.conv_grad_weight %arg0,
// CHECK:         return
func.func @kept(%x: tensor<2x4x9x10xf32>, %w: tensor<8x1x3x3xf32>) -> (tensor<2x8x5x5xf32>, tensor<8x1x3x3xf32>) {
  %y = graph.conv %x, %w {strides = array<i64: 2, 2>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 4} : (tensor<2x4x9x10xf32>, tensor<8x1x3x3xf32>) -> tensor<2x8x5x5xf32>
  %r = graph.maximum %y, %y : tensor<2x8x5x5xf32>
  %dw = graph.conv_grad_weight %x, %r {strides = array<i64: 2, 2>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 4, kernel = array<i64: 3, 3>} : (tensor<2x4x9x10xf32>, tensor<2x8x5x5xf32>) -> tensor<8x1x3x3xf32>
  return %r, %dw : tensor<2x8x5x5xf32>, tensor<8x1x3x3xf32>
}

// -----

func.func @unequal(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x2x2xf32>) -> tensor<2x4x8x8xf32> {
  // expected-error @+1 {{'graph.conv' op pads its input by [0, 0] before and [1, 1] after, which cuDNN cannot (one padding per dimension) for cuda:sm_90: pad the input first (F.pad) and convolve with equal padding, or compile for the CPU}}
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x2x2xf32>) -> tensor<2x4x8x8xf32>
  return %y : tensor<2x4x8x8xf32>
}
