// EXPECT: error 'graph.slice' op dimension 1 of 'tensor<4x8xf32>': need 0 <= start (0) <= limit (9) <= 8
// A slice whose limit (9) is past the dimension (8).
func.func @f(%a: tensor<4x8xf32>) -> tensor<4x9xf32> {
  %0 = graph.slice %a {start = array<i64: 0, 0>, limit = array<i64: 4, 9>, stride = array<i64: 1, 1>} : (tensor<4x8xf32>) -> tensor<4x9xf32>
  return %0 : tensor<4x9xf32>
}
