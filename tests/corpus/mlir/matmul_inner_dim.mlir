// EXPECT: error 'graph.matmul' op contraction sizes differ: 'tensor<4x8xf32>' has K = 8 but 'tensor<7x2xf32>' has K = 7
// A matmul whose inner (contraction) dimensions differ: 8 vs 7.
func.func @f(%a: tensor<4x8xf32>, %b: tensor<7x2xf32>) -> tensor<4x2xf32> {
  %0 = graph.matmul %a, %b : (tensor<4x8xf32>, tensor<7x2xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}
