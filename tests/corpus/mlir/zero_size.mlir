// EXPECT: ok
// A zero-size tensor argument and result.
func.func @f(%a: tensor<0x4xf32>, %b: tensor<0x4xf32>) -> (tensor<0x4xf32>, tensor<4xf32>) {
  %0 = graph.add %a, %b : tensor<0x4xf32>
  %1 = graph.tanh %0 : tensor<0x4xf32>
  %2 = graph.reduce_sum %1 {dims = array<i64: 0>} : (tensor<0x4xf32>) -> tensor<4xf32>
  return %1, %2 : tensor<0x4xf32>, tensor<4xf32>
}
