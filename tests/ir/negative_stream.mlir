// A negative random stream is rejected (I64Attr getters are unsigned, so the
// check must read the signed value).
// RUN: tilefuse-opt %s -split-input-file -verify-diagnostics

func.func @random_uniform_stream(%s: tensor<i64>) {
  // expected-error @+1 {{'graph.random_uniform' op stream must be >= 0, got -1}}
  %0 = graph.random_uniform %s {stream = -1 : i64} : (tensor<i64>) -> tensor<4xf32>
  return
}

// -----

func.func @dropout_stream(%x: tensor<4xf32>, %s: tensor<i64>) {
  // expected-error @+2 {{'graph.dropout' op stream must be >= 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = graph.dropout %x, %s {p = 0.5 : f64, stream = -2 : i64} : (tensor<4xf32>, tensor<i64>) -> tensor<4xf32>
  return
}
