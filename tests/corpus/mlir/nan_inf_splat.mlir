// EXPECT: ok
// Splat constants of NaN, +inf and -inf, combined with an argument.
func.func @f(%a: tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xi1>) {
  %nan = graph.constant dense<0x7FC00000> : tensor<4x3xf32>
  %pinf = graph.constant dense<0x7F800000> : tensor<4x3xf32>
  %ninf = graph.constant dense<0xFF800000> : tensor<4x3xf32>
  %0 = graph.add %a, %nan : tensor<4x3xf32>
  %1 = graph.minimum %a, %pinf : tensor<4x3xf32>
  %2 = graph.maximum %a, %ninf : tensor<4x3xf32>
  %3 = graph.lt %a, %pinf : tensor<4x3xf32>
  return %0, %1, %2, %3 : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xi1>
}
