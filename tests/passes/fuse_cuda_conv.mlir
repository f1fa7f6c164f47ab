// RUN: tilefuse-opt %s --split-input-file --verify-diagnostics --fuse=target=cuda:sm_90 | FileCheck %s
// CUDA runs graph.conv and its gradients through cuDNN: fusion keeps them
// as library calls between the kernels around them; cuDNN pads both sides
// of a dimension alike, so unequal padding is written out as zeros.

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

// Unequal padding: the common part stays the convolution's, the rest is
// zeros concatenated to the input (a kernel of its own before each
// convolution that reads the input: recomputed for the weight's gradient
// rather than kept alive from the forward pass); the input's gradient is
// computed for the padded input and cut back to the input's size.
// CHECK-LABEL: func.func @unequal(
// CHECK:         %[[P:.*]] = graph.fusion "kernel0"(%arg0) {domain = array<i64: 2, 3, 9, 9>
// CHECK:           graph.full 0.{{0+}}e+00 : tensor<2x3x1x8xf32>
// CHECK:           graph.concat {{.*}} {dim = 2 : i64}
// CHECK:           graph.full 0.{{0+}}e+00 : tensor<2x3x9x1xf32>
// CHECK:           graph.concat {{.*}} {dim = 3 : i64}
// CHECK:         graph.conv %[[P]], %arg1 {{{.*}}padding_high = array<i64: 0, 0>, padding_low = array<i64: 0, 0>
// CHECK:         %[[DX:.*]] = graph.conv_grad_input %arg2, %arg1 {{{.*}}input_spatial = array<i64: 9, 9>, padding_high = array<i64: 0, 0>, padding_low = array<i64: 0, 0>{{.*}} -> tensor<2x3x9x9xf32>
// CHECK:         graph.fusion "kernel1"(%[[DX]])
// CHECK:           graph.slice %{{.*}} {limit = array<i64: 2, 3, 8, 8>, start = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1, 1, 1>}
// CHECK:         %[[P2:.*]] = graph.fusion "kernel2"(%arg0)
// CHECK:         graph.conv_grad_weight %[[P2]], %arg2 {{{.*}}padding_high = array<i64: 0, 0>, padding_low = array<i64: 0, 0>
func.func @unequal(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x2x2xf32>, %dy: tensor<2x4x8x8xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x3x8x8xf32>, tensor<4x3x2x2xf32>) {
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x2x2xf32>) -> tensor<2x4x8x8xf32>
  %dx = graph.conv_grad_input %dy, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>, input_spatial = array<i64: 8, 8>} : (tensor<2x4x8x8xf32>, tensor<4x3x2x2xf32>) -> tensor<2x3x8x8xf32>
  %dw = graph.conv_grad_weight %x, %dy {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>, kernel = array<i64: 2, 2>} : (tensor<2x3x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<4x3x2x2xf32>
  return %y, %dx, %dw : tensor<2x4x8x8xf32>, tensor<2x3x8x8xf32>, tensor<4x3x2x2xf32>
}

// -----

// Padding on one side larger than on the other in one dim only (stride 2,
// 'same'-like): the common padding stays, one zero row is added before.
// CHECK-LABEL: func.func @mixed(
// CHECK:         %[[P:.*]] = graph.fusion "kernel0"(%arg0) {domain = array<i64: 1, 2, 8, 7>
// CHECK:           graph.concat %{{.*}}, %{{.*}} {dim = 2 : i64} : (tensor<1x2x1x7xf32>, tensor<1x2x7x7xf32>) -> tensor<1x2x8x7xf32>
// CHECK:         graph.conv %[[P]], %arg1 {{{.*}}padding_high = array<i64: 1, 1>, padding_low = array<i64: 1, 1>
func.func @mixed(%x: tensor<1x2x7x7xf32>, %w: tensor<3x2x3x3xf32>) -> tensor<1x3x4x4xf32> {
  %y = graph.conv %x, %w {strides = array<i64: 2, 2>, padding_low = array<i64: 2, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x2x7x7xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x4x4xf32>
  return %y : tensor<1x3x4x4xf32>
}

// -----

// cuDNN applies no epilogue here: a hand-written graph.conv_bias_act is
// refused with the way out.
func.func @epilogue(%x: tensor<1x2x6x6xf32>, %w: tensor<4x2x3x3xf32>, %b: tensor<4xf32>) -> tensor<1x4x4x4xf32> {
  // expected-error @+1 {{'graph.conv_bias_act' op has no library call for cuda:sm_90, whose convolutions apply no epilogue; write graph.conv followed by the bias and activation ops (fusion runs them as a kernel)}}
  %y = graph.conv_bias_act %x, %w, %b {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>, activation = "relu"} : (tensor<1x2x6x6xf32>, tensor<4x2x3x3xf32>, tensor<4xf32>) -> tensor<1x4x4x4xf32>
  return %y : tensor<1x4x4x4xf32>
}

// -----

// Channels-last activations are a layout fusion chooses for the CPU's
// convolutions; cuDNN is given channels-first ones: refused with the way
// out.
func.func @channels_last(%x: tensor<1x6x6x2xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x4x4xf32> {
  // expected-error @+1 {{'graph.conv' op has channels-last activations, which cuda:sm_90's convolutions do not take; write it channels-first (fusion chooses the layout each target runs best)}}
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>, channels_last = true} : (tensor<1x6x6x2xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x4x4xf32>
  return %y : tensor<1x4x4x4xf32>
}
