// EXPECT: error 'func.call' op cannot be fused
// A func.call from one graph function to another.
// EXPECT(opt): ok
// EXPECT(compile): error 'func.call' is not a graph-dialect op
func.func @helper(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.neg %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @helper(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
