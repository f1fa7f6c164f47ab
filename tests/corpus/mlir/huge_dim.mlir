// EXPECT: error tensor<4611686018427387905xf32> has more elements or bytes than a 64-bit size can count
// A dimension above 2^62 (2^62 + 1).
// EXPECT(opt): ok
func.func @f(%a: tensor<4611686018427387905xf32>) -> tensor<4611686018427387905xf32> {
  %0 = graph.neg %a : tensor<4611686018427387905xf32>
  return %0 : tensor<4611686018427387905xf32>
}
