// EXPECT: error argument 0 of @g is 'f32'
// A scalar (non-tensor) argument.
// EXPECT(opt): ok
// EXPECT(compile): error function 'g' uses f32
func.func @g(%x: f32, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.neg %y : tensor<4xf32>
  return %0 : tensor<4xf32>
}
