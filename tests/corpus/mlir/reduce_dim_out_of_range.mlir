// EXPECT: error 'graph.reduce_sum' op dimension 2 is out of range for 'tensor<4x8xf32>' (rank 2)
// A reduction over dimension 2 of a rank-2 tensor.
func.func @f(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = graph.reduce_sum %a {dims = array<i64: 2>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
