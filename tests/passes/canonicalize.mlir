// RUN: tilefuse-opt %s --canonicalize | FileCheck %s
//
// The folds of GraphFolds.cpp: identities disappear, near misses stay.
// (--canonicalize also erases the then-dead graph.full / graph.constant ops,
// and hoists the surviving constants to the top of the function.)

// x + (-0.0) -> x, with the zero on either side, from graph.full or a
// constant. x + (+0.0) is not an identity for floats (-0.0 + 0.0 = +0.0), so
// it stays.
// CHECK-LABEL: func.func @add_zero(
// CHECK-SAME:      %[[X:.+]]: tensor<4xf32>)
// CHECK-NEXT:    %[[P:.+]] = graph.full 0.000000e+00 : tensor<4xf32>
// CHECK-NEXT:    %[[A:.+]] = graph.add %[[X]], %[[P]] : tensor<4xf32>
// CHECK-NEXT:    return %[[X]], %[[X]], %[[X]], %[[A]] : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
func.func @add_zero(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %z = graph.full -0.0 : tensor<4xf32>
  %0 = graph.add %x, %z : tensor<4xf32>
  %1 = graph.add %z, %x : tensor<4xf32>
  %c = graph.constant dense<-0.0> : tensor<4xf32>
  %2 = graph.add %x, %c : tensor<4xf32>
  %p = graph.full 0.0 : tensor<4xf32>
  %3 = graph.add %x, %p : tensor<4xf32>
  return %0, %1, %2, %3 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// The same on integers.
// CHECK-LABEL: func.func @add_zero_int(
// CHECK-SAME:      %[[X:.+]]: tensor<3xi32>)
// CHECK-NEXT:    return %[[X]], %[[X]] : tensor<3xi32>, tensor<3xi32>
func.func @add_zero_int(%x: tensor<3xi32>) -> (tensor<3xi32>, tensor<3xi32>) {
  %z = graph.full 0.0 : tensor<3xi32>
  %0 = graph.add %x, %z : tensor<3xi32>
  %c = graph.constant dense<0> : tensor<3xi32>
  %1 = graph.add %c, %x : tensor<3xi32>
  return %0, %1 : tensor<3xi32>, tensor<3xi32>
}

// A non-zero splat and a non-splat constant with zeros are not folded.
// CHECK-LABEL: func.func @add_nonzero(
// CHECK-SAME:      %[[X:.+]]: tensor<4xf32>)
// CHECK-DAG:     %[[C:.+]] = graph.constant dense<[0.000000e+00, 0.000000e+00, 0.000000e+00, 1.000000e+00]> : tensor<4xf32>
// CHECK-DAG:     %[[H:.+]] = graph.full 5.000000e-01 : tensor<4xf32>
// CHECK-DAG:     %[[A0:.+]] = graph.add %[[X]], %[[H]] : tensor<4xf32>
// CHECK-DAG:     %[[A1:.+]] = graph.add %[[X]], %[[C]] : tensor<4xf32>
// CHECK:         return %[[A0]], %[[A1]]
func.func @add_nonzero(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %h = graph.full 5.0e-1 : tensor<4xf32>
  %0 = graph.add %x, %h : tensor<4xf32>
  %c = graph.constant dense<[0.0, 0.0, 0.0, 1.0]> : tensor<4xf32>
  %1 = graph.add %x, %c : tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// x - 0 -> x, but 0 - x stays (it is not x).
// CHECK-LABEL: func.func @sub_zero(
// CHECK-SAME:      %[[X:.+]]: tensor<2x2xf16>)
// CHECK-NEXT:    %[[Z:.+]] = graph.full 0.000000e+00 : tensor<2x2xf16>
// CHECK-NEXT:    %[[S:.+]] = graph.sub %[[Z]], %[[X]] : tensor<2x2xf16>
// CHECK-NEXT:    return %[[X]], %[[S]] : tensor<2x2xf16>, tensor<2x2xf16>
func.func @sub_zero(%x: tensor<2x2xf16>) -> (tensor<2x2xf16>, tensor<2x2xf16>) {
  %z = graph.full 0.0 : tensor<2x2xf16>
  %0 = graph.sub %x, %z : tensor<2x2xf16>
  %1 = graph.sub %z, %x : tensor<2x2xf16>
  return %0, %1 : tensor<2x2xf16>, tensor<2x2xf16>
}

// x * 1 -> x on either side (bf16 full, i64 constant); x * 2 stays.
// CHECK-LABEL: func.func @mul_one(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<4xbf16>, %[[I:[^:]+]]: tensor<4xi64>)
// CHECK-NEXT:    %[[T:.+]] = graph.full 2.000000e+00 : tensor<4xbf16>
// CHECK-NEXT:    %[[M:.+]] = graph.mul %[[X]], %[[T]] : tensor<4xbf16>
// CHECK-NEXT:    return %[[X]], %[[X]], %[[I]], %[[M]] : tensor<4xbf16>, tensor<4xbf16>, tensor<4xi64>, tensor<4xbf16>
func.func @mul_one(%x: tensor<4xbf16>, %i: tensor<4xi64>) -> (tensor<4xbf16>, tensor<4xbf16>, tensor<4xi64>, tensor<4xbf16>) {
  %o = graph.full 1.0 : tensor<4xbf16>
  %0 = graph.mul %x, %o : tensor<4xbf16>
  %1 = graph.mul %o, %x : tensor<4xbf16>
  %c = graph.constant dense<1> : tensor<4xi64>
  %2 = graph.mul %i, %c : tensor<4xi64>
  %t = graph.full 2.0 : tensor<4xbf16>
  %3 = graph.mul %x, %t : tensor<4xbf16>
  return %0, %1, %2, %3 : tensor<4xbf16>, tensor<4xbf16>, tensor<4xi64>, tensor<4xbf16>
}

// x / 1 -> x (rank 0, f64); 1 / x stays.
// CHECK-LABEL: func.func @div_one(
// CHECK-SAME:      %[[X:.+]]: tensor<f64>)
// CHECK-NEXT:    %[[O:.+]] = graph.full 1.000000e+00 : tensor<f64>
// CHECK-NEXT:    %[[D:.+]] = graph.div %[[O]], %[[X]] : tensor<f64>
// CHECK-NEXT:    return %[[X]], %[[D]] : tensor<f64>, tensor<f64>
func.func @div_one(%x: tensor<f64>) -> (tensor<f64>, tensor<f64>) {
  %o = graph.full 1.0 : tensor<f64>
  %0 = graph.div %x, %o : tensor<f64>
  %1 = graph.div %o, %x : tensor<f64>
  return %0, %1 : tensor<f64>, tensor<f64>
}

// neg(neg(x)) -> x; a third neg leaves a single neg.
// CHECK-LABEL: func.func @neg_neg(
// CHECK-SAME:      %[[X:.+]]: tensor<4xf32>)
// CHECK-NEXT:    %[[N:.+]] = graph.neg %[[X]] : tensor<4xf32>
// CHECK-NEXT:    return %[[X]], %[[N]] : tensor<4xf32>, tensor<4xf32>
func.func @neg_neg(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = graph.neg %x : tensor<4xf32>
  %1 = graph.neg %0 : tensor<4xf32>
  %2 = graph.neg %1 : tensor<4xf32>
  return %1, %2 : tensor<4xf32>, tensor<4xf32>
}

// select with equal branches or a splat constant condition folds; a
// non-splat condition does not.
// CHECK-LABEL: func.func @select(
// CHECK-SAME:      %[[C:[^:]+]]: tensor<4xi1>, %[[A:[^:]+]]: tensor<4xf32>, %[[B:[^:]+]]: tensor<4xf32>)
// CHECK-NEXT:    %[[M:.+]] = graph.constant dense<[true, false, true, false]> : tensor<4xi1>
// CHECK-NEXT:    %[[S:.+]] = graph.select %[[M]], %[[A]], %[[B]] : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    return %[[A]], %[[A]], %[[B]], %[[S]] : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
func.func @select(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = graph.select %c, %a, %a : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %t = graph.constant dense<true> : tensor<4xi1>
  %1 = graph.select %t, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %f = graph.constant dense<false> : tensor<4xi1>
  %2 = graph.select %f, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %m = graph.constant dense<[true, false, true, false]> : tensor<4xi1>
  %3 = graph.select %m, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0, %1, %2, %3 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// A cast to the operand's own type folds; a real cast stays.
// CHECK-LABEL: func.func @cast(
// CHECK-SAME:      %[[X:.+]]: tensor<4xf32>)
// CHECK-NEXT:    %[[H:.+]] = graph.cast %[[X]] : (tensor<4xf32>) -> tensor<4xf16>
// CHECK-NEXT:    return %[[X]], %[[H]] : tensor<4xf32>, tensor<4xf16>
func.func @cast(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf16>) {
  %0 = graph.cast %x : (tensor<4xf32>) -> tensor<4xf32>
  %1 = graph.cast %x : (tensor<4xf32>) -> tensor<4xf16>
  return %0, %1 : tensor<4xf32>, tensor<4xf16>
}

// Identity broadcast_in_dim, transpose (also rank 0), slice, reshape and a
// one-input concat fold to their operand; a real transpose and a strided
// slice stay.
// CHECK-LABEL: func.func @layout_identities(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<4x8xf32>, %[[S:[^:]+]]: tensor<f32>)
// CHECK-NEXT:    %[[T:.+]] = graph.transpose %[[X]] {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
// CHECK-NEXT:    %[[SL:.+]] = graph.slice %[[X]] {limit = array<i64: 4, 8>, start = array<i64: 0, 0>, stride = array<i64: 1, 2>} : (tensor<4x8xf32>) -> tensor<4x4xf32>
// CHECK-NEXT:    return %[[X]], %[[X]], %[[T]], %[[S]], %[[X]], %[[SL]], %[[X]], %[[X]] :
func.func @layout_identities(%x: tensor<4x8xf32>, %s: tensor<f32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<f32>, tensor<4x8xf32>, tensor<4x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = graph.broadcast_in_dim %x {dims = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = graph.transpose %x {perm = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %3 = graph.transpose %s {perm = array<i64>} : (tensor<f32>) -> tensor<f32>
  %4 = graph.slice %x {start = array<i64: 0, 0>, limit = array<i64: 4, 8>, stride = array<i64: 1, 1>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = graph.slice %x {start = array<i64: 0, 0>, limit = array<i64: 4, 8>, stride = array<i64: 1, 2>} : (tensor<4x8xf32>) -> tensor<4x4xf32>
  %6 = graph.reshape %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %7 = graph.concat %x {dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0, %1, %2, %3, %4, %5, %6, %7 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<f32>, tensor<4x8xf32>, tensor<4x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// A broadcast that really broadcasts (size-1 dim) is kept.
// CHECK-LABEL: func.func @broadcast_kept(
// CHECK-SAME:      %[[X:.+]]: tensor<1x8xf32>)
// CHECK-NEXT:    %[[B:.+]] = graph.broadcast_in_dim %[[X]] {dims = array<i64: 0, 1>} : (tensor<1x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    return %[[B]] : tensor<4x8xf32>
func.func @broadcast_kept(%x: tensor<1x8xf32>) -> tensor<4x8xf32> {
  %0 = graph.broadcast_in_dim %x {dims = array<i64: 0, 1>} : (tensor<1x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// reshape(reshape(x)) -> reshape(x); reshaping back to x's type gives x.
// CHECK-LABEL: func.func @reshape_reshape(
// CHECK-SAME:      %[[X:.+]]: tensor<4x8xf32>)
// CHECK-NEXT:    %[[R:.+]] = graph.reshape %[[X]] : (tensor<4x8xf32>) -> tensor<2x16xf32>
// CHECK-NEXT:    return %[[R]], %[[X]] : tensor<2x16xf32>, tensor<4x8xf32>
// CHECK-NOT:     tensor<32xf32>
func.func @reshape_reshape(%x: tensor<4x8xf32>) -> (tensor<2x16xf32>, tensor<4x8xf32>) {
  %0 = graph.reshape %x : (tensor<4x8xf32>) -> tensor<32xf32>
  %1 = graph.reshape %0 : (tensor<32xf32>) -> tensor<2x16xf32>
  %2 = graph.reshape %1 : (tensor<2x16xf32>) -> tensor<4x8xf32>
  return %1, %2 : tensor<2x16xf32>, tensor<4x8xf32>
}

// Folds compose: neg(neg(x * 1 + (-0.0))) collapses to x.
// CHECK-LABEL: func.func @chain(
// CHECK-SAME:      %[[X:.+]]: tensor<2x3xf32>)
// CHECK-NEXT:    return %[[X]] : tensor<2x3xf32>
func.func @chain(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %o = graph.full 1.0 : tensor<2x3xf32>
  %z = graph.full -0.0 : tensor<2x3xf32>
  %0 = graph.mul %x, %o : tensor<2x3xf32>
  %1 = graph.add %0, %z : tensor<2x3xf32>
  %2 = graph.neg %1 : tensor<2x3xf32>
  %3 = graph.neg %2 : tensor<2x3xf32>
  %4 = graph.transpose %3 {perm = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %4 : tensor<2x3xf32>
}

// A matmul operand transposed in its last two dimensions is read in place
// with the transpose flag flipped (twice flipped is no flag); the batch
// dimensions stay. A transpose of other dimensions stays.
// CHECK-LABEL: func.func @matmul_of_transposes(
// CHECK-SAME:      %[[Q:[^:]+]]: tensor<2x3x4x8xf32>, %[[K:[^:]+]]: tensor<2x3x5x8xf32>, %[[W:[^:]+]]: tensor<6x4xf32>, %[[X:[^:]+]]: tensor<4x6xf32>, %[[B:[^:]+]]: tensor<3x2x4x8xf32>)
// CHECK-NEXT:    %[[S:.+]] = graph.matmul %[[Q]], %[[K]] {transpose_rhs = true} : (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>) -> tensor<2x3x4x5xf32>
// CHECK-NEXT:    %[[G:.+]] = graph.matmul %[[W]], %[[X]] {transpose_lhs = true, transpose_rhs = true} : (tensor<6x4xf32>, tensor<4x6xf32>) -> tensor<4x4xf32>
// CHECK-NEXT:    %[[Y:.+]] = graph.matmul %[[X]], %[[W]] : (tensor<4x6xf32>, tensor<6x4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT:    %[[T:.+]] = graph.transpose %[[B]] {perm = array<i64: 1, 0, 2, 3>}
// CHECK-NEXT:    %[[O:.+]] = graph.matmul %[[T]], %[[K]] {transpose_rhs = true}
// CHECK-NEXT:    return %[[S]], %[[G]], %[[Y]], %[[O]]
func.func @matmul_of_transposes(%q: tensor<2x3x4x8xf32>, %k: tensor<2x3x5x8xf32>, %w: tensor<6x4xf32>, %x: tensor<4x6xf32>, %b: tensor<3x2x4x8xf32>) -> (tensor<2x3x4x5xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<2x3x4x5xf32>) {
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x3x5x8xf32>) -> tensor<2x3x8x5xf32>
  %s = graph.matmul %q, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x5xf32>) -> tensor<2x3x4x5xf32>
  %wt = graph.transpose %w {perm = array<i64: 1, 0>} : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %g = graph.matmul %wt, %x {transpose_rhs = true} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x4xf32>
  %xt = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  %y = graph.matmul %xt, %w {transpose_lhs = true} : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<4x4xf32>
  %bt = graph.transpose %b {perm = array<i64: 1, 0, 2, 3>} : (tensor<3x2x4x8xf32>) -> tensor<2x3x4x8xf32>
  %o = graph.matmul %bt, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x5xf32>) -> tensor<2x3x4x5xf32>
  return %s, %g, %y, %o : tensor<2x3x4x5xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<2x3x4x5xf32>
}

// A transposed product is the product of the swapped operands, written in
// the layout its reader wants (batch dimensions kept; transposed twice, the
// product is the first one again); a product with a second reader, or
// transposed in other dimensions, stays.
// CHECK-LABEL: func.func @transposed_matmul(
// CHECK-SAME:      %[[A:[^:]+]]: tensor<2x4x8xf32>, %[[B:[^:]+]]: tensor<2x8x5xf32>, %[[C:[^:]+]]: tensor<2x5x8xf32>)
// CHECK-NEXT:    %[[P:.+]] = graph.matmul %[[B]], %[[A]] {transpose_lhs = true, transpose_rhs = true} : (tensor<2x8x5xf32>, tensor<2x4x8xf32>) -> tensor<2x5x4xf32>
// CHECK-NEXT:    %[[Q:.+]] = graph.matmul %[[C]], %[[A]] {transpose_rhs = true} : (tensor<2x5x8xf32>, tensor<2x4x8xf32>) -> tensor<2x5x4xf32>
// CHECK-NEXT:    %[[R:.+]] = graph.matmul %[[A]], %[[B]] : (tensor<2x4x8xf32>, tensor<2x8x5xf32>) -> tensor<2x4x5xf32>
// CHECK-NEXT:    %[[RT:.+]] = graph.transpose %[[R]] {perm = array<i64: 0, 2, 1>}
// CHECK-NEXT:    %[[RB:.+]] = graph.transpose %[[R]] {perm = array<i64: 1, 0, 2>}
// CHECK-NEXT:    return %[[P]], %[[Q]], %[[RT]], %[[R]], %[[RB]] :
func.func @transposed_matmul(%a: tensor<2x4x8xf32>, %b: tensor<2x8x5xf32>, %c: tensor<2x5x8xf32>) -> (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x4x5xf32>, tensor<4x2x5xf32>) {
  %p = graph.matmul %a, %b : (tensor<2x4x8xf32>, tensor<2x8x5xf32>) -> tensor<2x4x5xf32>
  %pt = graph.transpose %p {perm = array<i64: 0, 2, 1>} : (tensor<2x4x5xf32>) -> tensor<2x5x4xf32>
  %q = graph.matmul %c, %a {transpose_rhs = true, transpose_lhs = false} : (tensor<2x5x8xf32>, tensor<2x4x8xf32>) -> tensor<2x5x4xf32>
  %qt = graph.transpose %q {perm = array<i64: 0, 2, 1>} : (tensor<2x5x4xf32>) -> tensor<2x4x5xf32>
  %qtt = graph.transpose %qt {perm = array<i64: 0, 2, 1>} : (tensor<2x4x5xf32>) -> tensor<2x5x4xf32>
  %r = graph.matmul %a, %b : (tensor<2x4x8xf32>, tensor<2x8x5xf32>) -> tensor<2x4x5xf32>
  %rt = graph.transpose %r {perm = array<i64: 0, 2, 1>} : (tensor<2x4x5xf32>) -> tensor<2x5x4xf32>
  %rb = graph.transpose %r {perm = array<i64: 1, 0, 2>} : (tensor<2x4x5xf32>) -> tensor<4x2x5xf32>
  return %pt, %qtt, %rt, %r, %rb : tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x4x5xf32>, tensor<4x2x5xf32>
}

// Autocast's casts between a transpose and a matmul: a bf16 copy of a
// transposed weight read only by matmuls is cast untransposed and read
// transposed in place (a tied LM head); the f32 gradient of a product
// transposed after its cast becomes the swapped product. A cast with another
// reader keeps its transpose.
// CHECK-LABEL: func.func @casts_between_transposes_and_matmuls(
// CHECK-SAME:      %[[W:[^:]+]]: tensor<16x8xf32>, %[[H:[^:]+]]: tensor<4x8xbf16>, %[[D:[^:]+]]: tensor<4x16xbf16>)
// CHECK-NEXT:    %[[WC:.+]] = graph.cast %[[W]] : (tensor<16x8xf32>) -> tensor<16x8xbf16>
// CHECK-NEXT:    %[[L:.+]] = graph.matmul %[[H]], %[[WC]] {transpose_rhs = true} : (tensor<4x8xbf16>, tensor<16x8xbf16>) -> tensor<4x16xbf16>
// CHECK-NEXT:    %[[G:.+]] = graph.matmul %[[D]], %[[H]] {transpose_lhs = true} : (tensor<4x16xbf16>, tensor<4x8xbf16>) -> tensor<16x8xbf16>
// CHECK-NEXT:    %[[GC:.+]] = graph.cast %[[G]] : (tensor<16x8xbf16>) -> tensor<16x8xf32>
// CHECK-NEXT:    %[[WT:.+]] = graph.transpose %[[W]] {perm = array<i64: 1, 0>}
// CHECK-NEXT:    %[[WTC:.+]] = graph.cast %[[WT]] : (tensor<8x16xf32>) -> tensor<8x16xbf16>
// CHECK-NEXT:    %[[K:.+]] = graph.matmul %[[H]], %[[WTC]] : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xbf16>
// CHECK-NEXT:    return %[[L]], %[[GC]], %[[K]], %[[WTC]] :
func.func @casts_between_transposes_and_matmuls(%w: tensor<16x8xf32>, %h: tensor<4x8xbf16>, %d: tensor<4x16xbf16>) -> (tensor<4x16xbf16>, tensor<16x8xf32>, tensor<4x16xbf16>, tensor<8x16xbf16>) {
  %wt = graph.transpose %w {perm = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %wc = graph.cast %wt : (tensor<8x16xf32>) -> tensor<8x16xbf16>
  %l = graph.matmul %h, %wc : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xbf16>
  %g = graph.matmul %h, %d {transpose_lhs = true} : (tensor<4x8xbf16>, tensor<4x16xbf16>) -> tensor<8x16xbf16>
  %gc = graph.cast %g : (tensor<8x16xbf16>) -> tensor<8x16xf32>
  %gt = graph.transpose %gc {perm = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %wt2 = graph.transpose %w {perm = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %wc2 = graph.cast %wt2 : (tensor<8x16xf32>) -> tensor<8x16xbf16>
  %k = graph.matmul %h, %wc2 : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xbf16>
  return %l, %gt, %k, %wc2 : tensor<4x16xbf16>, tensor<16x8xf32>, tensor<4x16xbf16>, tensor<8x16xbf16>
}

// A transpose of a transpose is one transpose of the operand (dim i of the
// result is the operand's dim inner[outer[i]]), and the operand itself
// when that is the identity: AOTAutograd saves t(t(w)) of a weight.
// CHECK-LABEL: func.func @transpose_of_transpose(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<2x3x4xf32>
// CHECK:         %[[T:.+]] = graph.transpose %[[X]] {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK-NOT:     graph.transpose
// CHECK:         return %[[X]], %[[T]]
func.func @transpose_of_transpose(%x: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<4x2x3xf32>) {
  %a = graph.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %b = graph.transpose %a {perm = array<i64: 1, 0, 2>} : (tensor<3x2x4xf32>) -> tensor<2x3x4xf32>
  %c = graph.transpose %a {perm = array<i64: 2, 1, 0>} : (tensor<3x2x4xf32>) -> tensor<4x2x3xf32>
  return %b, %c : tensor<2x3x4xf32>, tensor<4x2x3xf32>
}
