// EXPECT: error the module has 2 functions
// A module with two functions, compiled with the default entry.
// EXPECT(opt,fused,llvm,cuda): ok
func.func @first(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.neg %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @second(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.tanh %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
