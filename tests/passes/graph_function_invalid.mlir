// RUN: tilefuse-opt %s --split-input-file --verify-diagnostics --fuse
// RUN: tilefuse-opt %s --split-input-file --verify-diagnostics --tilefuse-lower-to-tile
// RUN: tilefuse-opt %s --split-input-file --verify-diagnostics "--autodiff=wrt=0"
//
// Functions the compiler cannot take are refused with the reason, never a
// crash: a declaration without a body, scalar (non-tensor) arguments and
// results, dynamic shapes.

// expected-error @+1 {{function @f is declared without a body; tilefuse compiles functions defined in the module}}
func.func private @f(%x: tensor<4xf32>) -> tensor<f32>

// -----

// expected-error @+1 {{argument 0 of @g is 'f32'; graph functions take and return statically shaped tensors (a scalar is a 0-d tensor, e.g. tensor<f32>)}}
func.func @g(%x: f32, %y: tensor<4xf32>) -> tensor<f32> {
  %0 = graph.reduce_sum %y {dims = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// expected-error @+1 {{argument 0 of @h is 'tensor<?xf32>'}}
func.func @h(%x: tensor<?xf32>) -> tensor<f32> {
  %0 = graph.full 0.0 : tensor<f32>
  return %0 : tensor<f32>
}
