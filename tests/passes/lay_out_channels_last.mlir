// RUN: tilefuse-opt %s --split-input-file --lay-out-channels-last=weigh-costs=false | FileCheck %s
// RUN: tilefuse-opt %s --split-input-file --lay-out-channels-last | FileCheck %s --check-prefix=COST
// Convolutions take channels-last activations ([N, H, W, C]) and the ops
// around them run on that layout as they are: the statistics of a batch
// norm reduce [N, H, W] with the channels innermost, a per-channel vector
// broadcasts onto the innermost dimension, a skip connection concatenates
// along it. Transposes remain where a value enters or leaves the region.

// conv -> batch statistics -> centre -> relu -> conv: one transpose in (the
// image), one out (the result), none between.
// CHECK-LABEL: func.func @conv_norm_relu_conv(
// COST-LABEL:  func.func @conv_norm_relu_conv(
// COST-NOT:    channels_last
// COST:         return
// CHECK:         %[[X:.*]] = graph.transpose %arg0 {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x3x16x16xf32>) -> tensor<2x16x16x3xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.conv %[[X]], %arg1 {channels_last = true{{.*}}} : (tensor<2x16x16x3xf32>, tensor<8x3x3x3xf32>) -> tensor<2x16x16x8xf32>
// CHECK-NEXT:    %[[S:.*]] = graph.reduce_sum %[[Y]] {dims = array<i64: 0, 1, 2>} : (tensor<2x16x16x8xf32>) -> tensor<8xf32>
// CHECK-NEXT:    %[[SB:.*]] = graph.broadcast_in_dim %[[S]] {dims = array<i64: 3>} : (tensor<8xf32>) -> tensor<2x16x16x8xf32>
// CHECK-NEXT:    %[[C:.*]] = graph.sub %[[Y]], %[[SB]] : tensor<2x16x16x8xf32>
// CHECK-NEXT:    %[[ZERO:.*]] = graph.full {{.*}} : tensor<2x16x16x8xf32>
// CHECK-NEXT:    %[[LE:.*]] = graph.le %[[C]], %[[ZERO]] : tensor<2x16x16x8xf32>
// CHECK-NEXT:    %[[R:.*]] = graph.select %[[LE]], %[[ZERO]], %[[C]] : (tensor<2x16x16x8xi1>, tensor<2x16x16x8xf32>, tensor<2x16x16x8xf32>) -> tensor<2x16x16x8xf32>
// CHECK-NEXT:    %[[Z:.*]] = graph.conv %[[R]], %arg2 {channels_last = true{{.*}}} : (tensor<2x16x16x8xf32>, tensor<4x8x1x1xf32>) -> tensor<2x16x16x4xf32>
// CHECK-NEXT:    %[[OUT:.*]] = graph.transpose %[[Z]] {perm = array<i64: 0, 3, 1, 2>} : (tensor<2x16x16x4xf32>) -> tensor<2x4x16x16xf32>
// CHECK-NEXT:    return %[[OUT]]
func.func @conv_norm_relu_conv(%x: tensor<2x3x16x16xf32>, %w: tensor<8x3x3x3xf32>, %w2: tensor<4x8x1x1xf32>) -> tensor<2x4x16x16xf32> {
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<2x3x16x16xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x16x16xf32>
  %s = graph.reduce_sum %y {dims = array<i64: 0, 2, 3>} : (tensor<2x8x16x16xf32>) -> tensor<8xf32>
  %sb = graph.broadcast_in_dim %s {dims = array<i64: 1>} : (tensor<8xf32>) -> tensor<2x8x16x16xf32>
  %c = graph.sub %y, %sb : tensor<2x8x16x16xf32>
  %zero = graph.full 0.0 : tensor<2x8x16x16xf32>
  %le = graph.le %c, %zero : tensor<2x8x16x16xf32>
  %r = graph.select %le, %zero, %c : (tensor<2x8x16x16xi1>, tensor<2x8x16x16xf32>, tensor<2x8x16x16xf32>) -> tensor<2x8x16x16xf32>
  %z = graph.conv %r, %w2 {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<2x8x16x16xf32>, tensor<4x8x1x1xf32>) -> tensor<2x4x16x16xf32>
  return %z : tensor<2x4x16x16xf32>
}

// -----

// The backward of a convolution: both gradients read the output gradient
// channels-last; the weight's gradient keeps the weight's layout. A
// reduction reads its operand as it is held (here the argument, as it
// is), and its per-channel [1, C, 1, 1] result is read channels-last as
// [1, 1, 1, C]: a reshape, not a transpose.
// CHECK-LABEL: func.func @conv_grads(
// COST-LABEL:  func.func @conv_grads(
// COST-NOT:    channels_last
// COST:         return
// CHECK:         %[[M:.*]] = graph.reduce_sum %arg0 {dims = array<i64: 0, 2, 3>, keepdim = true} : (tensor<2x8x8x8xf32>) -> tensor<1x8x1x1xf32>
// CHECK-NEXT:    %[[ML:.*]] = graph.reshape %[[M]] : (tensor<1x8x1x1xf32>) -> tensor<1x1x1x8xf32>
// CHECK-NEXT:    %[[MB:.*]] = graph.broadcast_in_dim %[[ML]] {dims = array<i64: 0, 1, 2, 3>} : (tensor<1x1x1x8xf32>) -> tensor<2x8x8x8xf32>
// CHECK-NEXT:    %[[G:.*]] = graph.transpose %arg0 {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NEXT:    %[[GC:.*]] = graph.sub %[[G]], %[[MB]]
// CHECK-NEXT:    %[[DX:.*]] = graph.conv_grad_input %[[GC]], %arg1 {channels_last = true{{.*}}} : (tensor<2x8x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x8x3xf32>
// CHECK-NEXT:    %[[X:.*]] = graph.transpose %arg2 {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x3x8x8xf32>) -> tensor<2x8x8x3xf32>
// CHECK-NEXT:    %[[DW:.*]] = graph.conv_grad_weight %[[X]], %[[GC]] {channels_last = true{{.*}}} : (tensor<2x8x8x3xf32>, tensor<2x8x8x8xf32>) -> tensor<8x3x3x3xf32>
// CHECK-NEXT:    %[[DXO:.*]] = graph.transpose %[[DX]] {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:    return %[[DXO]], %[[DW]], %[[M]]
func.func @conv_grads(%g: tensor<2x8x8x8xf32>, %w: tensor<8x3x3x3xf32>, %x: tensor<2x3x8x8xf32>) -> (tensor<2x3x8x8xf32>, tensor<8x3x3x3xf32>, tensor<1x8x1x1xf32>) {
  %m = graph.reduce_sum %g {dims = array<i64: 0, 2, 3>, keepdim = true} : (tensor<2x8x8x8xf32>) -> tensor<1x8x1x1xf32>
  %mb = graph.broadcast_in_dim %m {dims = array<i64: 0, 1, 2, 3>} : (tensor<1x8x1x1xf32>) -> tensor<2x8x8x8xf32>
  %gc = graph.sub %g, %mb : tensor<2x8x8x8xf32>
  %dx = graph.conv_grad_input %gc, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>, input_spatial = array<i64: 8, 8>} : (tensor<2x8x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<2x3x8x8xf32>
  %dw = graph.conv_grad_weight %x, %gc {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>, kernel = array<i64: 3, 3>} : (tensor<2x3x8x8xf32>, tensor<2x8x8x8xf32>) -> tensor<8x3x3x3xf32>
  return %dx, %dw, %m : tensor<2x3x8x8xf32>, tensor<8x3x3x3xf32>, tensor<1x8x1x1xf32>
}

// -----

// A skip connection: the concatenation runs along the channels, now the
// innermost dimension; a 2x upsampling's interleave (a reshape merging
// [H, 2] and [W, 2]) keeps the layout; a value a matmul also reads is
// transposed back for it alone.
// CHECK-LABEL: func.func @skip_upsample_matmul(
// COST-LABEL:  func.func @skip_upsample_matmul(
// COST-NOT:    channels_last
// COST:         return
// CHECK:         %[[A:.*]] = graph.conv {{.*}} {channels_last = true{{.*}}} : {{.*}} -> tensor<1x4x4x8xf32>
// CHECK:         %[[U:.*]] = graph.broadcast_in_dim %[[A]] {dims = array<i64: 0, 1, 3, 5>} : (tensor<1x4x4x8xf32>) -> tensor<1x4x2x4x2x8xf32>
// CHECK:         %[[UR:.*]] = graph.reshape %[[U]] : (tensor<1x4x2x4x2x8xf32>) -> tensor<1x8x8x8xf32>
// CHECK:         %[[CAT:.*]] = graph.concat %[[UR]], {{.*}} {dim = 3 : i64} : (tensor<1x8x8x8xf32>, tensor<1x8x8x8xf32>) -> tensor<1x8x8x16xf32>
// CHECK:         graph.conv %[[CAT]], {{.*}} {channels_last = true{{.*}}} : (tensor<1x8x8x16xf32>, tensor<4x16x3x3xf32>) -> tensor<1x8x8x4xf32>
// CHECK:         %[[AT:.*]] = graph.transpose %[[A]] {perm = array<i64: 0, 3, 1, 2>} : (tensor<1x4x4x8xf32>) -> tensor<1x8x4x4xf32>
// CHECK:         %[[AF:.*]] = graph.reshape %[[AT]] : (tensor<1x8x4x4xf32>) -> tensor<8x16xf32>
// CHECK:         graph.matmul %[[AF]]
func.func @skip_upsample_matmul(%x: tensor<1x8x4x4xf32>, %w: tensor<8x8x1x1xf32>, %skip: tensor<1x8x8x8xf32>, %w2: tensor<4x16x3x3xf32>, %m: tensor<16x2xf32>) -> (tensor<1x4x8x8xf32>, tensor<8x2xf32>) {
  %a = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x8x4x4xf32>, tensor<8x8x1x1xf32>) -> tensor<1x8x4x4xf32>
  %u = graph.broadcast_in_dim %a {dims = array<i64: 0, 1, 2, 4>} : (tensor<1x8x4x4xf32>) -> tensor<1x8x4x2x4x2xf32>
  %ur = graph.reshape %u : (tensor<1x8x4x2x4x2xf32>) -> tensor<1x8x8x8xf32>
  %cat = graph.concat %ur, %skip {dim = 1 : i64} : (tensor<1x8x8x8xf32>, tensor<1x8x8x8xf32>) -> tensor<1x16x8x8xf32>
  %y = graph.conv %cat, %w2 {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x16x8x8xf32>, tensor<4x16x3x3xf32>) -> tensor<1x4x8x8xf32>
  %af = graph.reshape %a : (tensor<1x8x4x4xf32>) -> tensor<8x16xf32>
  %p = graph.matmul %af, %m : (tensor<8x16xf32>, tensor<16x2xf32>) -> tensor<8x2xf32>
  return %y, %p : tensor<1x4x8x8xf32>, tensor<8x2xf32>
}

// -----

// A lone convolution keeps the graph's layout: its transposes in and out
// would cost what the library's reorders cost.
// CHECK-LABEL: func.func @lone_convolution(
// COST-LABEL:  func.func @lone_convolution(
// COST-NOT:    channels_last
// COST:         return
// CHECK-NOT:     graph.transpose
// CHECK:         graph.conv %arg0, %arg1 {dilation
// CHECK-NOT:     channels_last
// CHECK:         return
func.func @lone_convolution(%x: tensor<2x3x16x16xf32>, %w: tensor<8x3x3x3xf32>) -> tensor<2x8x16x16xf32> {
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<2x3x16x16xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x16x16xf32>
  %zero = graph.full 0.0 : tensor<2x8x16x16xf32>
  %r = graph.maximum %y, %zero : tensor<2x8x16x16xf32>
  return %r : tensor<2x8x16x16xf32>
}

// -----

// Three 3x3 convolutions over 64 channels between an 8-channel input and
// output: 278528 elements reordered channels-first against 16384 transposed
// at the edges (x 4): channels-last pays.
// CHECK-LABEL: func.func @wide_interior(
// COST-LABEL:  func.func @wide_interior(
// COST:          graph.transpose %arg0 {perm = array<i64: 0, 2, 3, 1>}
// COST-NOT:      graph.transpose
// COST:          graph.conv {{.*}}channels_last = true
// COST-NOT:      graph.transpose
// COST:          graph.conv {{.*}}channels_last = true
// COST-NOT:      graph.transpose
// COST:          graph.conv {{.*}}channels_last = true
// COST-NEXT:     graph.transpose {{.*}} {perm = array<i64: 0, 3, 1, 2>}
// COST-NEXT:     return
func.func @wide_interior(%x: tensor<1x8x32x32xf32>, %w1: tensor<64x8x3x3xf32>, %w2: tensor<64x64x3x3xf32>, %w3: tensor<8x64x3x3xf32>) -> tensor<1x8x32x32xf32> {
  %zero = graph.full 0.0 : tensor<1x64x32x32xf32>
  %a = graph.conv %x, %w1 {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x8x32x32xf32>, tensor<64x8x3x3xf32>) -> tensor<1x64x32x32xf32>
  %ra = graph.maximum %a, %zero : tensor<1x64x32x32xf32>
  %b = graph.conv %ra, %w2 {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x64x32x32xf32>, tensor<64x64x3x3xf32>) -> tensor<1x64x32x32xf32>
  %rb = graph.maximum %b, %zero : tensor<1x64x32x32xf32>
  %c = graph.conv %rb, %w3 {strides = array<i64: 1, 1>, padding_low = array<i64: 1, 1>, padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>} : (tensor<1x64x32x32xf32>, tensor<8x64x3x3xf32>) -> tensor<1x8x32x32xf32>
  return %c : tensor<1x8x32x32xf32>
}
