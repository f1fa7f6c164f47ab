// RUN: tilefuse-opt %s --rematerialize=target=cuda:sm_90 --split-input-file | FileCheck %s
// RUN: env TILEFUSE_REMATERIALIZE=25 tilefuse-opt %s --rematerialize --split-input-file | FileCheck %s
// RUN: env TILEFUSE_REMATERIALIZE=0 tilefuse-opt %s --rematerialize=target=cuda:sm_90 --split-input-file | FileCheck %s --check-prefix=OFF
// RUN: tilefuse-opt %s --rematerialize --split-input-file | FileCheck %s --check-prefix=CPU
// RUN: env TILEFUSE_REMATERIALIZE=x5 not tilefuse-opt %s --rematerialize 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: TILEFUSE_REMATERIALIZE=x5 is not a share of the bytes moved in percent

// On the CPU (compute-bound exp and reductions) a kernel that reduces is
// recomputed only with a share above the default 5%; pointwise ones are.
// CPU-LABEL: func.func @softmax_saved_for_backward
// CPU: graph.fusion "kernel0"(%arg0) {{.*}} -> (tensor<4x8xf32>, tensor<4x8xf32>)
// CPU-LABEL: func.func @producer_folds_into_consumer
// CPU-NOT: "kernel0"
// CPU: graph.fusion "kernel1"(%arg1, %arg0)

// Attention's shape in small: a softmax kernel (F) saves exp(s - max) and
// the probabilities; the forward GEMM reads the probabilities, a backward
// GEMM (dv) reads them again, and the backward softmax kernel (B) reads
// exp(s - max). B recomputes F's body from the scores: F keeps only the
// probabilities the forward GEMM needs, B also yields them for dv, which
// moves after B.
// CHECK-LABEL: func.func @softmax_saved_for_backward
// CHECK: %[[F:.+]] = graph.fusion "kernel0"(%arg0) {{.*}} : (tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK: %[[Y:.+]] = graph.matmul %[[F]], %arg1
// The pointwise kernel making dp folds into B as well (dp is read by B alone).
// CHECK-NOT: "kernel1"
// CHECK: %[[B:.+]]:2 = graph.fusion "kernel2"(%arg0, %arg2, %[[Y]]) {{.*}} -> (tensor<4x8xf32>, tensor<4x8xf32>) {
// CHECK: graph.reduce_max
// CHECK: graph.exp
// CHECK: graph.reduce_sum
// CHECK: %[[DV:.+]] = graph.matmul %[[B]]#1, %arg2 {transpose_lhs = true}
// CHECK: return %[[Y]], %[[DV]], %[[B]]#0
// OFF-LABEL: func.func @softmax_saved_for_backward
// OFF: graph.fusion "kernel0"(%arg0) {{.*}} -> (tensor<4x8xf32>, tensor<4x8xf32>)
func.func @softmax_saved_for_backward(%s: tensor<4x8xf32>, %v: tensor<8x8xf32>, %dy: tensor<4x8xf32>)
    -> (tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>) {
  %f:2 = graph.fusion "kernel0"(%s) {domain = array<i64: 4, 8>, kind = "reduction", reduced = array<i64: 1>}
      : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  ^bb0(%a: tensor<4x8xf32>):
    %m = graph.reduce_max %a {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
    %mb = graph.broadcast_in_dim %m {dims = array<i64: 0, 1>} : (tensor<4x1xf32>) -> tensor<4x8xf32>
    %d = graph.sub %a, %mb : tensor<4x8xf32>
    %e = graph.exp %d : tensor<4x8xf32>
    %sum = graph.reduce_sum %e {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
    %sb = graph.broadcast_in_dim %sum {dims = array<i64: 0, 1>} : (tensor<4x1xf32>) -> tensor<4x8xf32>
    %p = graph.div %e, %sb : tensor<4x8xf32>
    graph.yield %e, %p : tensor<4x8xf32>, tensor<4x8xf32>
  }
  %y = graph.matmul %f#1, %v : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %dp = graph.fusion "kernel1"(%dy, %y) {domain = array<i64: 4, 8>, kind = "pointwise", reduced = array<i64>}
      : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>):
    %0 = graph.mul %a, %b : tensor<4x8xf32>
    graph.yield %0 : tensor<4x8xf32>
  }
  %dv = graph.matmul %f#1, %dy {transpose_lhs = true} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  %dx = graph.fusion "kernel2"(%f#0, %dp) {domain = array<i64: 4, 8>, kind = "reduction", reduced = array<i64: 1>}
      : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%e: tensor<4x8xf32>, %g: tensor<4x8xf32>):
    %0 = graph.mul %g, %e : tensor<4x8xf32>
    %1 = graph.reduce_sum %0 {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
    %2 = graph.broadcast_in_dim %1 {dims = array<i64: 0, 1>} : (tensor<4x1xf32>) -> tensor<4x8xf32>
    %3 = graph.sub %g, %2 : tensor<4x8xf32>
    %4 = graph.mul %e, %3 : tensor<4x8xf32>
    graph.yield %4 : tensor<4x8xf32>
  }
  return %y, %dv, %dx : tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>
}

// -----

// Recomputing would keep x (a GEMM's result, as large as the saved value)
// alive instead: no gain, nothing changes.
// CHECK-LABEL: func.func @no_gain
// CHECK: %[[X:.+]] = graph.matmul
// CHECK: %[[T:.+]] = graph.fusion "kernel0"(%[[X]])
// CHECK: graph.fusion "kernel1"(%arg2, %[[T]])
// CHECK-NOT: graph.exp
// CHECK: return
func.func @no_gain(%a: tensor<8x8xf32>, %w: tensor<8x8xf32>, %y: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %x = graph.matmul %a, %w : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %t = graph.fusion "kernel0"(%x) {domain = array<i64: 8, 8>, kind = "pointwise", reduced = array<i64>}
      : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%v: tensor<8x8xf32>):
    %0 = graph.exp %v : tensor<8x8xf32>
    graph.yield %0 : tensor<8x8xf32>
  }
  %u = graph.fusion "kernel1"(%y, %t) {domain = array<i64: 8, 8>, kind = "pointwise", reduced = array<i64>}
      : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%p: tensor<8x8xf32>, %q: tensor<8x8xf32>):
    %0 = graph.mul %p, %q : tensor<8x8xf32>
    graph.yield %0 : tensor<8x8xf32>
  }
  return %u : tensor<8x8xf32>
}

// -----

// B reads F's output transposed: F's body would run at other coordinates
// than B's. Nothing changes.
// CHECK-LABEL: func.func @remapped_read
// CHECK: %[[T:.+]] = graph.fusion "kernel0"(%arg0)
// CHECK: graph.fusion "kernel1"(%arg1, %[[T]])
// CHECK: graph.transpose
func.func @remapped_read(%x: tensor<8x8xf32>, %y: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %t = graph.fusion "kernel0"(%x) {domain = array<i64: 8, 8>, kind = "pointwise", reduced = array<i64>}
      : (tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%v: tensor<8x8xf32>):
    %0 = graph.exp %v : tensor<8x8xf32>
    graph.yield %0 : tensor<8x8xf32>
  }
  %u = graph.fusion "kernel1"(%y, %t) {domain = array<i64: 8, 8>, kind = "pointwise", reduced = array<i64>}
      : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32> {
  ^bb0(%p: tensor<8x8xf32>, %q: tensor<8x8xf32>):
    %0 = graph.transpose %q {perm = array<i64: 1, 0>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = graph.mul %p, %0 : tensor<8x8xf32>
    graph.yield %1 : tensor<8x8xf32>
  }
  return %u : tensor<8x8xf32>
}

// -----

// F's only reader is B and F reads an argument: B simply computes F's body
// and F goes away (one kernel less).
// CHECK-LABEL: func.func @producer_folds_into_consumer
// CHECK-NOT: "kernel0"
// CHECK: graph.fusion "kernel1"(%arg1, %arg0)
// CHECK: graph.exp
// CHECK: graph.mul
func.func @producer_folds_into_consumer(%x: tensor<64xf32>, %y: tensor<64xf32>) -> tensor<64xf32> {
  %t = graph.fusion "kernel0"(%x) {domain = array<i64: 64>, kind = "pointwise", reduced = array<i64>}
      : (tensor<64xf32>) -> tensor<64xf32> {
  ^bb0(%a: tensor<64xf32>):
    %0 = graph.exp %a : tensor<64xf32>
    graph.yield %0 : tensor<64xf32>
  }
  %u = graph.fusion "kernel1"(%y, %t) {domain = array<i64: 64>, kind = "pointwise", reduced = array<i64>}
      : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32> {
  ^bb0(%a: tensor<64xf32>, %b: tensor<64xf32>):
    %0 = graph.mul %a, %b : tensor<64xf32>
    graph.yield %0 : tensor<64xf32>
  }
  return %u : tensor<64xf32>
}

// -----

// GELU in small: F (bias, tanh) saves two f32 terms for its backward kernel
// B, which reads them through a reshape ([B*T, N] -> [B, T, N]); both are
// pointwise, so a reshape reads at the same linear index. The function's
// large last result (a training step's updated parameters, in small) sets
// the peak with results counted, which recomputing leaves as it is; the
// step's own memory (results aside) drops. B recomputes F's body from the
// GEMM's result; F keeps only the activation the next GEMM reads.
// CHECK-LABEL: func.func @saved_through_reshape
// CHECK: %[[H:.+]] = graph.matmul
// CHECK: %[[F:.+]] = graph.fusion "kernel0"(%[[H]], %arg2) {{.*}} -> tensor<8x16xf32>
// CHECK: graph.matmul %[[F]], %arg3
// CHECK: %[[DY:.+]] = graph.matmul %{{.+}}, %arg3 {transpose_rhs = true}
// CHECK: graph.fusion "kernel1"(%[[DY]], %[[H]], %arg2) {{.*}} -> tensor<8x16xf32> {
// CHECK: graph.tanh
// CHECK: graph.reshape
// CHECK: return
// A kernel that draws random numbers is not recomputed for the step's
// memory alone: its Philox rerun costs more time than the bytes save. Its
// third output, the square of its second, is a cheap function of another
// output the reader reads anyway: the reader squares it itself and the
// kernel no longer writes it (no random number is drawn again).
// CHECK-LABEL: func.func @random_saved_through_reshape
// CHECK: %[[F:.+]]:2 = graph.fusion "kernel0"(%{{.+}}, %arg2, %arg5) {{.*}} -> (tensor<8x16xf32>, tensor<2x4x16xf32>)
// CHECK: graph.fusion "kernel1"(%{{.+}}, %[[F]]#1) {{.*}} : (tensor<8x16xf32>, tensor<2x4x16xf32>)
// CHECK-NEXT: ^bb0(%{{.+}}: tensor<8x16xf32>, %[[T:.+]]: tensor<2x4x16xf32>):
// CHECK-NEXT: graph.mul %[[T]], %[[T]] : tensor<2x4x16xf32>
func.func @saved_through_reshape(%x: tensor<8x16xf32>, %w: tensor<16x16xf32>, %b: tensor<16xf32>,
                                 %w2: tensor<16x4xf32>, %p: tensor<128x16xf32>)
    -> (tensor<8x4xf32>, tensor<8x16xf32>, tensor<128x16xf32>) {
  %h = graph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %f:3 = graph.fusion "kernel0"(%h, %b) {domain = array<i64: 8, 16>, kind = "pointwise", reduced = array<i64>}
      : (tensor<8x16xf32>, tensor<16xf32>) -> (tensor<8x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>) {
  ^bb0(%a: tensor<8x16xf32>, %c: tensor<16xf32>):
    %0 = graph.broadcast_in_dim %c {dims = array<i64: 1>} : (tensor<16xf32>) -> tensor<8x16xf32>
    %1 = graph.add %a, %0 : tensor<8x16xf32>
    %2 = graph.reshape %1 : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %3 = graph.tanh %2 : tensor<2x4x16xf32>
    %4 = graph.mul %2, %3 : tensor<2x4x16xf32>
    %5 = graph.mul %3, %3 : tensor<2x4x16xf32>
    %6 = graph.reshape %4 : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
    graph.yield %6, %3, %5 : tensor<8x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>
  }
  %y = graph.matmul %f#0, %w2 : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %dy = graph.matmul %y, %w2 {transpose_rhs = true} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %dh = graph.fusion "kernel1"(%dy, %f#1, %f#2) {domain = array<i64: 8, 16>, kind = "pointwise", reduced = array<i64>}
      : (tensor<8x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<8x16xf32> {
  ^bb0(%g: tensor<8x16xf32>, %t: tensor<2x4x16xf32>, %s: tensor<2x4x16xf32>):
    %0 = graph.reshape %t : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
    %1 = graph.reshape %s : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
    %2 = graph.add %0, %1 : tensor<8x16xf32>
    %3 = graph.mul %g, %2 : tensor<8x16xf32>
    graph.yield %3 : tensor<8x16xf32>
  }
  %dw = graph.matmul %x, %dh {transpose_lhs = true} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<16x16xf32>
  %big = graph.matmul %p, %dw : (tensor<128x16xf32>, tensor<16x16xf32>) -> tensor<128x16xf32>
  return %y, %dh, %big : tensor<8x4xf32>, tensor<8x16xf32>, tensor<128x16xf32>
}

func.func @random_saved_through_reshape(%x: tensor<8x16xf32>, %w: tensor<16x16xf32>, %b: tensor<16xf32>,
                                        %w2: tensor<16x4xf32>, %p: tensor<128x16xf32>,
                                        %seed: tensor<i64>)
    -> (tensor<8x4xf32>, tensor<8x16xf32>, tensor<128x16xf32>) {
  %h = graph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %f:3 = graph.fusion "kernel0"(%h, %b, %seed) {domain = array<i64: 8, 16>, kind = "pointwise", reduced = array<i64>}
      : (tensor<8x16xf32>, tensor<16xf32>, tensor<i64>) -> (tensor<8x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>) {
  ^bb0(%a: tensor<8x16xf32>, %c: tensor<16xf32>, %k: tensor<i64>):
    %0 = graph.broadcast_in_dim %c {dims = array<i64: 1>} : (tensor<16xf32>) -> tensor<8x16xf32>
    %1 = graph.add %a, %0 : tensor<8x16xf32>
    %2 = graph.reshape %1 : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %r = graph.random_uniform %k : (tensor<i64>) -> tensor<2x4x16xf32>
    %3 = graph.mul %2, %r : tensor<2x4x16xf32>
    %4 = graph.mul %2, %3 : tensor<2x4x16xf32>
    %5 = graph.mul %3, %3 : tensor<2x4x16xf32>
    %6 = graph.reshape %4 : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
    graph.yield %6, %3, %5 : tensor<8x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>
  }
  %y = graph.matmul %f#0, %w2 : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %dy = graph.matmul %y, %w2 {transpose_rhs = true} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %dh = graph.fusion "kernel1"(%dy, %f#1, %f#2) {domain = array<i64: 8, 16>, kind = "pointwise", reduced = array<i64>}
      : (tensor<8x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<8x16xf32> {
  ^bb0(%g: tensor<8x16xf32>, %t: tensor<2x4x16xf32>, %s: tensor<2x4x16xf32>):
    %0 = graph.reshape %t : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
    %1 = graph.reshape %s : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
    %2 = graph.add %0, %1 : tensor<8x16xf32>
    %3 = graph.mul %g, %2 : tensor<8x16xf32>
    graph.yield %3 : tensor<8x16xf32>
  }
  %dw = graph.matmul %x, %dh {transpose_lhs = true} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<16x16xf32>
  %big = graph.matmul %p, %dw : (tensor<128x16xf32>, tensor<16x16xf32>) -> tensor<128x16xf32>
  return %y, %dh, %big : tensor<8x4xf32>, tensor<8x16xf32>, tensor<128x16xf32>
}

// -----

// A layer norm's forward row kernel writes x - mean, rstd and x-hat =
// (x - mean) * rstd for the backward; the column kernel reading x-hat
// (dgamma) reads x - mean too. It computes x-hat from x - mean and the
// per-row rstd (4 KiB where x-hat is 1 MiB) and the row kernel stops writing
// x-hat. An output read by the function's return is left alone.
// CHECK-LABEL: func.func @derived_output
// CHECK: %[[F:.+]]:2 = graph.fusion "kernel0"(%arg0) {{.*}} -> (tensor<1024x256xf32>, tensor<1024x1xf32>)
// CHECK: graph.fusion "kernel1"(%arg1, %[[F]]#0, %[[F]]#1) {{.*}} : (tensor<1024x256xf32>, tensor<1024x256xf32>, tensor<1024x1xf32>) -> tensor<256xf32>
// CHECK-NEXT: ^bb0(%{{.+}}: tensor<1024x256xf32>, %[[C:.+]]: tensor<1024x256xf32>, %[[R:.+]]: tensor<1024x1xf32>):
// CHECK-NEXT: %[[B:.+]] = graph.broadcast_in_dim %[[R]]
// CHECK-NEXT: graph.mul %[[C]], %[[B]]
// CHECK-LABEL: func.func @derived_output_returned
// CHECK: graph.fusion "kernel0"(%arg0) {{.*}} -> (tensor<1024x256xf32>, tensor<1024x1xf32>, tensor<1024x256xf32>)
func.func @derived_output(%x: tensor<1024x256xf32>, %dy: tensor<1024x256xf32>) -> (tensor<1024x256xf32>, tensor<256xf32>) {
  %f:3 = graph.fusion "kernel0"(%x) {domain = array<i64: 1024, 256>, kind = "reduction", reduced = array<i64: 1>}
      : (tensor<1024x256xf32>) -> (tensor<1024x256xf32>, tensor<1024x1xf32>, tensor<1024x256xf32>) {
  ^bb0(%a: tensor<1024x256xf32>):
    %s = graph.reduce_sum %a {dims = array<i64: 1>, keepdim = true} : (tensor<1024x256xf32>) -> tensor<1024x1xf32>
    %sb = graph.broadcast_in_dim %s {dims = array<i64: 0, 1>} : (tensor<1024x1xf32>) -> tensor<1024x256xf32>
    %c = graph.sub %a, %sb : tensor<1024x256xf32>
    %r = graph.rsqrt %s : tensor<1024x1xf32>
    %rb = graph.broadcast_in_dim %r {dims = array<i64: 0, 1>} : (tensor<1024x1xf32>) -> tensor<1024x256xf32>
    %n = graph.mul %c, %rb : tensor<1024x256xf32>
    graph.yield %c, %r, %n : tensor<1024x256xf32>, tensor<1024x1xf32>, tensor<1024x256xf32>
  }
  %dg = graph.fusion "kernel1"(%dy, %f#2, %f#0) {domain = array<i64: 1024, 256>, kind = "reduction", reduced = array<i64: 0>}
      : (tensor<1024x256xf32>, tensor<1024x256xf32>, tensor<1024x256xf32>) -> tensor<256xf32> {
  ^bb0(%g: tensor<1024x256xf32>, %n: tensor<1024x256xf32>, %c: tensor<1024x256xf32>):
    %0 = graph.mul %g, %n : tensor<1024x256xf32>
    %1 = graph.mul %0, %c : tensor<1024x256xf32>
    %2 = graph.reduce_sum %1 {dims = array<i64: 0>} : (tensor<1024x256xf32>) -> tensor<256xf32>
    graph.yield %2 : tensor<256xf32>
  }
  return %f#0, %dg : tensor<1024x256xf32>, tensor<256xf32>
}
func.func @derived_output_returned(%x: tensor<1024x256xf32>) -> (tensor<1024x256xf32>, tensor<1024x1xf32>, tensor<1024x256xf32>) {
  %f:3 = graph.fusion "kernel0"(%x) {domain = array<i64: 1024, 256>, kind = "reduction", reduced = array<i64: 1>}
      : (tensor<1024x256xf32>) -> (tensor<1024x256xf32>, tensor<1024x1xf32>, tensor<1024x256xf32>) {
  ^bb0(%a: tensor<1024x256xf32>):
    %s = graph.reduce_sum %a {dims = array<i64: 1>, keepdim = true} : (tensor<1024x256xf32>) -> tensor<1024x1xf32>
    %sb = graph.broadcast_in_dim %s {dims = array<i64: 0, 1>} : (tensor<1024x1xf32>) -> tensor<1024x256xf32>
    %c = graph.sub %a, %sb : tensor<1024x256xf32>
    %r = graph.rsqrt %s : tensor<1024x1xf32>
    %rb = graph.broadcast_in_dim %r {dims = array<i64: 0, 1>} : (tensor<1024x1xf32>) -> tensor<1024x256xf32>
    %n = graph.mul %c, %rb : tensor<1024x256xf32>
    graph.yield %c, %r, %n : tensor<1024x256xf32>, tensor<1024x1xf32>, tensor<1024x256xf32>
  }
  return %f#0, %f#1, %f#2 : tensor<1024x256xf32>, tensor<1024x1xf32>, tensor<1024x256xf32>
}

// -----

// A layer norm's x - mean, saved for the backward, beside x (the residual
// stream, computed by the kernel and read by the next layer): the backward's
// kernels read x and the mean (a new per-row output) instead and compute
// x - mean, which the forward kernel no longer writes; x-hat (from x - mean
// and rstd) is derived first and hands its reader x - mean, which is then
// derived in turn. The readers read no more bytes than before.
// CHECK-LABEL: func.func @derived_from_an_output_and_a_row_value
// CHECK: %[[F:.+]]:3 = graph.fusion "kernel0"(%arg0, %arg1) {{.*}} -> (tensor<1024x256xf32>, tensor<1024x1xf32>, tensor<1024x1xf32>)
// CHECK: graph.yield %[[X:.+]], %[[R:.+]], %[[M:.+]] :
// CHECK: graph.fusion "kernel1"(%arg2, %[[F]]#1, %[[F]]#0, %[[F]]#2)
// CHECK-NEXT: ^bb0(%{{.+}}: tensor<1024x256xf32>, %[[RS:.+]]: tensor<1024x1xf32>, %[[XA:.+]]: tensor<1024x256xf32>, %[[MA:.+]]: tensor<1024x1xf32>):
// CHECK: %[[MB:.+]] = graph.broadcast_in_dim %[[MA]]
// CHECK-NEXT: %[[C:.+]] = graph.sub %[[XA]], %[[MB]]
// CHECK: graph.mul %[[C]],
// CHECK: return
func.func @derived_from_an_output_and_a_row_value(%a: tensor<1024x256xf32>, %res: tensor<1024x256xf32>, %dy: tensor<1024x256xf32>) -> (tensor<1024x256xf32>, tensor<256xf32>) {
  %f:4 = graph.fusion "kernel0"(%a, %res) {domain = array<i64: 1024, 256>, kind = "reduction", reduced = array<i64: 1>}
      : (tensor<1024x256xf32>, tensor<1024x256xf32>) -> (tensor<1024x256xf32>, tensor<1024x256xf32>, tensor<1024x1xf32>, tensor<1024x256xf32>) {
  ^bb0(%x0: tensor<1024x256xf32>, %r0: tensor<1024x256xf32>):
    %x = graph.add %x0, %r0 : tensor<1024x256xf32>
    %s = graph.reduce_sum %x {dims = array<i64: 1>, keepdim = true} : (tensor<1024x256xf32>) -> tensor<1024x1xf32>
    %k = graph.full 3.906250e-03 : tensor<1024x1xf32>
    %m = graph.mul %s, %k : tensor<1024x1xf32>
    %mb = graph.broadcast_in_dim %m {dims = array<i64: 0, 1>} : (tensor<1024x1xf32>) -> tensor<1024x256xf32>
    %c = graph.sub %x, %mb : tensor<1024x256xf32>
    %q = graph.mul %c, %c : tensor<1024x256xf32>
    %v = graph.reduce_sum %q {dims = array<i64: 1>, keepdim = true} : (tensor<1024x256xf32>) -> tensor<1024x1xf32>
    %r = graph.rsqrt %v : tensor<1024x1xf32>
    %rb = graph.broadcast_in_dim %r {dims = array<i64: 0, 1>} : (tensor<1024x1xf32>) -> tensor<1024x256xf32>
    %n = graph.mul %c, %rb : tensor<1024x256xf32>
    graph.yield %x, %c, %r, %n : tensor<1024x256xf32>, tensor<1024x256xf32>, tensor<1024x1xf32>, tensor<1024x256xf32>
  }
  %dg = graph.fusion "kernel1"(%dy, %f#3) {domain = array<i64: 1024, 256>, kind = "reduction", reduced = array<i64: 0>}
      : (tensor<1024x256xf32>, tensor<1024x256xf32>) -> tensor<256xf32> {
  ^bb0(%g: tensor<1024x256xf32>, %nn: tensor<1024x256xf32>):
    %0 = graph.mul %g, %nn : tensor<1024x256xf32>
    %1 = graph.reduce_sum %0 {dims = array<i64: 0>} : (tensor<1024x256xf32>) -> tensor<256xf32>
    graph.yield %1 : tensor<256xf32>
  }
  return %f#0, %dg : tensor<1024x256xf32>, tensor<256xf32>
}
