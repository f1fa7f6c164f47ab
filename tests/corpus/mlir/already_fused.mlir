// EXPECT: error 'graph.fusion' op is already fused
// An already fused function: a hand-written graph.fusion region.
// EXPECT(opt): ok
func.func @f(%x: tensor<64xf32>) -> tensor<64xf32> {
  %r = graph.fusion "kernel0"(%x) {domain = array<i64: 64>, kind = "pointwise", reduced = array<i64>} : (tensor<64xf32>) -> tensor<64xf32> {
  ^bb0(%a: tensor<64xf32>):
    %0 = graph.neg %a : tensor<64xf32>
    %1 = graph.tanh %0 : tensor<64xf32>
    graph.yield %1 : tensor<64xf32>
  }
  return %r : tensor<64xf32>
}
