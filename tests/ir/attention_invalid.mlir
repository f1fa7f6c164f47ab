// RUN: tilefuse-opt %s -split-input-file -verify-diagnostics
//
// The shape rules of graph.attention and graph.attention_grad, one case each.

func.func @heads_do_not_divide(%q: tensor<1x4x8x16xf32>, %k: tensor<1x3x8x16xf32>) {
  // expected-error @+2 {{'graph.attention' op the key/value heads (3) must divide the query heads (4)}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = graph.attention %q, %k, %k {scale = 1.0 : f64} : (tensor<1x4x8x16xf32>, tensor<1x3x8x16xf32>, tensor<1x3x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  return
}

// -----

func.func @head_sizes_differ(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x8x8xf32>) {
  // expected-error @+2 {{'graph.attention' op query 'tensor<1x2x8x16xf32>' and key 'tensor<1x2x8x8xf32>' must have the same head size (last dimension)}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = graph.attention %q, %k, %k {scale = 1.0 : f64} : (tensor<1x2x8x16xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8xf32>)
  return
}

// -----

func.func @mixed_types(%q: tensor<1x2x8x16xbf16>, %k: tensor<1x2x8x16xf32>) {
  // expected-error @+2 {{'graph.attention' op expects query, key and value of one type (f32, bf16, f16 or f64), got 'tensor<1x2x8x16xbf16>', 'tensor<1x2x8x16xf32>' and 'tensor<1x2x8x16xf32>'; cast them first}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = graph.attention %q, %k, %k {scale = 1.0 : f64} : (tensor<1x2x8x16xbf16>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x2x8x16xbf16>, tensor<1x2x8xf32>)
  return
}

// -----

// 16-bit attention keeps its log-sum-exp f32.
func.func @sixteen_bit_statistics(%q: tensor<1x2x8x16xbf16>) {
  // expected-error @+2 {{'graph.attention' op inferred type(s) 'tensor<1x2x8x16xbf16>', 'tensor<1x2x8xf32>' are incompatible with return type(s) of operation 'tensor<1x2x8x16xbf16>', 'tensor<1x2x8xbf16>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = graph.attention %q, %q, %q {scale = 1.0 : f64} : (tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) -> (tensor<1x2x8x16xbf16>, tensor<1x2x8xbf16>)
  return
}

// -----

func.func @mask_of_the_wrong_size(%q: tensor<1x2x8x16xf32>, %m: tensor<1x1x8x7xi1>) {
  // expected-error @+2 {{'graph.attention' op mask 'tensor<1x1x8x7xi1>' must be [..., L, S] of the query's rank with L = 8 and S = 8; reshape or broadcast it}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = graph.attention %q, %q, %q, %m {scale = 1.0 : f64} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x1x8x7xi1>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

func.func @mask_heads(%q: tensor<1x4x8x16xf32>, %m: tensor<1x2x8x8xf32>) {
  // expected-error @+2 {{'graph.attention' op mask 'tensor<1x2x8x8xf32>' must have the query's batch dimensions or all 1, and the query's heads (4) or 1; broadcast it explicitly}}
  // expected-error @+1 {{failed to infer returned types}}
  %o, %l = graph.attention %q, %q, %q, %m {scale = 1.0 : f64} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  return
}

// -----

func.func @grad_of_another_shape(%q: tensor<1x2x8x16xf32>, %l: tensor<1x2x8xf32>, %g: tensor<1x2x8x4xf32>) {
  // expected-error @+2 {{'graph.attention_grad' op result 'tensor<1x2x8x16xf32>' and grad 'tensor<1x2x8x4xf32>' must both be 'tensor<1x2x8x16xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %a, %b, %c = graph.attention_grad %q, %q, %q, %q, %l, %g {scale = 1.0 : f64} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>)
  return
}

// -----

func.func @dropout_without_seed(%q: tensor<1x2x8x16xf32>) {
  // expected-error @+1 {{'graph.attention' op drops probabilities (dropout_p > 0) but has no seed}}
  %o, %l = graph.attention %q, %q, %q {scale = 1.0 : f64, dropout_p = 0.5 : f64} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}

// -----

func.func @dropout_of_one(%q: tensor<1x2x8x16xf32>, %seed: tensor<i64>) {
  // expected-error @+1 {{'graph.attention' op dropout_p must be in [0, 1), got 1.000000e+00}}
  %o, %l = graph.attention %q, %q, %q seed %seed {scale = 1.0 : f64, dropout_p = 1.0 : f64} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<i64>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8xf32>)
  return
}
