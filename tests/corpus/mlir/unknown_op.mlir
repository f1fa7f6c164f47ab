// EXPECT: error custom op 'graph.frobnicate' is unknown
// An op the graph dialect does not define.
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.frobnicate %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
