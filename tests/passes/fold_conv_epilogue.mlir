// RUN: env TILEFUSE_CHANNELS_LAST=0 tilefuse-opt %s --split-input-file --verify-diagnostics --fuse=target=cpu | FileCheck %s
// On the CPU oneDNN applies a convolution's per-channel bias and its
// activation while it writes the output: fusion folds a bias, an inference
// batch norm (its scale into the weight, its shift into the bias) and a
// silu into graph.conv_bias_act instead of running them as a kernel. relu
// stays a kernel: oneDNN's relu makes a NaN 0, where relu keeps it.

// Inference batch norm + relu (select(x <= 0, 0, x), as traced): the
// per-channel scale and shift in a kernel over [8], the scale applied to
// the weight in a kernel over it; the relu a kernel of its own.
// CHECK-LABEL: func.func @batch_norm_relu(
// CHECK:         %[[ST:.*]]:2 = graph.fusion "kernel0"({{.*}}) {domain = array<i64: 1, 8, 1, 1>
// CHECK:           graph.rsqrt
// CHECK:           graph.neg
// CHECK:         %[[W:.*]] = graph.fusion "kernel1"(%arg1, {{.*}}) {domain = array<i64: 8, 3, 3, 3>
// CHECK:           graph.broadcast_in_dim {{.*}} {dims = array<i64: 0>} : (tensor<8xf32>) -> tensor<8x3x3x3xf32>
// CHECK:         %[[Y:.*]] = graph.conv_bias_act %arg0, %[[W]], %[[ST]]#1 {dilation
// CHECK:         %[[R:.*]] = graph.fusion "kernel2"(%[[Y]]) {domain = array<i64: 2, 8, 16, 16>
// CHECK:           graph.select
// CHECK:         return %[[R]]
func.func @batch_norm_relu(%x: tensor<2x3x16x16xf32>, %w: tensor<8x3x3x3xf32>, %mean: tensor<8xf32>, %var: tensor<8xf32>, %gamma: tensor<8xf32>, %beta: tensor<8xf32>) -> tensor<2x8x16x16xf32> {
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<2x3x16x16xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x16x16xf32>
  %m4 = graph.reshape %mean : (tensor<8xf32>) -> tensor<1x8x1x1xf32>
  %mb = graph.broadcast_in_dim %m4 {dims = array<i64: 0, 1, 2, 3>} : (tensor<1x8x1x1xf32>) -> tensor<2x8x16x16xf32>
  %c = graph.sub %y, %mb : tensor<2x8x16x16xf32>
  %v4 = graph.reshape %var : (tensor<8xf32>) -> tensor<1x8x1x1xf32>
  %eps = graph.full 1.0e-05 : tensor<1x8x1x1xf32>
  %ve = graph.add %v4, %eps : tensor<1x8x1x1xf32>
  %r = graph.rsqrt %ve : tensor<1x8x1x1xf32>
  %rb = graph.broadcast_in_dim %r {dims = array<i64: 0, 1, 2, 3>} : (tensor<1x8x1x1xf32>) -> tensor<2x8x16x16xf32>
  %n = graph.mul %c, %rb : tensor<2x8x16x16xf32>
  %g4 = graph.reshape %gamma : (tensor<8xf32>) -> tensor<1x8x1x1xf32>
  %gb = graph.broadcast_in_dim %g4 {dims = array<i64: 0, 1, 2, 3>} : (tensor<1x8x1x1xf32>) -> tensor<2x8x16x16xf32>
  %s = graph.mul %gb, %n : tensor<2x8x16x16xf32>
  %b4 = graph.reshape %beta : (tensor<8xf32>) -> tensor<1x8x1x1xf32>
  %bb = graph.broadcast_in_dim %b4 {dims = array<i64: 0, 1, 2, 3>} : (tensor<1x8x1x1xf32>) -> tensor<2x8x16x16xf32>
  %t = graph.add %s, %bb : tensor<2x8x16x16xf32>
  %zero = graph.full 0.0 : tensor<2x8x16x16xf32>
  %le = graph.le %t, %zero : tensor<2x8x16x16xf32>
  %out = graph.select %le, %zero, %t : (tensor<2x8x16x16xi1>, tensor<2x8x16x16xf32>, tensor<2x8x16x16xf32>) -> tensor<2x8x16x16xf32>
  return %out : tensor<2x8x16x16xf32>
}

// -----

// A bias ([8] viewed as [8, 1, 1]) and silu: the bias read as it is, no
// kernel at all.
// CHECK-LABEL: func.func @bias_silu(
// CHECK-NOT:     graph.fusion
// CHECK:         %[[Y:.*]] = graph.conv_bias_act %arg0, %arg1, %arg2 {activation = "silu"
// CHECK-NEXT:    return %[[Y]]
func.func @bias_silu(%x: tensor<2x3x8x8xf32>, %w: tensor<8x3x3x3xf32>, %b: tensor<8xf32>) -> tensor<2x8x8x8xf32> {
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x8x8xf32>
  %b3 = graph.reshape %b : (tensor<8xf32>) -> tensor<8x1x1xf32>
  %bb = graph.broadcast_in_dim %b3 {dims = array<i64: 1, 2, 3>} : (tensor<8x1x1xf32>) -> tensor<2x8x8x8xf32>
  %z = graph.add %y, %bb : tensor<2x8x8x8xf32>
  %sg = graph.sigmoid %z : tensor<2x8x8x8xf32>
  %out = graph.mul %z, %sg : tensor<2x8x8x8xf32>
  return %out : tensor<2x8x8x8xf32>
}

// -----

// A 1x1 stride-1 convolution runs on the plain layouts, where oneDNN's
// GEMM-based convolution applies an epilogue slower than a kernel does:
// kept a kernel.
// CHECK-LABEL: func.func @pointwise(
// CHECK:         %[[Y:.*]] = graph.conv %arg0, %arg1
// CHECK:         graph.fusion "kernel0"(%[[Y]], %arg2)
// CHECK-NOT:     graph.conv_bias_act
func.func @pointwise(%x: tensor<2x3x8x8xf32>, %w: tensor<8x3x1x1xf32>, %b: tensor<8xf32>) -> tensor<2x8x8x8xf32> {
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>, tensor<8x3x1x1xf32>) -> tensor<2x8x8x8xf32>
  %bb = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<8xf32>) -> tensor<2x8x8x8xf32>
  %z = graph.add %y, %bb : tensor<2x8x8x8xf32>
  %sg = graph.sigmoid %z : tensor<2x8x8x8xf32>
  %out = graph.mul %z, %sg : tensor<2x8x8x8xf32>
  return %out : tensor<2x8x8x8xf32>
}

// -----

// relu as max(y, 0) straight after the convolution, then a scalar scale
// that follows the activation: nothing folds (relu is no affine map, and
// oneDNN's relu would make a NaN 0).
// CHECK-LABEL: func.func @relu_then_scale(
// CHECK:         %[[Y:.*]] = graph.conv %arg0, %arg1
// CHECK:         graph.fusion "kernel0"(%[[Y]])
// CHECK:           graph.maximum
// CHECK-NOT:     graph.conv_bias_act
func.func @relu_then_scale(%x: tensor<1x2x6x6xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x4x4xf32> {
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x2x6x6xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x4x4xf32>
  %zero = graph.full 0.0 : tensor<1x4x4x4xf32>
  %r = graph.maximum %y, %zero : tensor<1x4x4x4xf32>
  %three = graph.full 3.0 : tensor<1x4x4x4xf32>
  %out = graph.mul %r, %three : tensor<1x4x4x4xf32>
  return %out : tensor<1x4x4x4xf32>
}

// -----

// Nothing to fold: the output is read twice (a batch norm in training
// reads it for its statistics), a shift of the other sign (v - y), a
// per-sample rather than per-channel value, a 16-bit convolution.
// CHECK-LABEL: func.func @kept(
// CHECK-NOT:     graph.conv_bias_act
// CHECK:         return
func.func @kept(%x: tensor<2x3x8x8xf32>, %w: tensor<8x3x3x3xf32>, %b: tensor<8xf32>, %p: tensor<2xf32>, %xh: tensor<2x3x8x8xbf16>, %wh: tensor<8x3x3x3xbf16>, %bh: tensor<8xbf16>) -> (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xbf16>) {
  %bb = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<8xf32>) -> tensor<2x8x8x8xf32>
  %y1 = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x8x8xf32>
  %s1 = graph.add %y1, %bb : tensor<2x8x8x8xf32>
  %o1 = graph.mul %s1, %y1 : tensor<2x8x8x8xf32>
  %y2 = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x8x8xf32>
  %o2 = graph.sub %bb, %y2 : tensor<2x8x8x8xf32>
  %pb = graph.broadcast_in_dim %p {dims = array<i64: 0>} : (tensor<2xf32>) -> tensor<2x8x8x8xf32>
  %y3 = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x8x8xf32>
  %o3 = graph.mul %y3, %pb : tensor<2x8x8x8xf32>
  %bhb = graph.broadcast_in_dim %bh {dims = array<i64: 1>} : (tensor<8xbf16>) -> tensor<2x8x8x8xbf16>
  %y4 = graph.conv %xh, %wh {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<2x3x8x8xbf16>, tensor<8x3x3x3xbf16>) -> tensor<2x8x8x8xbf16>
  %o4 = graph.add %y4, %bhb : tensor<2x8x8x8xbf16>
  return %o1, %o2, %o3, %o4 : tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xbf16>
}

// -----

// A scale whose weight is not small beside the output (16x16x3x3 against
// 1x16x4x4: scaling it on every call moves more than the epilogue kernel
// does): kept a kernel. A bias alone folds whatever the weight's size.
// CHECK-LABEL: func.func @large_weight(
// CHECK:         %[[Y:.*]] = graph.conv %arg0, %arg1
// CHECK:         graph.fusion "kernel0"(%[[Y]], %arg2)
// CHECK:           graph.mul
// CHECK:         graph.conv_bias_act %arg0, %arg1, %arg2 {dilation
func.func @large_weight(%x: tensor<1x16x4x4xf32>, %w: tensor<16x16x3x3xf32>, %s: tensor<16xf32>) -> (tensor<1x16x4x4xf32>, tensor<1x16x4x4xf32>) {
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x16x4x4xf32>, tensor<16x16x3x3xf32>) -> tensor<1x16x4x4xf32>
  %sb = graph.broadcast_in_dim %s {dims = array<i64: 1>} : (tensor<16xf32>) -> tensor<1x16x4x4xf32>
  %o1 = graph.mul %y, %sb : tensor<1x16x4x4xf32>
  %y2 = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x16x4x4xf32>, tensor<16x16x3x3xf32>) -> tensor<1x16x4x4xf32>
  %o2 = graph.add %y2, %sb : tensor<1x16x4x4xf32>
  return %o1, %o2 : tensor<1x16x4x4xf32>, tensor<1x16x4x4xf32>
}
