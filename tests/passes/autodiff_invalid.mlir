// RUN: tilefuse-opt %s --split-input-file --verify-diagnostics "--autodiff=wrt=1"

// An integer argument has no gradient.
// expected-error @+1 {{value_and_grad: cannot differentiate with respect to argument 1 of type 'tensor<3xi64>': only floating-point inputs have gradients}}
func.func @int_wrt(%a: tensor<3xf32>, %i: tensor<3xi64>) -> tensor<f32> {
  %0 = graph.reduce_sum %a {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// The first result must be a 0-d loss.
// expected-error @+1 {{value_and_grad: the first result of @vector_loss must be a 0-d floating-point loss, got 'tensor<3xf32>'}}
func.func @vector_loss(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  return %a : tensor<3xf32>
}

// -----

// Composites must be decomposed first.
func.func @composite(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<f32> {
  // expected-error @+1 {{'graph.softmax' op has no differentiation rule; composites are differentiated through their decomposition: run decompose-composites first}}
  %0 = graph.softmax %b {dim = 0 : i64} : (tensor<3xf32>) -> tensor<3xf32>
  %1 = graph.reduce_sum %0 {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// expected-error @+1 {{value_and_grad: argument index 1 is out of range: @one_arg has 1 arguments}}
func.func @one_arg(%a: tensor<3xf32>) -> tensor<f32> {
  %0 = graph.reduce_sum %a {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// A second derivative through fused attention: its gradient op has no rule.
func.func @attention_grad_twice(%q: tensor<1x1x2x4xf32>, %o: tensor<1x1x2x4xf32>, %l: tensor<1x1x2xf32>) -> tensor<f32> {
  // expected-error @+1 {{'graph.attention_grad' op has no differentiation rule: second derivatives through fused attention are not computed}}
  %dq, %dk, %dv = graph.attention_grad %q, %q, %q, %o, %l, %o {scale = 1.0 : f64} : (tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>, tensor<1x1x2xf32>, tensor<1x1x2x4xf32>) -> (tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>)
  %s = graph.reduce_sum %dq {dims = array<i64: 0, 1, 2, 3>} : (tensor<1x1x2x4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}
