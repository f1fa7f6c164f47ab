// EXPECT: error 'arith.addf' op cannot be fused
// A non-graph op (arith.addf) on tensors.
// EXPECT(opt): ok
// EXPECT(compile): error 'arith.addf' is not a graph-dialect op
func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.addf %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}
