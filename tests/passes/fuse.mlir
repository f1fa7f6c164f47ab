// RUN: tilefuse-opt %s --decompose-composites --canonicalize --cse "--autodiff=function=ln_loss wrt=0,1,2" "--autodiff=function=ce wrt=0" --fuse | FileCheck %s
// RUN: tilefuse-opt %s --decompose-composites --canonicalize --cse --fuse=target=cuda:sm_90 | FileCheck %s --check-prefix=CUDA
// RUN: tilefuse-opt %s --decompose-composites --canonicalize --cse "--fuse=remarks=true" 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
//
// Kernel counts the fusion pass must keep. Each graph.fusion is one kernel;
// matmuls stay library calls on the CPU.

// Softmax: one row kernel (max, exp, sum and the division over each row).
// CHECK-LABEL: func.func @softmax(
// CHECK-COUNT-1: graph.fusion "kernel{{[0-9]+}}"({{.*}}kind = "reduction", reduced = array<i64: 1>}
// CHECK-NOT:     graph.fusion "
// CHECK:         return
func.func @softmax(%x: tensor<16x50xf32>) -> tensor<16x50xf32> {
  %0 = graph.softmax %x {dim = 1 : i64} : (tensor<16x50xf32>) -> tensor<16x50xf32>
  return %0 : tensor<16x50xf32>
}

// layer_norm forward: one row kernel (mean, variance, scale and shift).
// CHECK-LABEL: func.func @layer_norm(
// CHECK-COUNT-1: graph.fusion "
// CHECK-NOT:     graph.fusion "
// CHECK:         return
func.func @layer_norm(%x: tensor<16x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<16x64xf32> {
  %0 = graph.layer_norm %x, %g, %b : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  return %0 : tensor<16x64xf32>
}

// layer_norm forward and backward: the forward, the loss, dx, dgamma and
// dbeta in one row kernel on the CPU (dgamma, dbeta and the loss sum folded
// as column sums while it walks the rows: one read of x and dy for all;
// tests/codegen/rows_with_column_sums.mlir).
// CHECK-LABEL: func.func @ln_loss_value_and_grad(
// CHECK:         graph.fusion "{{.*}}kind = "reduction", reduced = array<i64: 1>} {{.*}} -> (tensor<f32>, tensor<64xf32>, tensor<64xf32>, tensor<16x64xf32>)
// CHECK-NOT:     graph.fusion "
// CHECK:         return
func.func @ln_loss(%x: tensor<16x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>, %w: tensor<16x64xf32>) -> tensor<f32> {
  %0 = graph.layer_norm %x, %g, %b : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %1 = graph.mul %0, %w : tensor<16x64xf32>
  %2 = graph.reduce_sum %1 {dims = array<i64: 0, 1>} : (tensor<16x64xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}

// cross_entropy forward: the target check (the non-ignored targets, a
// gather of zero rows that fails on a class outside [0, C)), a row kernel
// (log-softmax, pick the target) and the mean over the rows.
// CHECK-LABEL: func.func @ce(
// CHECK:         graph.fusion "{{.*}}kind = "pointwise"
// CHECK:         graph.gather
// CHECK-COUNT-2: graph.fusion "
// CHECK-NOT:     graph.fusion "
// CHECK:         return
// ... and backward: the count of non-ignored targets (and the gradient
// scale) first, from the targets alone, so that the row kernel computes
// dlogits beside the loss (exp(x - max) is never written for another
// kernel to read back), then the mean; no cotangent (no scatter_add) for
// the check's constant table.
// CHECK-LABEL: func.func @ce_value_and_grad(
// CHECK:         graph.fusion "{{.*}}kind = "pointwise"
// CHECK:         graph.gather
// CHECK-NOT:     graph.scatter_add
// CHECK:         graph.fusion "{{.*}}(%arg1) {{.*}}reduced = array<i64: 0>}
// CHECK:         graph.fusion "{{.*}}(%arg0, {{.*}}reduced = array<i64: 1>} : {{.*}} -> (tensor<16xf32>, tensor<16x50xf32>)
// CHECK:         graph.fusion "{{.*}}reduced = array<i64: 0>}
// CHECK-NOT:     graph.fusion "
// CHECK:         return
func.func @ce(%x: tensor<16x50xf32>, %t: tensor<16xi64>) -> tensor<f32> {
  %0 = graph.cross_entropy %x, %t : (tensor<16x50xf32>, tensor<16xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// A GELU MLP with biases: on the CPU each matmul is a BLAS call followed by
// one kernel (bias + GELU, then bias); with cuBLASLt (cuda) the bias adds
// move into the GEMMs.
// CHECK-LABEL: func.func @mlp(
// CHECK:         graph.matmul
// CHECK-NEXT:    graph.fusion "{{.*}}kind = "pointwise"
// CHECK:         graph.matmul
// CHECK-NEXT:    graph.fusion "{{.*}}kind = "pointwise"
// CHECK-NOT:     graph.fusion "
// CHECK:         return
// CUDA-LABEL: func.func @mlp(
// CUDA:         graph.fusion "{{.*}}kind = "matmul"
// CUDA:         graph.fusion "{{.*}}kind = "pointwise"
// CUDA:         graph.fusion "{{.*}}kind = "matmul"
// CUDA-NOT:     graph.fusion "
// CUDA:         return
func.func @mlp(%x: tensor<16x32xf32>, %w1: tensor<64x32xf32>, %b1: tensor<64xf32>, %w2: tensor<8x64xf32>, %b2: tensor<8xf32>) -> tensor<16x8xf32> {
  %0 = graph.linear %x, %w1, %b1 : (tensor<16x32xf32>, tensor<64x32xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %1 = graph.gelu %0 {approximate = "tanh"} : tensor<16x64xf32>
  %2 = graph.linear %1, %w2, %b2 : (tensor<16x64xf32>, tensor<8x64xf32>, tensor<8xf32>) -> tensor<16x8xf32>
  return %2 : tensor<16x8xf32>
}

// A transpose of a kernel's result cannot be read in that kernel.
// REMARK-DAG: remark: not fused with 'graph.exp': it reads a value of that kernel at another index
func.func @transposed(%x: tensor<8x4xf32>) -> tensor<4x8xf32> {
  %0 = graph.exp %x : tensor<8x4xf32>
  %1 = graph.transpose %0 {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %2 = graph.tanh %1 : tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}
// REMARK-DAG: remark: not fused with 'graph.matmul': its producer is a library call that the cpu target runs without this epilogue

// A reshape of a kernel's result that only merges leading dimensions, read
// by matmuls, is a view: no kernel copies it, the runtime gives it the
// kernel's buffer, and each matmul reads its own copy of the view. A
// reshape that changes the last dimension is written by the kernel.
// CHECK-LABEL: func.func @reshape_views(
// CHECK:         %[[K:.+]]:2 = graph.fusion "kernel0"(%{{.+}}) {{.+}} -> (tensor<4x8x16xf32>, tensor<4x128xf32>)
// CHECK:           graph.exp
// CHECK:         %[[V1:.+]] = graph.reshape %[[K]]#0 : (tensor<4x8x16xf32>) -> tensor<32x16xf32>
// CHECK-NEXT:    graph.matmul %[[V1]], %{{.+}} :
// CHECK-NEXT:    %[[V2:.+]] = graph.reshape %[[K]]#0 : (tensor<4x8x16xf32>) -> tensor<32x16xf32>
// CHECK-NEXT:    graph.matmul %[[V2]], %{{.+}} {transpose_rhs = true}
// CHECK-NEXT:    graph.matmul %{{.+}}, %[[K]]#1 :
// CHECK-NOT:     graph.fusion
// CHECK:         return
func.func @reshape_views(%x: tensor<4x8x16xf32>, %w: tensor<16x16xf32>, %v: tensor<32x4xf32>) -> (tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x128xf32>) {
  %e = graph.exp %x : tensor<4x8x16xf32>
  %r = graph.reshape %e : (tensor<4x8x16xf32>) -> tensor<32x16xf32>
  %a = graph.matmul %r, %w : (tensor<32x16xf32>, tensor<16x16xf32>) -> tensor<32x16xf32>
  %b = graph.matmul %r, %w {transpose_rhs = true} : (tensor<32x16xf32>, tensor<16x16xf32>) -> tensor<32x16xf32>
  %t = graph.reshape %e : (tensor<4x8x16xf32>) -> tensor<4x128xf32>
  %c = graph.matmul %v, %t : (tensor<32x4xf32>, tensor<4x128xf32>) -> tensor<32x128xf32>
  return %a, %b, %c : tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x128xf32>
}

// A reshape the function returns gets its own buffer: the kernel writes it.
// CHECK-LABEL: func.func @returned_reshape(
// CHECK:         %[[K:.+]] = graph.fusion "kernel0"(%{{.+}}) {{.+}} -> tensor<32x16xf32>
// CHECK:         %[[M:.+]] = graph.matmul %[[K]], %{{.+}} :
// CHECK-NEXT:    return %[[M]], %[[K]] :
func.func @returned_reshape(%x: tensor<4x8x16xf32>, %w: tensor<16x16xf32>) -> (tensor<32x16xf32>, tensor<32x16xf32>) {
  %e = graph.exp %x : tensor<4x8x16xf32>
  %r = graph.reshape %e : (tensor<4x8x16xf32>) -> tensor<32x16xf32>
  %a = graph.matmul %r, %w : (tensor<32x16xf32>, tensor<16x16xf32>) -> tensor<32x16xf32>
  return %a, %r : tensor<32x16xf32>, tensor<32x16xf32>
}

// A library result the function returns reshaped (a language model's
// logits, [B*T, V] as [B, T, V]) is no kernel: the reshape stays a view the
// return reads, so the GEMM's buffer is the result. Returned beside its
// operand, it is a kernel of its own (a second buffer).
// CHECK-LABEL: func.func @returned_reshape_of_a_product(
// CHECK-NOT:     graph.fusion
// CHECK:         %[[M:.+]] = graph.matmul
// CHECK-NEXT:    %[[V:.+]] = graph.reshape %[[M]] : (tensor<8x40xf32>) -> tensor<2x4x40xf32>
// CHECK-NEXT:    return %[[V]] :
// CHECK-LABEL: func.func @returned_reshape_beside_its_product(
// CHECK:         %[[M:.+]] = graph.matmul
// CHECK:         graph.fusion "kernel0"(%[[M]])
func.func @returned_reshape_of_a_product(%h: tensor<8x16xf32>, %w: tensor<40x16xf32>) -> tensor<2x4x40xf32> {
  %0 = graph.matmul %h, %w {transpose_rhs = true} : (tensor<8x16xf32>, tensor<40x16xf32>) -> tensor<8x40xf32>
  %1 = graph.reshape %0 : (tensor<8x40xf32>) -> tensor<2x4x40xf32>
  return %1 : tensor<2x4x40xf32>
}
func.func @returned_reshape_beside_its_product(%h: tensor<8x16xf32>, %w: tensor<40x16xf32>) -> (tensor<2x4x40xf32>, tensor<8x40xf32>) {
  %0 = graph.matmul %h, %w {transpose_rhs = true} : (tensor<8x16xf32>, tensor<40x16xf32>) -> tensor<8x40xf32>
  %1 = graph.reshape %0 : (tensor<8x40xf32>) -> tensor<2x4x40xf32>
  return %1, %0 : tensor<2x4x40xf32>, tensor<8x40xf32>
}

// Paddings (a value concatenated with constants: zeros around a kernel's
// result, zeros interleaved along a new dimension) are read through like
// views: the add's kernel reads exp's result through both paddings, no
// kernel of their own.
// CHECK-LABEL: func.func @padding_of_a_kernel_result(
// CHECK:         graph.fusion "{{.*}}kind = "pointwise"{{.*}}(tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK:         graph.fusion "{{.*}}kind = "pointwise"{{.*}}(tensor<4x8xf32>, tensor<4x20xf32>) -> tensor<4x20xf32>
// CHECK-NOT:     graph.fusion "
// CHECK:         return
func.func @padding_of_a_kernel_result(%x: tensor<4x8xf32>, %y: tensor<4x20xf32>) -> tensor<4x20xf32> {
  %e = graph.exp %x : tensor<4x8xf32>
  %z = graph.full 0.0 : tensor<4x2xf32>
  %p = graph.concat %z, %e {dim = 1 : i64} : (tensor<4x2xf32>, tensor<4x8xf32>) -> tensor<4x10xf32>
  %r = graph.reshape %p : (tensor<4x10xf32>) -> tensor<4x10x1xf32>
  %w = graph.full 0.0 : tensor<4x10x1xf32>
  %q = graph.concat %r, %w {dim = 2 : i64} : (tensor<4x10x1xf32>, tensor<4x10x1xf32>) -> tensor<4x10x2xf32>
  %s = graph.reshape %q : (tensor<4x10x2xf32>) -> tensor<4x20xf32>
  %o = graph.add %s, %y : tensor<4x20xf32>
  return %o : tensor<4x20xf32>
}

// A padding of a row's result read across the rows (column j reads row j's
// sum) is an index remap like a slice: the multiply does not join the row
// kernel (it would recompute every row's sum per lane, and could write x
// while other programs still read it).
// CHECK-LABEL: func.func @padded_row_result_read_across_rows(
// CHECK:         graph.fusion "{{.*}}kind = "reduction"
// CHECK:         graph.fusion "{{.*}}kind = "pointwise"
// CHECK-NOT:     graph.fusion "
// CHECK:         return
func.func @padded_row_result_read_across_rows(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = graph.reduce_sum %x {dims = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  %z = graph.full 0.0 : tensor<4xf32>
  %p = graph.concat %r, %z {dim = 0 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
  %b = graph.broadcast_in_dim %p {dims = array<i64: 1>} : (tensor<8xf32>) -> tensor<4x8xf32>
  %q = graph.mul %x, %b : tensor<4x8xf32>
  return %q : tensor<4x8xf32>
}

// A GEMM's [B*T, N] result reshaped to [B, T, N] for GELU and back for the
// next GEMM: a pointwise kernel computes every value at the domain's linear
// index, so reading its own values through the reshapes keeps one kernel
// (bias, GELU and the cast), which writes only the bf16 activation (the
// cast moved before the reshape back, which the GEMM reads as a view).
// CHECK-LABEL: func.func @pointwise_through_reshapes(
// CHECK:         graph.matmul
// CHECK-NEXT:    %[[K:.+]] = graph.fusion "{{.*}}kind = "pointwise"{{.*}} -> tensor<2x4x16xbf16>
// CHECK:           graph.tanh
// CHECK:         %[[V:.+]] = graph.reshape %[[K]] : (tensor<2x4x16xbf16>) -> tensor<8x16xbf16>
// CHECK-NEXT:    graph.matmul %[[V]]
// CHECK-NOT:     graph.fusion "
// CHECK:         return
func.func @pointwise_through_reshapes(%x: tensor<8x16xbf16>, %w: tensor<16x16xbf16>, %b: tensor<16xf32>, %w2: tensor<16x4xbf16>) -> tensor<8x4xbf16> {
  %h = graph.matmul %x, %w : (tensor<8x16xbf16>, tensor<16x16xbf16>) -> tensor<8x16xbf16>
  %f = graph.cast %h : (tensor<8x16xbf16>) -> tensor<8x16xf32>
  %bb = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<16xf32>) -> tensor<8x16xf32>
  %a = graph.add %f, %bb : tensor<8x16xf32>
  %r = graph.reshape %a : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %t = graph.tanh %r : tensor<2x4x16xf32>
  %g = graph.mul %r, %t : tensor<2x4x16xf32>
  %back = graph.reshape %g : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  %c = graph.cast %back : (tensor<8x16xf32>) -> tensor<8x16xbf16>
  %y = graph.matmul %c, %w2 : (tensor<8x16xbf16>, tensor<16x4xbf16>) -> tensor<8x4xbf16>
  return %y : tensor<8x4xbf16>
}

// A pointwise kernel that reads its own values through a reshape across
// rows does not merge into the row kernel whose values it reads: there,
// those values would be recomputed at other rows (with those rows' sums).
// CHECK-LABEL: func.func @reshape_across_rows_beside_a_row_kernel(
// CHECK:         graph.fusion "{{.*}}kind = "reduction"
// CHECK:         graph.matmul
// CHECK:         graph.fusion "{{.*}}kind = "pointwise"
// CHECK-NOT:     graph.fusion "
// CHECK:         return
// REMARK-DAG: remark: its kernel not merged into the row kernel of 'graph.reduce_sum': it reads its own values through a reshape, which in a row kernel would recompute the row kernel's values at other rows
func.func @reshape_across_rows_beside_a_row_kernel(%x: tensor<4x8xf32>, %u: tensor<4x3xf32>, %w: tensor<3x8xf32>) -> tensor<4x8xf32> {
  %s = graph.reduce_sum %x {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %sb = graph.broadcast_in_dim %s {dims = array<i64: 0, 1>} : (tensor<4x1xf32>) -> tensor<4x8xf32>
  %e = graph.div %x, %sb : tensor<4x8xf32>
  %m = graph.matmul %u, %w : (tensor<4x3xf32>, tensor<3x8xf32>) -> tensor<4x8xf32>
  %a = graph.exp %m : tensor<4x8xf32>
  %r = graph.reshape %a : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %t = graph.tanh %r : tensor<8x4xf32>
  %back = graph.reshape %t : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %o = graph.mul %back, %e : tensor<4x8xf32>
  return %o : tensor<4x8xf32>
}

// A bias added to a GEMM's result that is read only through slices and
// transposes (a QKV product split into head-major Q and K) is no kernel of
// its own: each slice's kernel adds the bias to the product itself, so no
// f32 copy of the product is written and read back.
// CHECK-LABEL: func.func @bias_read_through_slices(
// CHECK:         %[[P:.+]] = graph.matmul
// CHECK-NEXT:    graph.fusion "{{.*}}"(%[[P]], %arg2) {{.*}} -> tensor<2x4x8xbf16>
// CHECK:           graph.slice
// CHECK:           graph.transpose
// CHECK:         graph.fusion "{{.*}}"(%[[P]], %arg2) {{.*}} -> tensor<2x4x8xbf16>
// CHECK-NOT:     graph.fusion "
// CHECK:         return
func.func @bias_read_through_slices(%x: tensor<8x16xbf16>, %w: tensor<16x16xbf16>, %b: tensor<16xf32>) -> (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>) {
  %p = graph.matmul %x, %w : (tensor<8x16xbf16>, tensor<16x16xbf16>) -> tensor<8x16xbf16>
  %f = graph.cast %p : (tensor<8x16xbf16>) -> tensor<8x16xf32>
  %bb = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<16xf32>) -> tensor<8x16xf32>
  %a = graph.add %f, %bb : tensor<8x16xf32>
  %r = graph.reshape %a : (tensor<8x16xf32>) -> tensor<4x2x16xf32>
  %q = graph.slice %r {start = array<i64: 0, 0, 0>, limit = array<i64: 4, 2, 8>, stride = array<i64: 1, 1, 1>} : (tensor<4x2x16xf32>) -> tensor<4x2x8xf32>
  %k = graph.slice %r {start = array<i64: 0, 0, 8>, limit = array<i64: 4, 2, 16>, stride = array<i64: 1, 1, 1>} : (tensor<4x2x16xf32>) -> tensor<4x2x8xf32>
  %qt = graph.transpose %q {perm = array<i64: 1, 0, 2>} : (tensor<4x2x8xf32>) -> tensor<2x4x8xf32>
  %kt = graph.transpose %k {perm = array<i64: 1, 0, 2>} : (tensor<4x2x8xf32>) -> tensor<2x4x8xf32>
  %qc = graph.cast %qt : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
  %kc = graph.cast %kt : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
  return %qc, %kc : tensor<2x4x8xbf16>, tensor<2x4x8xbf16>
}

// GELU's backward beside its bias gradient: the gradient, computed through
// [B, T, N] reshapes of the GEMM's [B*T, N] results, is summed over its
// rows (the bias gradient) and written in bf16 for the GEMMs, in one
// column kernel. Values that read no reduction are computed at whatever
// coordinates a reader asks, so the reduction and the cast read them
// through the reshapes.
// CHECK-LABEL: func.func @column_sums_through_reshapes(
// CHECK:         graph.fusion "{{.*}}kind = "reduction", reduced = array<i64: 0, 1>} {{.*}} -> (tensor<16xf32>, tensor<8x16xbf16>)
// CHECK-NOT:     graph.fusion "
// CHECK:         return
func.func @column_sums_through_reshapes(%g: tensor<8x16xbf16>, %h: tensor<8x16xbf16>) -> (tensor<16xf32>, tensor<8x16xbf16>) {
  %gf = graph.cast %g : (tensor<8x16xbf16>) -> tensor<8x16xf32>
  %hf = graph.cast %h : (tensor<8x16xbf16>) -> tensor<8x16xf32>
  %gr = graph.reshape %gf : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %hr = graph.reshape %hf : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %t = graph.tanh %hr : tensor<2x4x16xf32>
  %d = graph.mul %gr, %t : tensor<2x4x16xf32>
  %s = graph.reduce_sum %d {dims = array<i64: 0, 1>} : (tensor<2x4x16xf32>) -> tensor<16xf32>
  %back = graph.reshape %d : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  %c = graph.cast %back : (tensor<8x16xf32>) -> tensor<8x16xbf16>
  return %s, %c : tensor<16xf32>, tensor<8x16xbf16>
}

// A layer norm's output cast to bf16 for GEMMs that read it as [B*T, d]
// (GPT-2's next product and, in the backward, its weight gradient), its
// input the residual stream's sum: the cast moves before the reshape
// (CastOp's canonicalization), joins the row kernel, and the kernel writes
// the bf16 rows alone; the GEMMs read them through a reshape (a view).
// Before, the row kernel wrote f32 rows that a pointwise kernel of their
// own cast as [B*T, d].
// CHECK-LABEL: func.func @layer_norm_cast_for_gemms(
// CHECK:         %[[K:.+]]:2 = graph.fusion "{{.*}}kind = "reduction", reduced = array<i64: 2>} {{.*}} -> (tensor<2x4x16xf32>, tensor<2x4x16xbf16>)
// CHECK:           graph.cast {{.*}} -> tensor<2x4x16xbf16>
// CHECK:         %[[V:.+]] = graph.reshape %[[K]]#1 : (tensor<2x4x16xbf16>) -> tensor<8x16xbf16>
// CHECK:         graph.matmul %[[V]]
// CHECK-NOT:     graph.fusion "
// CHECK:         return
func.func @layer_norm_cast_for_gemms(%x: tensor<2x4x16xf32>, %res: tensor<2x4x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>, %w: tensor<16x8xbf16>, %d: tensor<8x8xbf16>) -> (tensor<2x4x16xf32>, tensor<8x8xbf16>, tensor<16x8xbf16>) {
  %s = graph.add %x, %res : tensor<2x4x16xf32>
  %y = graph.layer_norm %s, %g, %b : (tensor<2x4x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %r = graph.reshape %y : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  %c = graph.cast %r : (tensor<8x16xf32>) -> tensor<8x16xbf16>
  %h = graph.matmul %c, %w : (tensor<8x16xbf16>, tensor<16x8xbf16>) -> tensor<8x8xbf16>
  %dw = graph.matmul %c, %d {transpose_lhs = true} : (tensor<8x16xbf16>, tensor<8x8xbf16>) -> tensor<16x8xbf16>
  return %s, %h, %dw : tensor<2x4x16xf32>, tensor<8x8xbf16>, tensor<16x8xbf16>
}
