// gelu's `approximate` must be a string; a wrong attribute kind is a
// diagnostic from the parser, not a crash in the verifier.
// RUN: tilefuse-opt %s -split-input-file -verify-diagnostics

func.func @gelu_integer_approximate(%a: tensor<4xf32>) {
  // expected-error @+1 {{attribute 'approximate' failed to satisfy constraint: string attribute}}
  %0 = graph.gelu %a {approximate = 1 : i64} : tensor<4xf32>
  return
}

// -----

func.func @gelu_unit_approximate(%a: tensor<4xf32>) {
  // expected-error @+1 {{attribute 'approximate' failed to satisfy constraint: string attribute}}
  %0 = graph.gelu %a {approximate} : tensor<4xf32>
  return
}
