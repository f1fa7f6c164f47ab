// A non-tensor or unranked type in the elementwise custom syntax is reported
// by the operand type constraint, never read as a tensor (it used to crash).
// RUN: tilefuse-opt %s -split-input-file -verify-diagnostics

func.func @add_scalar(%a: i32) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor}}
  %0 = graph.add %a, %a : i32
  return
}

// -----

func.func @eq_unranked(%a: tensor<*xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor}}
  %0 = graph.eq %a, %a : tensor<*xf32>
  return
}

// -----

func.func @exp_scalar(%a: f32) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor}}
  %0 = graph.exp %a : f32
  return
}
