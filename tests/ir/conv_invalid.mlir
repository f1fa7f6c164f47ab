// RUN: tilefuse-opt %s -split-input-file -verify-diagnostics
// Every shape error of graph.conv and its gradients a user can hit.

func.func @channels(%x: tensor<2x4x9x9xf32>, %w: tensor<8x3x3x3xf32>) -> tensor<2x8x7x7xf32> {
  // expected-error @+2 {{'graph.conv' op with 1 groups, expects input channels (4) and output channels (8) divisible by the groups and a weight 'tensor<8x3x3x3xf32>' of [O, C / groups, kernel...]}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<2x4x9x9xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x7x7xf32>
  return %y : tensor<2x8x7x7xf32>
}

// -----

func.func @window(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) -> tensor<1x1x1x1xf32> {
  // expected-error @+2 {{'graph.conv' op spatial dimension 0: the kernel of 3 dilated by 3 spans more than the input of 4 padded by 0 + 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 3, 1>} : (tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x1x1xf32>
  return %y : tensor<1x1x1x1xf32>
}

// -----

func.func @attributes(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) -> tensor<1x1x2x2xf32> {
  // expected-error @+2 {{'graph.conv' op strides [1], padding_low [0, 0], padding_high [0, 0] and dilation [1, 1] need one entry per spatial dimension (2)}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.conv %x, %w {strides = array<i64: 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x2x2xf32>
  return %y : tensor<1x1x2x2xf32>
}

// -----

func.func @stride(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) -> tensor<1x1x2x2xf32> {
  // expected-error @+2 {{'graph.conv' op needs strides and dilation >= 1 and padding >= 0, got strides [0, 1], dilation [1, 1], padding [0, 0] / [0, 0]}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.conv %x, %w {strides = array<i64: 0, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x2x2xf32>
  return %y : tensor<1x1x2x2xf32>
}

// -----

func.func @rank(%x: tensor<1x1x1x1x4x4xf32>, %w: tensor<1x1x1x1x3x3xf32>) -> tensor<1x1x1x1x2x2xf32> {
  // expected-error @+2 {{'graph.conv' op convolves 1 to 3 spatial dimensions, got 4 (operands of rank 6)}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.conv %x, %w {strides = array<i64: 1, 1, 1, 1>, padding_low = array<i64: 0, 0, 0, 0>, padding_high = array<i64: 0, 0, 0, 0>, dilation = array<i64: 1, 1, 1, 1>} : (tensor<1x1x1x1x4x4xf32>, tensor<1x1x1x1x3x3xf32>) -> tensor<1x1x1x1x2x2xf32>
  return %y : tensor<1x1x1x1x2x2xf32>
}

// -----

func.func @types(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf64>) -> tensor<1x1x2x2xf32> {
  // expected-error @+2 {{'graph.conv' op operand types differ: 'tensor<1x1x4x4xf32>' and 'tensor<1x1x3x3xf64>'; cast one first}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x1x4x4xf32>, tensor<1x1x3x3xf64>) -> tensor<1x1x2x2xf32>
  return %y : tensor<1x1x2x2xf32>
}

// -----

func.func @grad_input_size(%g: tensor<1x1x3x3xf32>, %w: tensor<1x1x3x3xf32>) -> tensor<1x1x9x9xf32> {
  // expected-error @+2 {{'graph.conv_grad_input' op grad 'tensor<1x1x3x3xf32>' does not have the output size [4, 4] of an input of spatial size [9, 9]}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.conv_grad_input %g, %w {strides = array<i64: 2, 2>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>, input_spatial = array<i64: 9, 9>} : (tensor<1x1x3x3xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x9x9xf32>
  return %y : tensor<1x1x9x9xf32>
}

// -----

func.func @grad_weight_batch(%x: tensor<2x1x5x5xf32>, %g: tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32> {
  // expected-error @+2 {{'graph.conv_grad_weight' op input 'tensor<2x1x5x5xf32>' and grad 'tensor<1x1x3x3xf32>' need one batch and channels divisible by the 1 groups}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.conv_grad_weight %x, %g {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>, kernel = array<i64: 3, 3>} : (tensor<2x1x5x5xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  return %y : tensor<1x1x3x3xf32>
}

// -----

func.func @epilogue_bias(%x: tensor<1x2x6x6xf32>, %w: tensor<4x2x3x3xf32>, %b: tensor<2xf32>) -> tensor<1x4x4x4xf32> {
  // expected-error @+2 {{'graph.conv_bias_act' op bias 'tensor<2xf32>' must be one 'f32' per output channel ([4])}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.conv_bias_act %x, %w, %b {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x2x6x6xf32>, tensor<4x2x3x3xf32>, tensor<2xf32>) -> tensor<1x4x4x4xf32>
  return %y : tensor<1x4x4x4xf32>
}

// -----

func.func @epilogue_activation(%x: tensor<1x2x6x6xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x4x4xf32> {
  // expected-error @+2 {{'graph.conv_bias_act' op activation 'gelu' is not one of "none", "relu", "silu"}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.conv_bias_act %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>, activation = "gelu"} : (tensor<1x2x6x6xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x4x4xf32>
  return %y : tensor<1x4x4x4xf32>
}

// -----

// channels_last reads the channels from the last dimension: 4 here, where
// the weight takes 3 (the message states the channels-first form).
func.func @channels_last_channels(%x: tensor<2x9x9x4xf32>, %w: tensor<8x3x3x3xf32>) -> tensor<2x7x7x8xf32> {
  // expected-error @+2 {{'graph.conv' op with 1 groups, expects input channels (4) and output channels (8) divisible by the groups and a weight 'tensor<8x3x3x3xf32>' of [O, C / groups, kernel...]}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = graph.conv %x, %w {strides = array<i64: 1, 1>, padding_low = array<i64: 0, 0>, padding_high = array<i64: 0, 0>, dilation = array<i64: 1, 1>, channels_last = true} : (tensor<2x9x9x4xf32>, tensor<8x3x3x3xf32>) -> tensor<2x7x7x8xf32>
  return %y : tensor<2x7x7x8xf32>
}
