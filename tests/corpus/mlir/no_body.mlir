// EXPECT: error is declared without a body
// A function declared without a body.
// EXPECT(opt): ok
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32>
