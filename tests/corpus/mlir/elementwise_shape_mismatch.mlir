// EXPECT: error 'graph.add' op operand types differ: 'tensor<4xf32>' vs 'tensor<3xf32>'
// An elementwise op on operands of different shapes (no implicit broadcast).
func.func @f(%a: tensor<4xf32>, %b: tensor<3xf32>) -> tensor<4xf32> {
  %0 = "graph.add"(%a, %b) : (tensor<4xf32>, tensor<3xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
