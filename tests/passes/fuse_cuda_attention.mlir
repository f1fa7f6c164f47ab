// RUN: tilefuse-opt %s --fuse=target=cuda:sm_90 | FileCheck %s
// RUN: tilefuse-opt %s --fuse=target=cuda:sm_75 | FileCheck %s --check-prefix=SM75
// The CUDA attention kernels take head and value dimensions up to 256:
// fusion keeps such graph.attention / graph.attention_grad ops as library
// steps and writes wider ones out (matmul, exp, reductions). The d256
// gradient kernels' tiles need 68 KiB of shared memory, more than an
// sm_75 gives a block: there heads past 128 are written out.

// SM75-LABEL: func.func @kept(
// SM75-NOT:     graph.attention
// SM75:         graph.matmul

// CHECK-LABEL: func.func @kept(
// CHECK:         graph.attention %
// CHECK:         graph.attention_grad %
// CHECK-NOT:     graph.matmul
func.func @kept(%q: tensor<1x2x16x256xf32>, %v: tensor<1x2x16x64xf32>, %do: tensor<1x2x16x64xf32>) -> (tensor<1x2x16x64xf32>, tensor<1x2x16x256xf32>) {
  %o, %lse = graph.attention %q, %q, %v {scale = 0.125 : f64, causal = true} : (tensor<1x2x16x256xf32>, tensor<1x2x16x256xf32>, tensor<1x2x16x64xf32>) -> (tensor<1x2x16x64xf32>, tensor<1x2x16xf32>)
  %dq, %dk, %dv = graph.attention_grad %q, %q, %v, %o, %lse, %do {scale = 0.125 : f64, causal = true} : (tensor<1x2x16x256xf32>, tensor<1x2x16x256xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16xf32>, tensor<1x2x16x64xf32>) -> (tensor<1x2x16x256xf32>, tensor<1x2x16x256xf32>, tensor<1x2x16x64xf32>)
  return %o, %dq : tensor<1x2x16x64xf32>, tensor<1x2x16x256xf32>
}

// A value dimension past 256 is enough to write both ops out.
// CHECK-LABEL: func.func @written_out(
// CHECK-NOT:     graph.attention
// CHECK:         graph.matmul
// CHECK-NOT:     graph.attention
// CHECK:         return
func.func @written_out(%q: tensor<1x2x16x64xf32>, %v: tensor<1x2x16x264xf32>, %do: tensor<1x2x16x264xf32>) -> (tensor<1x2x16x264xf32>, tensor<1x2x16x64xf32>) {
  %o, %lse = graph.attention %q, %q, %v {scale = 0.125 : f64} : (tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x264xf32>) -> (tensor<1x2x16x264xf32>, tensor<1x2x16xf32>)
  %dq, %dk, %dv = graph.attention_grad %q, %q, %v, %o, %lse, %do {scale = 0.125 : f64} : (tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x264xf32>, tensor<1x2x16x264xf32>, tensor<1x2x16xf32>, tensor<1x2x16x264xf32>) -> (tensor<1x2x16x64xf32>, tensor<1x2x16x64xf32>, tensor<1x2x16x264xf32>)
  return %o, %dq : tensor<1x2x16x264xf32>, tensor<1x2x16x64xf32>
}
