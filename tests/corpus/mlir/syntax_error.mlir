// EXPECT: error expected ':'
// A syntax error: operands not separated by a comma.
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.add %a %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
