// RUN: tilefuse-opt %s | tilefuse-opt | FileCheck %s
//
// Round trip of graph.conv and its gradients: 2-D with stride, asymmetric
// padding and groups (depthwise), 1-D dilated, 3-D; the input gradient
// names the input's spatial size (stride 2 rounds 9 and 10 down alike).

// CHECK-LABEL: func.func @conv
// CHECK-NEXT:    graph.conv %arg0, %arg1 {dilation = array<i64: 1, 1>, groups = 4 : i64, padding_high = array<i64: 0, 1>, padding_low = array<i64: 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x9x10xf32>, tensor<8x1x3x3xf32>) -> tensor<2x8x4x5xf32>
// CHECK-NEXT:    graph.conv_grad_input %{{.*}}, %arg1 {{{.*}}input_spatial = array<i64: 9, 10>{{.*}}} : (tensor<2x8x4x5xf32>, tensor<8x1x3x3xf32>) -> tensor<2x4x9x10xf32>
// CHECK-NEXT:    graph.conv_grad_weight %arg0, %{{.*}} {{{.*}}kernel = array<i64: 3, 3>{{.*}}} : (tensor<2x4x9x10xf32>, tensor<2x8x4x5xf32>) -> tensor<8x1x3x3xf32>
// CHECK-NEXT:    graph.conv %arg2, %arg3 {dilation = array<i64: 2>, padding_high = array<i64: 0>, padding_low = array<i64: 0>, strides = array<i64: 1>} : (tensor<1x3x17xf64>, tensor<5x3x4xf64>) -> tensor<1x5x11xf64>
// CHECK-NEXT:    graph.conv %arg4, %arg5 {dilation = array<i64: 1, 1, 1>, padding_high = array<i64: 1, 1, 1>, padding_low = array<i64: 1, 1, 1>, strides = array<i64: 1, 1, 1>} : (tensor<1x2x3x4x5xf32>, tensor<2x2x3x3x3xf32>) -> tensor<1x2x3x4x5xf32>
func.func @conv(%x: tensor<2x4x9x10xf32>, %w: tensor<8x1x3x3xf32>, %x1: tensor<1x3x17xf64>, %w1: tensor<5x3x4xf64>, %x3: tensor<1x2x3x4x5xf32>, %w3: tensor<2x2x3x3x3xf32>) -> (tensor<2x4x9x10xf32>, tensor<8x1x3x3xf32>, tensor<1x5x11xf64>, tensor<1x2x3x4x5xf32>) {
  %y = graph.conv %x, %w {strides = array<i64: 2, 2>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 0, 1>, dilation = array<i64: 1, 1>, groups = 4} : (tensor<2x4x9x10xf32>, tensor<8x1x3x3xf32>) -> tensor<2x8x4x5xf32>
  %dx = graph.conv_grad_input %y, %w {strides = array<i64: 2, 2>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 0, 1>, dilation = array<i64: 1, 1>, groups = 4, input_spatial = array<i64: 9, 10>} : (tensor<2x8x4x5xf32>, tensor<8x1x3x3xf32>) -> tensor<2x4x9x10xf32>
  %dw = graph.conv_grad_weight %x, %y {strides = array<i64: 2, 2>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 0, 1>, dilation = array<i64: 1, 1>, groups = 4, kernel = array<i64: 3, 3>} : (tensor<2x4x9x10xf32>, tensor<2x8x4x5xf32>) -> tensor<8x1x3x3xf32>
  %y1 = graph.conv %x1, %w1 {strides = array<i64: 1>, padding_low = array<i64: 0>, padding_high = array<i64: 0>, dilation = array<i64: 2>} : (tensor<1x3x17xf64>, tensor<5x3x4xf64>) -> tensor<1x5x11xf64>
  %y3 = graph.conv %x3, %w3 {strides = array<i64: 1, 1, 1>, padding_low = array<i64: 1, 1, 1>, padding_high = array<i64: 1, 1, 1>, dilation = array<i64: 1, 1, 1>} : (tensor<1x2x3x4x5xf32>, tensor<2x2x3x3x3xf32>) -> tensor<1x2x3x4x5xf32>
  return %dx, %dw, %y1, %y3 : tensor<2x4x9x10xf32>, tensor<8x1x3x3xf32>, tensor<1x5x11xf64>, tensor<1x2x3x4x5xf32>
}

// Channels-last activations ([N, S..., C]); the weight keeps its layout.
// CHECK-LABEL: func.func @channels_last
// CHECK-NEXT:    graph.conv %arg0, %arg1 {channels_last = true{{.*}}} : (tensor<2x9x10x4xf32>, tensor<8x1x3x3xf32>) -> tensor<2x4x5x8xf32>
// CHECK-NEXT:    graph.conv_grad_input %{{.*}}, %arg1 {channels_last = true{{.*}}} : (tensor<2x4x5x8xf32>, tensor<8x1x3x3xf32>) -> tensor<2x9x10x4xf32>
// CHECK-NEXT:    graph.conv_grad_weight %arg0, %{{.*}} {channels_last = true{{.*}}} : (tensor<2x9x10x4xf32>, tensor<2x4x5x8xf32>) -> tensor<8x1x3x3xf32>
// CHECK-NEXT:    graph.conv_bias_act %arg0, %arg1, %arg2 {activation = "silu", channels_last = true{{.*}}} : (tensor<2x9x10x4xf32>, tensor<8x1x3x3xf32>, tensor<8xf32>) -> tensor<2x4x5x8xf32>
func.func @channels_last(%x: tensor<2x9x10x4xf32>, %w: tensor<8x1x3x3xf32>, %b: tensor<8xf32>) -> (tensor<2x9x10x4xf32>, tensor<8x1x3x3xf32>, tensor<2x4x5x8xf32>) {
  %y = graph.conv %x, %w {strides = array<i64: 2, 2>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 0, 1>, dilation = array<i64: 1, 1>, groups = 4, channels_last = true} : (tensor<2x9x10x4xf32>, tensor<8x1x3x3xf32>) -> tensor<2x4x5x8xf32>
  %dx = graph.conv_grad_input %y, %w {strides = array<i64: 2, 2>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 0, 1>, dilation = array<i64: 1, 1>, groups = 4, input_spatial = array<i64: 9, 10>, channels_last = true} : (tensor<2x4x5x8xf32>, tensor<8x1x3x3xf32>) -> tensor<2x9x10x4xf32>
  %dw = graph.conv_grad_weight %x, %y {strides = array<i64: 2, 2>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 0, 1>, dilation = array<i64: 1, 1>, groups = 4, kernel = array<i64: 3, 3>, channels_last = true} : (tensor<2x9x10x4xf32>, tensor<2x4x5x8xf32>) -> tensor<8x1x3x3xf32>
  %z = graph.conv_bias_act %x, %w, %b {strides = array<i64: 2, 2>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 0, 1>, dilation = array<i64: 1, 1>, groups = 4, activation = "silu", channels_last = true} : (tensor<2x9x10x4xf32>, tensor<8x1x3x3xf32>, tensor<8xf32>) -> tensor<2x4x5x8xf32>
  return %dx, %dw, %z : tensor<2x9x10x4xf32>, tensor<8x1x3x3xf32>, tensor<2x4x5x8xf32>
}
