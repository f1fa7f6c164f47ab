// RUN: tilefuse-opt %s -split-input-file -verify-diagnostics
//
// One case per user-facing error of the graph dialect (GraphOps.cpp, plus
// the ODS type constraints of GraphBase.td). Elementwise ops infer their
// result type while parsing, so their custom form reports the shape rule
// once; every other op infers at verification, where MLIR adds
// "failed to infer returned types" after the rule's own message.
// The `stream must be >= 0` checks of random_uniform and dropout cannot fire
// (see xfail_negative_stream.mlir), so they are not listed here.

//===----------------------------------------------------------------------===//
// ODS type constraints
//===----------------------------------------------------------------------===//

func.func @dynamic_shape(%a: tensor<?xf32>) {
  // expected-error @+1 {{'graph.add' op operand #0 must be statically shaped tensor of f32, f16, bf16, f64, i32, i64 or i1, but got 'tensor<?xf32>'}}
  %0 = graph.add %a, %a : tensor<?xf32>
  return
}

// -----

func.func @unranked(%a: tensor<*xf32>) {
  // expected-error @+1 {{'graph.reduce_sum' op operand #0 must be statically shaped tensor of f32, f16, bf16, f64, i32, i64 or i1, but got 'tensor<*xf32>'}}
  %0 = "graph.reduce_sum"(%a) {dims = array<i64: 0>} : (tensor<*xf32>) -> tensor<f32>
  return
}

// -----

func.func @unsupported_element_type(%a: tensor<4xi8>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of f32, f16, bf16, f64, i32, i64 or i1, but got 'tensor<4xi8>'}}
  %0 = graph.add %a, %a : tensor<4xi8>
  return
}

// -----

func.func @unsupported_result_element_type(%a: tensor<4xf32>) {
  // expected-error @+1 {{result #0 must be statically shaped tensor of f32, f16, bf16, f64, i32, i64 or i1, but got 'tensor<4xui32>'}}
  %0 = graph.cast %a : (tensor<4xf32>) -> tensor<4xui32>
  return
}

// -----

func.func @full_dynamic_result() {
  // expected-error @+1 {{'graph.full' op result #0 must be statically shaped tensor of f32, f16, bf16, f64, i32, i64 or i1, but got 'tensor<?x4xf32>'}}
  %0 = graph.full 0.0 : tensor<?x4xf32>
  return
}

// -----

func.func @constant_i8() {
  // expected-error @+1 {{'graph.constant' op result #0 must be statically shaped tensor of f32, f16, bf16, f64, i32, i64 or i1, but got 'tensor<2xi8>'}}
  %0 = graph.constant dense<[1, 2]> : tensor<2xi8>
  return
}

// -----

func.func @matmul_integer(%a: tensor<2x2xi32>) {
  // expected-error @+1 {{'graph.matmul' op operand #0 must be statically shaped tensor of f32, f16, bf16 or f64, but got 'tensor<2x2xi32>'}}
  %0 = graph.matmul %a, %a : (tensor<2x2xi32>, tensor<2x2xi32>) -> tensor<2x2xi32>
  return
}

// -----

func.func @softmax_integer(%a: tensor<2x2xi64>) {
  // expected-error @+1 {{'graph.softmax' op operand #0 must be statically shaped tensor of f32, f16, bf16 or f64, but got 'tensor<2x2xi64>'}}
  %0 = graph.softmax %a {dim = 1 : i64} : (tensor<2x2xi64>) -> tensor<2x2xi64>
  return
}

// -----

func.func @select_condition_not_i1(%c: tensor<4xi32>, %a: tensor<4xf32>) {
  // expected-error @+1 {{'graph.select' op operand #0 must be statically shaped tensor of i1, but got 'tensor<4xi32>'}}
  %0 = graph.select %c, %a, %a : (tensor<4xi32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @gather_float_indices(%t: tensor<8x4xf32>, %i: tensor<3xf32>) {
  // expected-error @+1 {{'graph.gather' op operand #1 must be statically shaped tensor of i32 or i64, but got 'tensor<3xf32>'}}
  %0 = graph.gather %t, %i : (tensor<8x4xf32>, tensor<3xf32>) -> tensor<3x4xf32>
  return
}

// -----

func.func @seed_not_scalar(%s: tensor<1xi64>) {
  // expected-error @+1 {{'graph.random_uniform' op operand #0 must be 0-d tensor of i64 (a random seed), but got 'tensor<1xi64>'}}
  %0 = graph.random_uniform %s : (tensor<1xi64>) -> tensor<4xf32>
  return
}

// -----

func.func @seed_i32(%x: tensor<4xf32>, %s: tensor<i32>) {
  // expected-error @+1 {{'graph.dropout' op operand #1 must be 0-d tensor of i64 (a random seed), but got 'tensor<i32>'}}
  %0 = graph.dropout %x, %s {p = 0.5 : f64} : (tensor<4xf32>, tensor<i32>) -> tensor<4xf32>
  return
}

// -----

func.func @stream_twice(%s: tensor<i64>, %k: tensor<i64>) {
  // expected-error @+1 {{'graph.random_uniform' op has both a stream operand and stream = 2; give one of them}}
  %0 = graph.random_uniform %s, %k {stream = 2 : i64} : (tensor<i64>, tensor<i64>) -> tensor<4xf32>
  return
}

// -----

func.func @stream_operand_not_scalar(%s: tensor<i64>, %k: tensor<2xi64>) {
  // expected-error @+1 {{'graph.random_uniform' op operand #1 must be 0-d tensor of i64 (a random seed), but got 'tensor<2xi64>'}}
  %0 = graph.random_uniform %s, %k : (tensor<i64>, tensor<2xi64>) -> tensor<4xf32>
  return
}

// -----

func.func @random_integer_result(%s: tensor<i64>) {
  // expected-error @+1 {{'graph.random_uniform' op result #0 must be statically shaped tensor of f32, f16, bf16 or f64, but got 'tensor<4xi32>'}}
  %0 = graph.random_uniform %s : (tensor<i64>) -> tensor<4xi32>
  return
}

// -----

func.func @wrong_result_type(%a: tensor<4xf32>) {
  // expected-error @+2 {{'graph.add' op inferred type(s) 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<4xf16>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = "graph.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf16>
  return
}

// -----

func.func @compare_result_not_i1(%a: tensor<4xf32>) {
  // expected-error @+2 {{'graph.lt' op inferred type(s) 'tensor<4xi1>' are incompatible with return type(s) of operation 'tensor<4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = "graph.lt"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

//===----------------------------------------------------------------------===//
// inferElementwiseType
//===----------------------------------------------------------------------===//

// -----

func.func @elementwise_no_operands() {
  // expected-error @+1 {{'graph.neg' op expects operands}}
  %0 = graph.neg : tensor<4xf32>
  return
}

// -----

func.func @elementwise_shape_mismatch(%a: tensor<4xf32>, %b: tensor<1xf32>) {
  // expected-error @+2 {{'graph.add' op operand types differ: 'tensor<4xf32>' vs 'tensor<1xf32>'; broadcasts are explicit: insert graph.broadcast_in_dim or graph.cast first}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = "graph.add"(%a, %b) : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @elementwise_dtype_mismatch(%a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+2 {{'graph.eq' op operand types differ: 'tensor<4xf32>' vs 'tensor<4xf16>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = "graph.eq"(%a, %b) : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xi1>
  return
}

// -----

func.func @exp_on_integer(%a: tensor<4xi32>) {
  // expected-error @+1 {{'graph.exp' op expects a floating-point tensor, got 'tensor<4xi32>'; cast it with graph.cast first}}
  %0 = graph.exp %a : tensor<4xi32>
  return
}

// -----

func.func @pow_on_integer(%a: tensor<4xi64>) {
  // expected-error @+1 {{'graph.pow' op expects a floating-point tensor, got 'tensor<4xi64>'}}
  %0 = graph.pow %a, %a : tensor<4xi64>
  return
}

// -----

func.func @relu_on_bool(%a: tensor<4xi1>) {
  // expected-error @+1 {{'graph.relu' op expects a floating-point tensor, got 'tensor<4xi1>'}}
  %0 = graph.relu %a : tensor<4xi1>
  return
}

// -----

func.func @add_on_bool(%a: tensor<4xi1>) {
  // expected-error @+1 {{'graph.add' op does not accept i1 tensors ('tensor<4xi1>'); cast to a numeric type first}}
  %0 = graph.add %a, %a : tensor<4xi1>
  return
}

// -----

func.func @neg_on_bool_generic(%a: tensor<i1>) {
  // expected-error @+2 {{'graph.neg' op does not accept i1 tensors ('tensor<i1>')}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = "graph.neg"(%a) : (tensor<i1>) -> tensor<i1>
  return
}

// -----

func.func @gelu_approximate(%a: tensor<4xf32>) {
  // expected-error @+1 {{'graph.gelu' op approximate must be "none" or "tanh", got "erf"}}
  %0 = graph.gelu %a {approximate = "erf"} : tensor<4xf32>
  return
}

//===----------------------------------------------------------------------===//
// select, cast, constant, iota
//===----------------------------------------------------------------------===//

// -----

func.func @select_branch_types(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+2 {{'graph.select' op branch types differ: 'tensor<4xf32>' vs 'tensor<4xf16>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.select %c, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return
}

// -----

func.func @select_condition_shape(%c: tensor<i1>, %a: tensor<4xf32>) {
  // expected-error @+2 {{'graph.select' op condition shape [] differs from value shape [4]; broadcast the condition explicitly}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.select %c, %a, %a : (tensor<i1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @cast_changes_shape(%a: tensor<4xf32>) {
  // expected-error @+1 {{'graph.cast' op changes the shape: 'tensor<4xf32>' -> 'tensor<2x2xf16>'; a cast only changes the element type}}
  %0 = graph.cast %a : (tensor<4xf32>) -> tensor<2x2xf16>
  return
}

// -----

func.func @constant_not_a_tensor() {
  // expected-error @+1 {{'graph.constant' op value must be a statically shaped tensor}}
  %0 = graph.constant dense<1.0> : vector<4xf32>
  return
}

// -----

func.func @iota_rank0() {
  // expected-error @+1 {{'graph.iota' op result must have rank >= 1, got 'tensor<i64>'}}
  %0 = graph.iota {dim = 0 : i64} : tensor<i64>
  return
}

// -----

func.func @iota_bool() {
  // expected-error @+1 {{'graph.iota' op result must be numeric, got 'tensor<4xi1>'}}
  %0 = graph.iota {dim = 0 : i64} : tensor<4xi1>
  return
}

// -----

func.func @iota_dim() {
  // expected-error @+1 {{'graph.iota' op dim 2 is out of range for 'tensor<4x5xi32>' (rank 2)}}
  %0 = graph.iota {dim = 2 : i64} : tensor<4x5xi32>
  return
}

// -----

func.func @iota_negative_dim() {
  // expected-error @+1 {{'graph.iota' op dim -1 is out of range for 'tensor<4xi32>' (rank 1)}}
  %0 = graph.iota {dim = -1 : i64} : tensor<4xi32>
  return
}

//===----------------------------------------------------------------------===//
// Layout ops
//===----------------------------------------------------------------------===//

// -----

func.func @broadcast_element_type(%a: tensor<8xf32>) {
  // expected-error @+1 {{'graph.broadcast_in_dim' op changes the element type: 'tensor<8xf32>' -> 'tensor<4x8xf16>'; use graph.cast}}
  %0 = graph.broadcast_in_dim %a {dims = array<i64: 1>} : (tensor<8xf32>) -> tensor<4x8xf16>
  return
}

// -----

func.func @broadcast_dims_count(%a: tensor<8xf32>) {
  // expected-error @+1 {{'graph.broadcast_in_dim' op dims has 2 entries but the operand 'tensor<8xf32>' has rank 1}}
  %0 = graph.broadcast_in_dim %a {dims = array<i64: 0, 1>} : (tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @broadcast_dim_out_of_range(%a: tensor<8xf32>) {
  // expected-error @+1 {{'graph.broadcast_in_dim' op dims[0] = 2 is out of range for the result 'tensor<4x8xf32>'}}
  %0 = graph.broadcast_in_dim %a {dims = array<i64: 2>} : (tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @broadcast_dims_not_increasing(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'graph.broadcast_in_dim' op dims [1, 0] must be strictly increasing}}
  %0 = graph.broadcast_in_dim %a {dims = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @broadcast_size_mismatch(%a: tensor<3xf32>) {
  // expected-error @+1 {{'graph.broadcast_in_dim' op cannot broadcast 'tensor<3xf32>' to 'tensor<4x8xf32>': operand dimension 0 has size 3 but result dimension 1 has size 8}}
  %0 = graph.broadcast_in_dim %a {dims = array<i64: 1>} : (tensor<3xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @reshape_element_type(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'graph.reshape' op changes the element type: 'tensor<4x8xf32>' -> 'tensor<32xi32>'; use graph.cast}}
  %0 = graph.reshape %a : (tensor<4x8xf32>) -> tensor<32xi32>
  return
}

// -----

func.func @reshape_element_count(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'graph.reshape' op cannot reshape 'tensor<4x8xf32>' (32 elements) to 'tensor<30xf32>' (30 elements)}}
  %0 = graph.reshape %a : (tensor<4x8xf32>) -> tensor<30xf32>
  return
}

// -----

func.func @transpose_perm_length(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.transpose' op perm [0] has 1 entries but the operand 'tensor<4x8xf32>' has rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.transpose %a {perm = array<i64: 0>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @transpose_not_a_permutation(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.transpose' op perm [1, 1] is not a permutation of 0..1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.transpose %a {perm = array<i64: 1, 1>} : (tensor<4x8xf32>) -> tensor<8x8xf32>
  return
}

// -----

func.func @transpose_out_of_range(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.transpose' op perm [0, 2] is not a permutation of 0..1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.transpose %a {perm = array<i64: 0, 2>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @transpose_wrong_result(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.transpose' op inferred type(s) 'tensor<8x4xf32>' are incompatible with return type(s) of operation 'tensor<4x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.transpose %a {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @slice_entries(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.slice' op start/limit/stride need 2 entries each for 'tensor<4x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.slice %a {start = array<i64: 0>, limit = array<i64: 4, 8>, stride = array<i64: 1, 1>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @slice_limit(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.slice' op dimension 1 of 'tensor<4x8xf32>': need 0 <= start (0) <= limit (9) <= 8 and stride (1) >= 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.slice %a {start = array<i64: 0, 0>, limit = array<i64: 4, 9>, stride = array<i64: 1, 1>} : (tensor<4x8xf32>) -> tensor<4x9xf32>
  return
}

// -----

func.func @slice_stride(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.slice' op dimension 0 of 'tensor<4x8xf32>': need 0 <= start (0) <= limit (4) <= 4 and stride (0) >= 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.slice %a {start = array<i64: 0, 0>, limit = array<i64: 4, 8>, stride = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @slice_start_after_limit(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.slice' op dimension 0 of 'tensor<4x8xf32>': need 0 <= start (3) <= limit (2) <= 4 and stride (1) >= 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.slice %a {start = array<i64: 3, 0>, limit = array<i64: 2, 8>, stride = array<i64: 1, 1>} : (tensor<4x8xf32>) -> tensor<0x8xf32>
  return
}

// -----

func.func @concat_no_inputs() {
  // expected-error @+2 {{'graph.concat' op needs at least one input}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.concat {dim = 0 : i64} : () -> tensor<4xf32>
  return
}

// -----

func.func @concat_dim(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.concat' op dim 2 is out of range for 'tensor<4x8xf32>' (rank 2)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.concat %a, %a {dim = 2 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>
  return
}

// -----

func.func @concat_shapes(%a: tensor<4x8xf32>, %b: tensor<4x7xf32>) {
  // expected-error @+2 {{'graph.concat' op cannot concatenate 'tensor<4x8xf32>' and 'tensor<4x7xf32>' along dim 0: element types and all other dimensions must match}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.concat %a, %b {dim = 0 : i64} : (tensor<4x8xf32>, tensor<4x7xf32>) -> tensor<8x8xf32>
  return
}

// -----

func.func @concat_element_types(%a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+2 {{'graph.concat' op cannot concatenate 'tensor<4xf32>' and 'tensor<4xf16>' along dim 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.concat %a, %b {dim = 0 : i64} : (tensor<4xf32>, tensor<4xf16>) -> tensor<8xf32>
  return
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// -----

func.func @reduce_bool(%a: tensor<4xi1>) {
  // expected-error @+2 {{'graph.reduce_sum' op does not reduce i1 tensors ('tensor<4xi1>'); cast to a numeric type first}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.reduce_sum %a {dims = array<i64: 0>} : (tensor<4xi1>) -> tensor<i1>
  return
}

// -----

func.func @reduce_dim_out_of_range(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.reduce_max' op dimension 2 is out of range for 'tensor<4x8xf32>' (rank 2)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.reduce_max %a {dims = array<i64: 2>} : (tensor<4x8xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @reduce_negative_dim(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.reduce_min' op dimension -1 is out of range for 'tensor<4x8xf32>' (rank 2)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.reduce_min %a {dims = array<i64: -1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @reduce_unsorted(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.reduce_sum' op dims [1, 0] must be sorted and unique}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.reduce_sum %a {dims = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<f32>
  return
}

// -----

func.func @reduce_duplicate(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.reduce_sum' op dims [1, 1] must be sorted and unique}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.reduce_sum %a {dims = array<i64: 1, 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @reduce_keepdim_result(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.reduce_sum' op inferred type(s) 'tensor<4x1xf32>' are incompatible with return type(s) of operation 'tensor<4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.reduce_sum %a {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @argmax_dim(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.argmax' op dim 2 is out of range for 'tensor<4x8xf32>' (rank 2)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.argmax %a {dim = 2 : i64} : (tensor<4x8xf32>) -> tensor<4xi64>
  return
}

// -----

func.func @argmax_bool(%a: tensor<4xi1>) {
  // expected-error @+2 {{'graph.argmax' op does not reduce i1 tensors ('tensor<4xi1>')}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.argmax %a {dim = 0 : i64} : (tensor<4xi1>) -> tensor<i64>
  return
}

// -----

func.func @argmax_result_i32(%a: tensor<4xf32>) {
  // expected-error @+2 {{'graph.argmax' op inferred type(s) 'tensor<i64>' are incompatible with return type(s) of operation 'tensor<i32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.argmax %a {dim = 0 : i64} : (tensor<4xf32>) -> tensor<i32>
  return
}

//===----------------------------------------------------------------------===//
// Contractions and indexing
//===----------------------------------------------------------------------===//

// -----

func.func @matmul_element_types(%a: tensor<4x8xf32>, %b: tensor<8x2xf16>) {
  // expected-error @+2 {{'graph.matmul' op element types differ: 'tensor<4x8xf32>' vs 'tensor<8x2xf16>'; cast one operand first}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.matmul %a, %b : (tensor<4x8xf32>, tensor<8x2xf16>) -> tensor<4x2xf32>
  return
}

// -----

func.func @matmul_rank1(%a: tensor<8xf32>, %b: tensor<8x2xf32>) {
  // expected-error @+2 {{'graph.matmul' op expects operands of equal rank >= 2, got 'tensor<8xf32>' and 'tensor<8x2xf32>'; reshape or broadcast the batch dimensions}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.matmul %a, %b : (tensor<8xf32>, tensor<8x2xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @matmul_rank_mismatch(%a: tensor<3x4x8xf32>, %b: tensor<8x2xf32>) {
  // expected-error @+2 {{'graph.matmul' op expects operands of equal rank >= 2, got 'tensor<3x4x8xf32>' and 'tensor<8x2xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.matmul %a, %b : (tensor<3x4x8xf32>, tensor<8x2xf32>) -> tensor<3x4x2xf32>
  return
}

// -----

func.func @matmul_batch(%a: tensor<3x4x8xf32>, %b: tensor<2x8x2xf32>) {
  // expected-error @+2 {{'graph.matmul' op batch dimensions differ: 'tensor<3x4x8xf32>' vs 'tensor<2x8x2xf32>'; broadcast them explicitly}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.matmul %a, %b : (tensor<3x4x8xf32>, tensor<2x8x2xf32>) -> tensor<3x4x2xf32>
  return
}

// -----

func.func @matmul_contraction(%a: tensor<4x8xf32>, %b: tensor<7x2xf32>) {
  // expected-error @+2 {{'graph.matmul' op contraction sizes differ: 'tensor<4x8xf32>' has K = 8 but 'tensor<7x2xf32>' has K = 7}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.matmul %a, %b : (tensor<4x8xf32>, tensor<7x2xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @matmul_contraction_transposed(%a: tensor<4x8xf32>, %b: tensor<16x8xf32>) {
  // expected-error @+2 {{'graph.matmul' op contraction sizes differ: 'tensor<4x8xf32>' (transposed) has K = 4 but 'tensor<16x8xf32>' (transposed) has K = 8}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.matmul %a, %b {transpose_lhs = true, transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @gather_rank0_table(%t: tensor<f32>, %i: tensor<3xi64>) {
  // expected-error @+2 {{'graph.gather' op table must have rank >= 1, got 'tensor<f32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.gather %t, %i : (tensor<f32>, tensor<3xi64>) -> tensor<3xf32>
  return
}

// -----

func.func @gather_result(%t: tensor<8x4xf32>, %i: tensor<3xi64>) {
  // expected-error @+2 {{'graph.gather' op inferred type(s) 'tensor<3x4xf32>' are incompatible with return type(s) of operation 'tensor<3x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.gather %t, %i : (tensor<8x4xf32>, tensor<3xi64>) -> tensor<3x8xf32>
  return
}

// -----

func.func @scatter_add_rank0_base(%b: tensor<f32>, %i: tensor<3xi64>, %u: tensor<3xf32>) {
  // expected-error @+2 {{'graph.scatter_add' op base must have rank >= 1, got 'tensor<f32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.scatter_add %b, %i, %u : (tensor<f32>, tensor<3xi64>, tensor<3xf32>) -> tensor<f32>
  return
}

// -----

func.func @scatter_add_updates_shape(%b: tensor<8x4xf32>, %i: tensor<3xi64>, %u: tensor<3x5xf32>) {
  // expected-error @+2 {{'graph.scatter_add' op updates 'tensor<3x5xf32>' must have shape indices.shape + base.shape[1:] = [3, 4] and the element type of 'tensor<8x4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.scatter_add %b, %i, %u : (tensor<8x4xf32>, tensor<3xi64>, tensor<3x5xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @scatter_add_updates_type(%b: tensor<8x4xf32>, %i: tensor<3xi32>, %u: tensor<3x4xf16>) {
  // expected-error @+2 {{'graph.scatter_add' op updates 'tensor<3x4xf16>' must have shape indices.shape + base.shape[1:] = [3, 4] and the element type of 'tensor<8x4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.scatter_add %b, %i, %u : (tensor<8x4xf32>, tensor<3xi32>, tensor<3x4xf16>) -> tensor<8x4xf32>
  return
}

//===----------------------------------------------------------------------===//
// Composites
//===----------------------------------------------------------------------===//

// -----

func.func @softmax_dim(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.softmax' op dim 2 is out of range for 'tensor<4x8xf32>' (rank 2)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.softmax %a {dim = 2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @log_softmax_dim(%a: tensor<f32>) {
  // expected-error @+2 {{'graph.log_softmax' op dim 0 is out of range for 'tensor<f32>' (rank 0)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.log_softmax %a {dim = 0 : i64} : (tensor<f32>) -> tensor<f32>
  return
}

// -----

func.func @layer_norm_weight_bias(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+2 {{'graph.layer_norm' op weight 'tensor<8xf32>' and bias 'tensor<4x8xf32>' must have the same type}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.layer_norm %x, %w, %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_trailing(%x: tensor<4x8xf32>, %w: tensor<4xf32>) {
  // expected-error @+2 {{'graph.layer_norm' op weight 'tensor<4xf32>' must match the trailing dimensions of the input 'tensor<4x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.layer_norm %x, %w, %w : (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_element_type(%x: tensor<4x8xf32>, %w: tensor<8xf16>) {
  // expected-error @+2 {{'graph.layer_norm' op weight 'tensor<8xf16>' must have the element type of the input 'tensor<4x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.layer_norm %x, %w, %w : (tensor<4x8xf32>, tensor<8xf16>, tensor<8xf16>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_weight_rank0(%x: tensor<4x8xf32>, %w: tensor<f32>) {
  // expected-error @+2 {{'graph.layer_norm' op weight 'tensor<f32>' must match the trailing dimensions of the input 'tensor<4x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.layer_norm %x, %w, %w : (tensor<4x8xf32>, tensor<f32>, tensor<f32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_weight_too_big(%x: tensor<8xf32>, %w: tensor<2x8xf32>) {
  // expected-error @+2 {{'graph.layer_norm' op weight 'tensor<2x8xf32>' must match the trailing dimensions of the input 'tensor<8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.layer_norm %x, %w, %w : (tensor<8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @layer_norm_epsilon(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+2 {{'graph.layer_norm' op epsilon must be >= 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.layer_norm %x, %w, %w {epsilon = -1.0 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @linear_weight(%x: tensor<4x8xf32>, %w: tensor<16x7xf32>) {
  // expected-error @+2 {{'graph.linear' op input 'tensor<4x8xf32>' and weight 'tensor<16x7xf32>' do not match: weight must be [out, in] with in = the input's last dimension and the same element type}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.linear %x, %w : (tensor<4x8xf32>, tensor<16x7xf32>) -> tensor<4x16xf32>
  return
}

// -----

func.func @linear_weight_rank(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+2 {{'graph.linear' op input 'tensor<4x8xf32>' and weight 'tensor<8xf32>' do not match}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.linear %x, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @linear_weight_dtype(%x: tensor<4x8xf32>, %w: tensor<16x8xbf16>) {
  // expected-error @+2 {{'graph.linear' op input 'tensor<4x8xf32>' and weight 'tensor<16x8xbf16>' do not match}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.linear %x, %w : (tensor<4x8xf32>, tensor<16x8xbf16>) -> tensor<4x16xf32>
  return
}

// -----

func.func @linear_input_rank0(%x: tensor<f32>, %w: tensor<16x1xf32>) {
  // expected-error @+2 {{'graph.linear' op input 'tensor<f32>' and weight 'tensor<16x1xf32>' do not match}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.linear %x, %w : (tensor<f32>, tensor<16x1xf32>) -> tensor<16xf32>
  return
}

// -----

func.func @linear_bias(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+2 {{'graph.linear' op bias 'tensor<8xf32>' must be [16] of 'f32'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.linear %x, %w, %b : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<8xf32>) -> tensor<4x16xf32>
  return
}

// -----

func.func @linear_bias_dtype(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf16>) {
  // expected-error @+2 {{'graph.linear' op bias 'tensor<16xf16>' must be [16] of 'f32'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.linear %x, %w, %b : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf16>) -> tensor<4x16xf32>
  return
}

// -----

func.func @dropout_p_one(%x: tensor<4xf32>, %s: tensor<i64>) {
  // expected-error @+2 {{'graph.dropout' op p must be in [0, 1), got 1.000000e+00}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.dropout %x, %s {p = 1.0 : f64} : (tensor<4xf32>, tensor<i64>) -> tensor<4xf32>
  return
}

// -----

func.func @dropout_p_negative(%x: tensor<4xf32>, %s: tensor<i64>) {
  // expected-error @+2 {{'graph.dropout' op p must be in [0, 1), got -5.000000e-01}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.dropout %x, %s {p = -0.5 : f64} : (tensor<4xf32>, tensor<i64>) -> tensor<4xf32>
  return
}

// -----

func.func @cross_entropy_target(%x: tensor<4x10xf32>, %t: tensor<10xi64>) {
  // expected-error @+2 {{'graph.cross_entropy' op input 'tensor<4x10xf32>' and target 'tensor<10xi64>' do not match: target must have the input's shape without its last (class) dimension}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.cross_entropy %x, %t : (tensor<4x10xf32>, tensor<10xi64>) -> tensor<f32>
  return
}

// -----

func.func @nll_target(%x: tensor<4x10xf32>, %t: tensor<4x1xi32>) {
  // expected-error @+2 {{'graph.nll' op input 'tensor<4x10xf32>' and target 'tensor<4x1xi32>' do not match: target must have the input's shape without its last (class) dimension}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.nll %x, %t : (tensor<4x10xf32>, tensor<4x1xi32>) -> tensor<f32>
  return
}

// -----

func.func @nll_rank0_input(%x: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+2 {{'graph.nll' op input 'tensor<f32>' and target 'tensor<i64>' do not match}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.nll %x, %t : (tensor<f32>, tensor<i64>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_result(%x: tensor<4x10xf32>, %t: tensor<4xi64>) {
  // expected-error @+2 {{'graph.cross_entropy' op inferred type(s) 'tensor<f32>' are incompatible with return type(s) of operation 'tensor<4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.cross_entropy %x, %t : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<4xf32>
  return
}

// -----

func.func @mse_types(%a: tensor<4xf32>, %b: tensor<4x1xf32>) {
  // expected-error @+2 {{'graph.mse' op input 'tensor<4xf32>' and target 'tensor<4x1xf32>' must have the same type}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.mse %a, %b : (tensor<4xf32>, tensor<4x1xf32>) -> tensor<f32>
  return
}

// -----

func.func @bce_types(%a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+2 {{'graph.bce' op input 'tensor<4xf32>' and target 'tensor<4xf16>' must have the same type}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.bce %a, %b : (tensor<4xf32>, tensor<4xf16>) -> tensor<f32>
  return
}
