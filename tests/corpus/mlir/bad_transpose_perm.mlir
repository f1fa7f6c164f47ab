// EXPECT: error 'graph.transpose' op perm [1, 1] is not a permutation of 0..1
// A transpose whose perm is not a permutation.
func.func @f(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %0 = graph.transpose %a {perm = array<i64: 1, 1>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
