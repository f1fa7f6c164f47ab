// EXPECT: error type of return operand 0 ('tensor<4xf32>') doesn't match function result type ('tensor<8xf32>')
// The returned value's type disagrees with the function signature.
func.func @f(%a: tensor<4xf32>) -> tensor<8xf32> {
  %0 = graph.neg %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
