// EXPECT: error tensor<2147483648x2147483648xf32> has more elements or bytes than a 64-bit size can count
// Each dimension fits in int64 but the byte count (2^31 * 2^31 * 4 bytes) does not.
// EXPECT(opt): ok
func.func @f(%a: tensor<2147483648x2147483648xf32>) -> tensor<2147483648x2147483648xf32> {
  %0 = graph.neg %a : tensor<2147483648x2147483648xf32>
  return %0 : tensor<2147483648x2147483648xf32>
}
