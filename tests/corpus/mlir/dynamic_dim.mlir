// EXPECT: error argument 0 of @f is 'tensor<?xf32>'
// A dynamic dimension in an argument type.
// EXPECT(opt): ok
// EXPECT(compile): error function 'f' uses tensor<?xf32>
func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {
  return %a : tensor<?xf32>
}
