// RUN: tilefuse-opt %s --decompose-composites --emit=tile --target=cpu | FileCheck %s
//
// A sum along a row of select(iota == k, v, 0), k constant along the row
// (cross-entropy's target logit), is v at k: a scalar load clamped into the
// row and a select for targets outside it, not a pass over the row.

// CHECK-LABEL: func.func @ce_kernel1_{{[0-9a-f]+}}(
// CHECK:         scf.for
// CHECK:           arith.maximumf
// CHECK:         tile.reduce max
// CHECK:         scf.for
// CHECK:           math.exp
// CHECK:         tile.reduce add
// CHECK-NOT:     scf.for
// CHECK:         %[[IN:.*]] = arith.andi
// CHECK:         %[[AT:.*]] = arith.select %[[IN]], %{{.*}}, %c0_i64 : i64
// CHECK:         tile.load_scalar %arg0[%{{.*}}] : !tile.ptr<f32> -> f32
// CHECK:         arith.select %[[IN]], %{{.*}}, %{{.*}} : f32
// CHECK-NOT:     scf.for
// CHECK:         return
func.func @ce(%x: tensor<64x1000xf32>, %t: tensor<64xi64>) -> tensor<f32> {
  %0 = graph.cross_entropy %x, %t : (tensor<64x1000xf32>, tensor<64xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}
