// RUN: not tilefuse-opt %s -split-input-file 2>&1 | FileCheck %s
// RUN: not tilefuse-opt %s 2>&1 | FileCheck %s --check-prefix=FIRST
//
// Malformed input gives a located diagnostic and a non-zero exit, never a
// crash (`not` fails on a crash). With -split-input-file a location reads
// `within split at FILE:N offset :L:C`, N being the line of the separator
// that opens the split and L the line within the split (line 1 = N), so each
// case's CHECK line sits right below its separator and uses [[#@LINE-1]].
// Without splitting, parsing stops at the first error with a plain
// FILE:LINE:COL location (FIRST).

// An op the dialect does not define, custom syntax.
// FIRST: {{.*}}parse_errors.mlir:[[#@LINE+4]]:8: error: custom op 'graph.frobnicate' is unknown
// FIRST-NOT: error:
// CHECK: within split at {{.*}}parse_errors.mlir:1 offset :[[#@LINE+2]]:8: error: custom op 'graph.frobnicate' is unknown
func.func @unknown_op(%a: tensor<4xf32>) {
  %0 = graph.frobnicate %a : tensor<4xf32>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:8: error: unregistered operation 'graph.frobnicate' found in dialect ('graph') that does not allow unknown operations
// The same in generic syntax: rejected by the verifier, still located.
func.func @unknown_op_generic(%a: tensor<4xf32>) {
  %0 = "graph.frobnicate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:24: error: expected ':'
// Elementwise op without its `: type`.
func.func @missing_type(%a: tensor<4xf32>) {
  %0 = graph.add %a, %a
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:52: error: expected ':'
// Op with a functional type, type missing.
func.func @missing_functional_type(%a: tensor<4x8xf32>) {
  %0 = graph.transpose %a {perm = array<i64: 1, 0>}
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:20: error: expected ':'
// Operands not separated by a comma.
func.func @missing_comma(%a: tensor<4xf32>) {
  %0 = graph.add %a %a : tensor<4xf32>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:8: error: custom op 'graph.transpose' 1 operands present, but expected 2
// Functional type lists more operands than the op has.
func.func @wrong_operand_count(%a: tensor<4x8xf32>) {
  %0 = graph.transpose %a {perm = array<i64: 1, 0>} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x4xf32>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:37: error: custom op 'tensor' is unknown
// Stray tokens after the type.
func.func @trailing_type(%a: tensor<4xf32>) {
  %0 = graph.neg %a : tensor<4xf32> tensor<4xf32>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:35: error: expected '>' in tensor type
// Malformed tensor type.
func.func @unterminated_type(%a: tensor<4xf32>) {
  %0 = graph.neg %a : tensor<4xf32
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:22: error: use of undeclared SSA value name
// Use of an undefined SSA value.
func.func @undefined_value(%a: tensor<4xf32>) {
  %0 = graph.add %a, %nope : tensor<4xf32>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :6:18: error: use of value '%a' expects different type than prior uses: 'tensor<8xf32>' vs 'tensor<4xf32>'
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-2]] offset :5:34: note: prior use here
// The custom type contradicts the type the value already has.
func.func @type_differs_from_use(%a: tensor<4xf32>) {
  %0 = graph.add %a, %a : tensor<8xf32>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:28: error: {{.*}}'graph.reduce_sum' op attribute 'dims' failed to satisfy constraint: i64 dense array attribute
// Bad attribute: dims must be a DenseI64ArrayAttr, not an ArrayAttr.
func.func @dims_not_an_array(%a: tensor<4x8xf32>) {
  %0 = graph.reduce_sum %a {dims = [1]} : (tensor<4x8xf32>) -> tensor<4xf32>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:28: error: {{.*}}'graph.reduce_max' op attribute 'dims' failed to satisfy constraint: i64 dense array attribute
// Bad attribute: dims of the wrong element type.
func.func @dims_i32_array(%a: tensor<4x8xf32>) {
  %0 = graph.reduce_max %a {dims = array<i32: 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:28: error: {{.*}}'graph.reduce_sum' op attribute 'keepdim' failed to satisfy constraint: bool attribute
// Bad attribute: keepdim must be a bool.
func.func @keepdim_not_bool(%a: tensor<4x8xf32>) {
  %0 = graph.reduce_sum %a {dims = array<i64: 1>, keepdim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4xf32>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:19: error: {{.*}}'graph.iota' op attribute 'dim' failed to satisfy constraint: 64-bit signless integer attribute
// Bad attribute: dim must be an i64.
func.func @dim_is_a_string() {
  %0 = graph.iota {dim = "x"} : tensor<4xi64>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:29: error: {{.*}}'graph.dropout' op attribute 'p' failed to satisfy constraint: 64-bit float attribute
// Bad attribute: p must be an f64.
func.func @p_is_an_integer(%x: tensor<4xf32>, %s: tensor<i64>) {
  %0 = graph.dropout %x, %s {p = 1 : i64} : (tensor<4xf32>, tensor<i64>) -> tensor<4xf32>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:8: error: 'graph.iota' op requires attribute 'dim'
// Missing required attribute: reported by the verifier at the op.
func.func @missing_required_attribute() {
  %0 = graph.iota : tensor<4xi64>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:22: error: expected attribute value
// Missing constant value.
func.func @constant_without_value() {
  %0 = graph.constant : tensor<4xf32>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:19: error: unexpected decimal integer literal for a floating point value
// graph.full takes a float literal.
func.func @full_integer_literal() {
  %0 = graph.full 1 : tensor<4xf32>
  return
}

// -----
// CHECK: within split at {{.*}}parse_errors.mlir:[[#@LINE-1]] offset :5:18: error: expected attribute value
// graph.full without a value.
func.func @full_missing_value() {
  %0 = graph.full : tensor<4xf32>
  return
}

