// RUN: tilefuse-opt %s | tilefuse-opt | FileCheck %s
// RUN: tilefuse-opt %s --mlir-print-op-generic | tilefuse-opt | FileCheck %s
//
// Round trip of graph.attention and graph.attention_grad: with and without a
// mask, grouped-query heads (2 key/value heads under 4 query heads), a value
// size unlike the head size, the causal flag elided when false, dropout
// with its seed.

// CHECK-LABEL: func.func @attention
// CHECK-NEXT:    %result, %logsumexp = graph.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.250000e-01 : f64} : (tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>) -> (tensor<2x4x16x6xf32>, tensor<2x4x16xf32>)
// CHECK-NEXT:    %result_0, %logsumexp_1 = graph.attention %arg0, %arg1, %arg2, %arg3 {scale = 5.000000e-01 : f64} : (tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>, tensor<1x1x16x24xi1>) -> (tensor<2x4x16x6xf32>, tensor<2x4x16xf32>)
// CHECK-NEXT:    %grad_query, %grad_key, %grad_value = graph.attention_grad %arg0, %arg1, %arg2, %result, %logsumexp, %arg4 {causal = true, scale = 1.250000e-01 : f64} : (tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>, tensor<2x4x16x6xf32>, tensor<2x4x16xf32>, tensor<2x4x16x6xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>)
// CHECK-NEXT:    %result_2, %logsumexp_3 = graph.attention %arg0, %arg1, %arg2, %arg3 seed %arg5 {dropout_p = 1.000000e-01 : f64, scale = 5.000000e-01 : f64, stream = 2 : i64} : (tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>, tensor<1x1x16x24xi1>, tensor<i64>) -> (tensor<2x4x16x6xf32>, tensor<2x4x16xf32>)
// CHECK-NEXT:    %grad_query_4, %grad_key_5, %grad_value_6 = graph.attention_grad %arg0, %arg1, %arg2, %result_2, %logsumexp_3, %arg4 seed %arg5 {dropout_p = 1.000000e-01 : f64, scale = 5.000000e-01 : f64, stream = 2 : i64}
func.func @attention(%q: tensor<2x4x16x8xf32>, %k: tensor<2x2x24x8xf32>, %v: tensor<2x2x24x6xf32>, %m: tensor<1x1x16x24xi1>, %do: tensor<2x4x16x6xf32>, %seed: tensor<i64>) -> (tensor<2x4x16x6xf32>, tensor<2x4x16x6xf32>, tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>, tensor<2x4x16x6xf32>, tensor<2x2x24x8xf32>) {
  %o, %lse = graph.attention %q, %k, %v {scale = 0.125 : f64, causal = true} : (tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>) -> (tensor<2x4x16x6xf32>, tensor<2x4x16xf32>)
  %o2, %lse2 = graph.attention %q, %k, %v, %m {scale = 0.5 : f64, causal = false} : (tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>, tensor<1x1x16x24xi1>) -> (tensor<2x4x16x6xf32>, tensor<2x4x16xf32>)
  %dq, %dk, %dv = graph.attention_grad %q, %k, %v, %o, %lse, %do {scale = 0.125 : f64, causal = true} : (tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>, tensor<2x4x16x6xf32>, tensor<2x4x16xf32>, tensor<2x4x16x6xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>)
  %o3, %lse3 = graph.attention %q, %k, %v, %m seed %seed {scale = 0.5 : f64, dropout_p = 0.1 : f64, stream = 2 : i64} : (tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>, tensor<1x1x16x24xi1>, tensor<i64>) -> (tensor<2x4x16x6xf32>, tensor<2x4x16xf32>)
  %dq3, %dk3, %dv3 = graph.attention_grad %q, %k, %v, %o3, %lse3, %do seed %seed {scale = 0.5 : f64, dropout_p = 0.1 : f64, stream = 2 : i64} : (tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>, tensor<2x4x16x6xf32>, tensor<2x4x16xf32>, tensor<2x4x16x6xf32>, tensor<i64>) -> (tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>)
  return %o, %o2, %dq, %dk, %dv, %o3, %dk3 : tensor<2x4x16x6xf32>, tensor<2x4x16x6xf32>, tensor<2x4x16x8xf32>, tensor<2x2x24x8xf32>, tensor<2x2x24x6xf32>, tensor<2x4x16x6xf32>, tensor<2x2x24x8xf32>
}
