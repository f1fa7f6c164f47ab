// EXPECT: error 'graph.mul' op operand types differ: 'tensor<4xf32>' vs 'tensor<4xf16>'
// An elementwise op on operands of different element types.
func.func @f(%a: tensor<4xf32>, %b: tensor<4xf16>) -> tensor<4xf32> {
  %0 = "graph.mul"(%a, %b) : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
