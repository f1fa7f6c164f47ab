// EXPECT: ok
// A valid baseline: matmul, softmax over the last dimension and a full reduction.
func.func @f(%x: tensor<4x16xf32>, %w: tensor<16x8xf32>) -> (tensor<4x8xf32>, tensor<f32>) {
  %0 = graph.matmul %x, %w : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %1 = graph.softmax %0 {dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = graph.reduce_sum %0 {dims = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<f32>
  return %1, %2 : tensor<4x8xf32>, tensor<f32>
}
