// RUN: tilefuse-opt %s "--fuse=remarks=true" 2>&1 >/dev/null | FileCheck %s --check-prefixes=CHECK,CPU
// RUN: tilefuse-opt %s "--fuse=remarks=true target=cuda:sm_90" 2>&1 >/dev/null | FileCheck %s --check-prefixes=CHECK,CUDA
//
// Every fusion rule that refuses says why (passes/FusionRules.h): producer
// and consumer, epilogues, pointwise siblings, sibling reductions, a row
// kernel absorbing a kernel that reads it, and a row kernel taking column
// sums. Rules that do not apply to a pair say nothing.

// h's kernel and g's kernel are siblings for o, but g's reads h's through
// the GEMM.
// CHECK: fuse_remarks.mlir:[[@LINE+5]]:8: remark: not fused with 'graph.matmul': its producer is a library call that the {{cpu|cuda:sm_90}} target runs without this epilogue
// CHECK: fuse_remarks.mlir:[[@LINE+5]]:8: remark: not fused with sibling 'graph.exp': one of the two kernels reads the other's results
func.func @siblings(%x: tensor<64x96xf32>, %w: tensor<96x96xf32>) -> (tensor<64x96xf32>, tensor<64x96xf32>) {
  %h = graph.exp %x : tensor<64x96xf32>
  %m = graph.matmul %h, %w : (tensor<64x96xf32>, tensor<96x96xf32>) -> tensor<64x96xf32>
  %g = graph.exp %m : tensor<64x96xf32>
  %o = graph.add %g, %h : tensor<64x96xf32>
  return %o, %h : tensor<64x96xf32>, tensor<64x96xf32>
}

// r2 waits for the GEMM; merged with r1's kernel, r1's reader v would too.
// CHECK: fuse_remarks.mlir:[[@LINE+6]]:9: remark: not fused with sibling 'graph.reduce_sum': merged, the kernel would wait for kernels only one of the two reads, and delay a kernel that waits for the other's result
func.func @sibling_reductions(%x: tensor<64x96xf32>, %a: tensor<64x96xf32>, %w: tensor<96x96xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %e = graph.exp %x : tensor<64x96xf32>
  %r1 = graph.reduce_sum %e {dims = array<i64: 1>} : (tensor<64x96xf32>) -> tensor<64xf32>
  %u = graph.mul %r1, %r1 : tensor<64xf32>
  %m = graph.matmul %a, %w : (tensor<64x96xf32>, tensor<96x96xf32>) -> tensor<64x96xf32>
  %r2 = graph.reduce_sum %m {dims = array<i64: 1>} : (tensor<64x96xf32>) -> tensor<64xf32>
  %v = graph.exp %u : tensor<64xf32>
  return %v, %r2 : tensor<64xf32>, tensor<64xf32>
}

// o reads the row kernel and the GEMM that reads it: joining either is a cycle.
// CHECK: fuse_remarks.mlir:[[@LINE+8]]:8: remark: not fused with 'graph.sub': another operand's kernel depends on that kernel (a cycle)
// CHECK: fuse_remarks.mlir:[[@LINE+6]]:8: remark: its kernel not merged into the row kernel of 'graph.reduce_max': another kernel it reads waits for the row kernel (a cycle once merged)
func.func @absorb_cycle(%x: tensor<64x96xf32>, %w: tensor<96x96xf32>) -> tensor<64x96xf32> {
  %m = graph.reduce_max %x {dims = array<i64: 1>, keepdim = true} : (tensor<64x96xf32>) -> tensor<64x1xf32>
  %mb = graph.broadcast_in_dim %m {dims = array<i64: 0, 1>} : (tensor<64x1xf32>) -> tensor<64x96xf32>
  %s = graph.sub %x, %mb : tensor<64x96xf32>
  %p = graph.matmul %s, %w : (tensor<64x96xf32>, tensor<96x96xf32>) -> tensor<64x96xf32>
  %e = graph.exp %p : tensor<64x96xf32>
  %o = graph.add %s, %e : tensor<64x96xf32>
  return %o : tensor<64x96xf32>
}

// The CPU's row kernel takes the column sum; a GPU's has no scratch for it.
// CHECK: fuse_remarks.mlir:[[@LINE+8]]:9: remark: not fused with 'graph.mul': it reduces other dimensions than the kernel
// CPU-NOT: its column sums not merged
// CUDA: fuse_remarks.mlir:[[@LINE+6]]:9: remark: its column sums not merged into the row kernel of 'graph.reduce_sum': its accumulator rows (1 x 96 f64) need 768 bytes of scratch; a row kernel of the cuda:sm_90 target has none
func.func @rows_and_columns(%x: tensor<64x96xf32>, %dy: tensor<64x96xf32>) -> (tensor<64x96xf32>, tensor<96xf32>) {
  %s = graph.reduce_sum %x {dims = array<i64: 1>, keepdim = true} : (tensor<64x96xf32>) -> tensor<64x1xf32>
  %sb = graph.broadcast_in_dim %s {dims = array<i64: 0, 1>} : (tensor<64x1xf32>) -> tensor<64x96xf32>
  %xc = graph.sub %x, %sb : tensor<64x96xf32>
  %dx = graph.mul %xc, %dy : tensor<64x96xf32>
  %dg = graph.reduce_sum %dx {dims = array<i64: 0>} : (tensor<64x96xf32>) -> tensor<96xf32>
  return %dx, %dg : tensor<64x96xf32>, tensor<96xf32>
}

// Rows of 2 put the row kernel's lanes across rows: no column sums join it.
// CHECK: fuse_remarks.mlir:[[@LINE+5]]:8: remark: its column sums not merged into the row kernel of 'graph.reduce_sum': rows of 2 elements are too short: the row kernel runs its lanes across rows, not along them
func.func @short_rows(%x: tensor<512x2xf32>) -> (tensor<512x2xf32>, tensor<2xf32>) {
  %s = graph.reduce_sum %x {dims = array<i64: 1>, keepdim = true} : (tensor<512x2xf32>) -> tensor<512x1xf32>
  %sb = graph.broadcast_in_dim %s {dims = array<i64: 0, 1>} : (tensor<512x1xf32>) -> tensor<512x2xf32>
  %y = graph.sub %x, %sb : tensor<512x2xf32>
  %c = graph.reduce_sum %y {dims = array<i64: 0>} : (tensor<512x2xf32>) -> tensor<2xf32>
  return %y, %c : tensor<512x2xf32>, tensor<2xf32>
}
