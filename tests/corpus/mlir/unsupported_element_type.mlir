// EXPECT: error 'graph.add' op operand #0 must be statically shaped tensor of f32, f16, bf16, f64, i32, i64 or i1, but got 'tensor<4xi8>'
// An element type the graph dialect does not take (i8).
func.func @f(%a: tensor<4xi8>) -> tensor<4xi8> {
  %0 = graph.add %a, %a : tensor<4xi8>
  return %0 : tensor<4xi8>
}
