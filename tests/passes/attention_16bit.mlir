// RUN: tilefuse-opt %s --split-input-file --fuse=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: tilefuse-opt %s --split-input-file --fuse=target=cuda:sm_90 | FileCheck %s --check-prefix=CUDA
// 16-bit attention: bf16 (or f16) q, k, v and result, an f32 log-sum-exp.
// The CPU's kernels take bf16 as it is and widen f16 (the f32 op between
// casts); CUDA's kernels take both as they are.

// CPU-LABEL: func.func @bf16(
// CPU:         %{{.*}}, %{{.*}} = graph.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.250000e-01 : f64} : (tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) -> (tensor<1x2x8x16xbf16>, tensor<1x2x8xf32>)
// CPU:         graph.attention_grad {{.*}} -> (tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>)
// CUDA-LABEL: func.func @bf16(
// CUDA-NOT:     graph.cast
// CUDA:         graph.attention {{.*}} -> (tensor<1x2x8x16xbf16>, tensor<1x2x8xf32>)
// CUDA-NOT:     graph.cast
// CUDA:         graph.attention_grad {{.*}} -> (tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>)
func.func @bf16(%q: tensor<1x2x8x16xbf16>, %k: tensor<1x2x8x16xbf16>, %v: tensor<1x2x8x16xbf16>, %do: tensor<1x2x8x16xbf16>) -> (tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) {
  %o, %lse = graph.attention %q, %k, %v {scale = 0.125 : f64, causal = true} : (tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) -> (tensor<1x2x8x16xbf16>, tensor<1x2x8xf32>)
  %dq, %dk, %dv = graph.attention_grad %q, %k, %v, %o, %lse, %do {scale = 0.125 : f64, causal = true} : (tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8xf32>, tensor<1x2x8x16xbf16>) -> (tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>)
  return %o, %dq, %dk, %dv : tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>
}

// -----

// CPU-LABEL: func.func @f16(
// CPU:         graph.cast {{.*}} : (tensor<1x2x8x16xf16>) -> tensor<1x2x8x16xf32>
// CPU:         graph.attention {{.*}} -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
// CPU:         graph.cast {{.*}} : (tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf16>
// CUDA-LABEL: func.func @f16(
// CUDA-NOT:     graph.cast
// CUDA:         graph.attention {{.*}} -> (tensor<1x2x8x16xf16>, tensor<1x2x8xf32>)
func.func @f16(%q: tensor<1x2x8x16xf16>, %k: tensor<1x2x8x16xf16>, %v: tensor<1x2x8x16xf16>) -> (tensor<1x2x8x16xf16>, tensor<1x2x8xf32>) {
  %o, %lse = graph.attention %q, %k, %v {scale = 0.125 : f64} : (tensor<1x2x8x16xf16>, tensor<1x2x8x16xf16>, tensor<1x2x8x16xf16>) -> (tensor<1x2x8x16xf16>, tensor<1x2x8xf32>)
  return %o, %lse : tensor<1x2x8x16xf16>, tensor<1x2x8xf32>
}
