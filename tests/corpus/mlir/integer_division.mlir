// EXPECT: ok
// Integer division of i32 and i64 tensors (C-style truncation toward zero is the reference).
func.func @f(%a: tensor<8xi32>, %b: tensor<8xi32>, %c: tensor<2x3xi64>, %d: tensor<2x3xi64>) -> (tensor<8xi32>, tensor<2x3xi64>) {
  %0 = graph.div %a, %b : tensor<8xi32>
  %1 = graph.div %c, %d : tensor<2x3xi64>
  return %0, %1 : tensor<8xi32>, tensor<2x3xi64>
}
