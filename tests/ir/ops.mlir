// RUN: tilefuse-opt %s | tilefuse-opt | FileCheck %s
// RUN: tilefuse-opt %s --mlir-print-op-generic | tilefuse-opt | FileCheck %s
// RUN: tilefuse-opt %s --mlir-print-op-generic | tilefuse-opt --mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC
//
// Round trip of every graph op. The custom form must print, re-parse and
// print identically, also when it goes through the generic form; the CHECK
// lines pin the printed syntax including the inferred result types. GENERIC
// lines pin the generic spelling (properties, functional types) of a sample.

// Binary arithmetic on f32.
// CHECK-LABEL: func.func @binary_f32(%arg0: tensor<4x8xf32>, %arg1: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
// CHECK-NEXT:    %0 = graph.add %arg0, %arg1 : tensor<4x8xf32>
// CHECK-NEXT:    %1 = graph.sub %arg0, %arg1 : tensor<4x8xf32>
// CHECK-NEXT:    %2 = graph.mul %arg0, %arg1 : tensor<4x8xf32>
// CHECK-NEXT:    %3 = graph.div %arg0, %arg1 : tensor<4x8xf32>
// CHECK-NEXT:    %4 = graph.pow %arg0, %arg1 : tensor<4x8xf32>
// CHECK-NEXT:    %5 = graph.maximum %arg0, %arg1 : tensor<4x8xf32>
// CHECK-NEXT:    %6 = graph.minimum %arg0, %arg1 : tensor<4x8xf32>
// CHECK-NEXT:    return %0, %1, %2, %3, %4, %5, %6 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
// CHECK-NEXT:  }
// GENERIC-LABEL: sym_name = "binary_f32"
// GENERIC:       %{{.*}} = "graph.add"(%{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
func.func @binary_f32(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = graph.add %a, %b : tensor<4x8xf32>
  %1 = graph.sub %a, %b : tensor<4x8xf32>
  %2 = graph.mul %a, %b : tensor<4x8xf32>
  %3 = graph.div %a, %b : tensor<4x8xf32>
  %4 = graph.pow %a, %b : tensor<4x8xf32>
  %5 = graph.maximum %a, %b : tensor<4x8xf32>
  %6 = graph.minimum %a, %b : tensor<4x8xf32>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// Arithmetic on integer tensors (i32, i64) and pow on a rank-0 f64 tensor.
// CHECK-LABEL: func.func @binary_int(%arg0: tensor<3xi32>, %arg1: tensor<3xi32>, %arg2: tensor<2x2xi64>, %arg3: tensor<f64>) -> (tensor<3xi32>, tensor<3xi32>, tensor<2x2xi64>, tensor<2x2xi64>, tensor<f64>) {
// CHECK-NEXT:    %0 = graph.add %arg0, %arg1 : tensor<3xi32>
// CHECK-NEXT:    %1 = graph.div %arg0, %arg1 : tensor<3xi32>
// CHECK-NEXT:    %2 = graph.maximum %arg2, %arg2 : tensor<2x2xi64>
// CHECK-NEXT:    %3 = graph.minimum %arg2, %arg2 : tensor<2x2xi64>
// CHECK-NEXT:    %4 = graph.pow %arg3, %arg3 : tensor<f64>
// CHECK-NEXT:    return %0, %1, %2, %3, %4 : tensor<3xi32>, tensor<3xi32>, tensor<2x2xi64>, tensor<2x2xi64>, tensor<f64>
// CHECK-NEXT:  }
// GENERIC-LABEL: sym_name = "binary_int"
// GENERIC:       %{{.*}} = "graph.div"(%{{.*}}, %{{.*}}) : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
func.func @binary_int(%a: tensor<3xi32>, %b: tensor<3xi32>, %c: tensor<2x2xi64>, %d: tensor<f64>) -> (tensor<3xi32>, tensor<3xi32>, tensor<2x2xi64>, tensor<2x2xi64>, tensor<f64>) {
  %0 = graph.add %a, %b : tensor<3xi32>
  %1 = graph.div %a, %b : tensor<3xi32>
  %2 = graph.maximum %c, %c : tensor<2x2xi64>
  %3 = graph.minimum %c, %c : tensor<2x2xi64>
  %4 = graph.pow %d, %d : tensor<f64>
  return %0, %1, %2, %3, %4 : tensor<3xi32>, tensor<3xi32>, tensor<2x2xi64>, tensor<2x2xi64>, tensor<f64>
}

// Comparisons infer an i1 result of the operand shape, for float, integer
// and i1 operands (rank 0 included).
// CHECK-LABEL: func.func @compare(%arg0: tensor<4xf16>, %arg1: tensor<4xf16>, %arg2: tensor<2x3xi64>, %arg3: tensor<5xi1>, %arg4: tensor<bf16>) -> (tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<2x3xi1>, tensor<5xi1>, tensor<i1>) {
// CHECK-NEXT:    %0 = graph.eq %arg0, %arg1 : tensor<4xf16>
// CHECK-NEXT:    %1 = graph.ne %arg0, %arg1 : tensor<4xf16>
// CHECK-NEXT:    %2 = graph.lt %arg0, %arg1 : tensor<4xf16>
// CHECK-NEXT:    %3 = graph.le %arg0, %arg1 : tensor<4xf16>
// CHECK-NEXT:    %4 = graph.gt %arg2, %arg2 : tensor<2x3xi64>
// CHECK-NEXT:    %5 = graph.ge %arg3, %arg3 : tensor<5xi1>
// CHECK-NEXT:    %6 = graph.eq %arg4, %arg4 : tensor<bf16>
// CHECK-NEXT:    return %0, %1, %2, %3, %4, %5, %6 : tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<2x3xi1>, tensor<5xi1>, tensor<i1>
// CHECK-NEXT:  }
// GENERIC-LABEL: sym_name = "compare"
// GENERIC:       %{{.*}} = "graph.eq"(%{{.*}}, %{{.*}}) : (tensor<4xf16>, tensor<4xf16>) -> tensor<4xi1>
// GENERIC:       %{{.*}} = "graph.ge"(%{{.*}}, %{{.*}}) : (tensor<5xi1>, tensor<5xi1>) -> tensor<5xi1>
// GENERIC:       %{{.*}} = "graph.eq"(%{{.*}}, %{{.*}}) : (tensor<bf16>, tensor<bf16>) -> tensor<i1>
func.func @compare(%a: tensor<4xf16>, %b: tensor<4xf16>, %i: tensor<2x3xi64>, %p: tensor<5xi1>, %s: tensor<bf16>) -> (tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<2x3xi1>, tensor<5xi1>, tensor<i1>) {
  %0 = graph.eq %a, %b : tensor<4xf16>
  %1 = graph.ne %a, %b : tensor<4xf16>
  %2 = graph.lt %a, %b : tensor<4xf16>
  %3 = graph.le %a, %b : tensor<4xf16>
  %4 = graph.gt %i, %i : tensor<2x3xi64>
  %5 = graph.ge %p, %p : tensor<5xi1>
  %6 = graph.eq %s, %s : tensor<bf16>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<2x3xi1>, tensor<5xi1>, tensor<i1>
}

// Unary ops on bf16, rank-0 f32 and i32; gelu elides its default
// approximate = "none".
// CHECK-LABEL: func.func @unary(%arg0: tensor<2x3xbf16>, %arg1: tensor<f32>, %arg2: tensor<4xi32>) -> (tensor<2x3xbf16>, tensor<f32>, tensor<4xi32>) {
// CHECK-NEXT:    %0 = graph.neg %arg0 : tensor<2x3xbf16>
// CHECK-NEXT:    %1 = graph.abs %0 : tensor<2x3xbf16>
// CHECK-NEXT:    %2 = graph.exp %1 : tensor<2x3xbf16>
// CHECK-NEXT:    %3 = graph.log %2 : tensor<2x3xbf16>
// CHECK-NEXT:    %4 = graph.tanh %3 : tensor<2x3xbf16>
// CHECK-NEXT:    %5 = graph.sqrt %4 : tensor<2x3xbf16>
// CHECK-NEXT:    %6 = graph.rsqrt %5 : tensor<2x3xbf16>
// CHECK-NEXT:    %7 = graph.sigmoid %6 : tensor<2x3xbf16>
// CHECK-NEXT:    %8 = graph.erf %7 : tensor<2x3xbf16>
// CHECK-NEXT:    %9 = graph.relu %8 : tensor<2x3xbf16>
// CHECK-NEXT:    %10 = graph.silu %9 : tensor<2x3xbf16>
// CHECK-NEXT:    %11 = graph.gelu %10 : tensor<2x3xbf16>
// CHECK-NEXT:    %12 = graph.gelu %11 {approximate = "tanh"} : tensor<2x3xbf16>
// CHECK-NEXT:    %13 = graph.gelu %12 : tensor<2x3xbf16>
// CHECK-NEXT:    %14 = graph.exp %arg1 : tensor<f32>
// CHECK-NEXT:    %15 = graph.neg %arg2 : tensor<4xi32>
// CHECK-NEXT:    %16 = graph.abs %15 : tensor<4xi32>
// CHECK-NEXT:    return %13, %14, %16 : tensor<2x3xbf16>, tensor<f32>, tensor<4xi32>
// CHECK-NEXT:  }
// GENERIC-LABEL: sym_name = "unary"
// GENERIC:       %{{.*}} = "graph.gelu"(%{{.*}}) <{approximate = "none"}> : (tensor<2x3xbf16>) -> tensor<2x3xbf16>
// GENERIC:       %{{.*}} = "graph.gelu"(%{{.*}}) <{approximate = "tanh"}> : (tensor<2x3xbf16>) -> tensor<2x3xbf16>
// GENERIC:       %{{.*}} = "graph.abs"(%{{.*}}) : (tensor<4xi32>) -> tensor<4xi32>
func.func @unary(%x: tensor<2x3xbf16>, %y: tensor<f32>, %z: tensor<4xi32>) -> (tensor<2x3xbf16>, tensor<f32>, tensor<4xi32>) {
  %0 = graph.neg %x : tensor<2x3xbf16>
  %1 = graph.abs %0 : tensor<2x3xbf16>
  %2 = graph.exp %1 : tensor<2x3xbf16>
  %3 = graph.log %2 : tensor<2x3xbf16>
  %4 = graph.tanh %3 : tensor<2x3xbf16>
  %5 = graph.sqrt %4 : tensor<2x3xbf16>
  %6 = graph.rsqrt %5 : tensor<2x3xbf16>
  %7 = graph.sigmoid %6 : tensor<2x3xbf16>
  %8 = graph.erf %7 : tensor<2x3xbf16>
  %9 = graph.relu %8 : tensor<2x3xbf16>
  %10 = graph.silu %9 : tensor<2x3xbf16>
  %11 = graph.gelu %10 : tensor<2x3xbf16>
  %12 = graph.gelu %11 {approximate = "tanh"} : tensor<2x3xbf16>
  %13 = graph.gelu %12 {approximate = "none"} : tensor<2x3xbf16>
  %14 = graph.exp %y : tensor<f32>
  %15 = graph.neg %z : tensor<4xi32>
  %16 = graph.abs %15 : tensor<4xi32>
  return %13, %14, %16 : tensor<2x3xbf16>, tensor<f32>, tensor<4xi32>
}

// select (also rank 0) and casts between f32, bf16, i32, i1 and f64.
// CHECK-LABEL: func.func @select_cast(%arg0: tensor<4xi1>, %arg1: tensor<4xf32>, %arg2: tensor<4xf32>, %arg3: tensor<i1>, %arg4: tensor<i64>) -> (tensor<4xf32>, tensor<i64>, tensor<4xbf16>, tensor<4xi32>, tensor<4xi1>, tensor<4xf64>) {
// CHECK-NEXT:    %0 = graph.select %arg0, %arg1, %arg2 : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %1 = graph.select %arg3, %arg4, %arg4 : (tensor<i1>, tensor<i64>, tensor<i64>) -> tensor<i64>
// CHECK-NEXT:    %2 = graph.cast %0 : (tensor<4xf32>) -> tensor<4xbf16>
// CHECK-NEXT:    %3 = graph.cast %0 : (tensor<4xf32>) -> tensor<4xi32>
// CHECK-NEXT:    %4 = graph.cast %3 : (tensor<4xi32>) -> tensor<4xi1>
// CHECK-NEXT:    %5 = graph.cast %arg0 : (tensor<4xi1>) -> tensor<4xf64>
// CHECK-NEXT:    return %0, %1, %2, %3, %4, %5 : tensor<4xf32>, tensor<i64>, tensor<4xbf16>, tensor<4xi32>, tensor<4xi1>, tensor<4xf64>
// CHECK-NEXT:  }
// GENERIC-LABEL: sym_name = "select_cast"
// GENERIC:       %{{.*}} = "graph.select"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<i1>, tensor<i64>, tensor<i64>) -> tensor<i64>
// GENERIC:       %{{.*}} = "graph.cast"(%{{.*}}) : (tensor<4xi32>) -> tensor<4xi1>
func.func @select_cast(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xf32>, %s: tensor<i1>, %t: tensor<i64>) -> (tensor<4xf32>, tensor<i64>, tensor<4xbf16>, tensor<4xi32>, tensor<4xi1>, tensor<4xf64>) {
  %0 = graph.select %c, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = graph.select %s, %t, %t : (tensor<i1>, tensor<i64>, tensor<i64>) -> tensor<i64>
  %2 = graph.cast %0 : (tensor<4xf32>) -> tensor<4xbf16>
  %3 = graph.cast %0 : (tensor<4xf32>) -> tensor<4xi32>
  %4 = graph.cast %3 : (tensor<4xi32>) -> tensor<4xi1>
  %5 = graph.cast %c : (tensor<4xi1>) -> tensor<4xf64>
  return %0, %1, %2, %3, %4, %5 : tensor<4xf32>, tensor<i64>, tensor<4xbf16>, tensor<4xi32>, tensor<4xi1>, tensor<4xf64>
}

// constant, full and iota (f32, f16, i1, i32, i64; rank 0).
// CHECK-LABEL: func.func @constants() -> (tensor<2xf32>, tensor<i64>, tensor<2x2xi1>, tensor<3xf16>, tensor<4x8xf32>, tensor<i32>, tensor<2xi1>, tensor<2x5xi64>, tensor<6xf32>) {
// CHECK-NEXT:    %0 = graph.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK-NEXT:    %1 = graph.constant dense<7> : tensor<i64>
// CHECK-NEXT:    %2 = graph.constant dense<{{\[\[}}true, false], [false, true]]> : tensor<2x2xi1>
// CHECK-NEXT:    %3 = graph.constant dense<5.000000e-01> : tensor<3xf16>
// CHECK-NEXT:    %4 = graph.full 0.000000e+00 : tensor<4x8xf32>
// CHECK-NEXT:    %5 = graph.full -3.000000e+00 : tensor<i32>
// CHECK-NEXT:    %6 = graph.full 1.000000e+00 : tensor<2xi1>
// CHECK-NEXT:    %7 = graph.iota {dim = 1 : i64} : tensor<2x5xi64>
// CHECK-NEXT:    %8 = graph.iota {dim = 0 : i64} : tensor<6xf32>
// CHECK-NEXT:    return %0, %1, %2, %3, %4, %5, %6, %7, %8 : tensor<2xf32>, tensor<i64>, tensor<2x2xi1>, tensor<3xf16>, tensor<4x8xf32>, tensor<i32>, tensor<2xi1>, tensor<2x5xi64>, tensor<6xf32>
// CHECK-NEXT:  }
// GENERIC-LABEL: sym_name = "constants"
// GENERIC:       %{{.*}} = "graph.constant"() <{value = dense<{{\[\[}}true, false], [false, true]]> : tensor<2x2xi1>}> : () -> tensor<2x2xi1>
// GENERIC:       %{{.*}} = "graph.full"() <{value = -3.000000e+00 : f64}> : () -> tensor<i32>
// GENERIC:       %{{.*}} = "graph.iota"() <{dim = 1 : i64}> : () -> tensor<2x5xi64>
func.func @constants() -> (tensor<2xf32>, tensor<i64>, tensor<2x2xi1>, tensor<3xf16>, tensor<4x8xf32>, tensor<i32>, tensor<2xi1>, tensor<2x5xi64>, tensor<6xf32>) {
  %0 = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %1 = graph.constant dense<7> : tensor<i64>
  %2 = graph.constant dense<[[true, false], [false, true]]> : tensor<2x2xi1>
  %3 = graph.constant dense<5.000000e-01> : tensor<3xf16>
  %4 = graph.full 0.0 : tensor<4x8xf32>
  %5 = graph.full -3.0 : tensor<i32>
  %6 = graph.full 1.0 : tensor<2xi1>
  %7 = graph.iota {dim = 1 : i64} : tensor<2x5xi64>
  %8 = graph.iota {dim = 0 : i64} : tensor<6xf32>
  return %0, %1, %2, %3, %4, %5, %6, %7, %8 : tensor<2xf32>, tensor<i64>, tensor<2x2xi1>, tensor<3xf16>, tensor<4x8xf32>, tensor<i32>, tensor<2xi1>, tensor<2x5xi64>, tensor<6xf32>
}

// broadcast_in_dim (incl. from rank 0), reshape (incl. to rank 0), transpose,
// slice, concat.
// CHECK-LABEL: func.func @layout(%arg0: tensor<4x8xf32>, %arg1: tensor<8xf32>, %arg2: tensor<f16>, %arg3: tensor<1x8xi32>, %arg4: tensor<2x8xf32>) -> (tensor<4x8xf32>, tensor<2x3xf16>, tensor<4x8xi32>, tensor<32xf32>, tensor<f32>, tensor<8x4xf32>, tensor<4x3xf32>, tensor<6x8xf32>, tensor<4x16xf32>) {
// CHECK-NEXT:    %0 = graph.broadcast_in_dim %arg1 {dims = array<i64: 1>} : (tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %1 = graph.broadcast_in_dim %arg2 {dims = array<i64>} : (tensor<f16>) -> tensor<2x3xf16>
// CHECK-NEXT:    %2 = graph.broadcast_in_dim %arg3 {dims = array<i64: 0, 1>} : (tensor<1x8xi32>) -> tensor<4x8xi32>
// CHECK-NEXT:    %3 = graph.reshape %arg0 : (tensor<4x8xf32>) -> tensor<32xf32>
// CHECK-NEXT:    %4 = graph.constant dense<1.000000e+00> : tensor<1x1xf32>
// CHECK-NEXT:    %5 = graph.reshape %4 : (tensor<1x1xf32>) -> tensor<f32>
// CHECK-NEXT:    %6 = graph.transpose %arg0 {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
// CHECK-NEXT:    %7 = graph.slice %arg0 {limit = array<i64: 4, 8>, start = array<i64: 0, 2>, stride = array<i64: 1, 2>} : (tensor<4x8xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:    %8 = graph.concat %arg0, %arg4 {dim = 0 : i64} : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<6x8xf32>
// CHECK-NEXT:    %9 = graph.concat %arg0, %arg0 {dim = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    return %0, %1, %2, %3, %5, %6, %7, %8, %9 : tensor<4x8xf32>, tensor<2x3xf16>, tensor<4x8xi32>, tensor<32xf32>, tensor<f32>, tensor<8x4xf32>, tensor<4x3xf32>, tensor<6x8xf32>, tensor<4x16xf32>
// CHECK-NEXT:  }
// GENERIC-LABEL: sym_name = "layout"
// GENERIC:       %{{.*}} = "graph.broadcast_in_dim"(%{{.*}}) <{dims = array<i64>}> : (tensor<f16>) -> tensor<2x3xf16>
// GENERIC:       %{{.*}} = "graph.transpose"(%{{.*}}) <{perm = array<i64: 1, 0>}> : (tensor<4x8xf32>) -> tensor<8x4xf32>
// GENERIC:       %{{.*}} = "graph.slice"(%{{.*}}) <{limit = array<i64: 4, 8>, start = array<i64: 0, 2>, stride = array<i64: 1, 2>}> : (tensor<4x8xf32>) -> tensor<4x3xf32>
// GENERIC:       %{{.*}} = "graph.concat"(%{{.*}}, %{{.*}}) <{dim = 0 : i64}> : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<6x8xf32>
func.func @layout(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %s: tensor<f16>, %k: tensor<1x8xi32>, %y: tensor<2x8xf32>) -> (tensor<4x8xf32>, tensor<2x3xf16>, tensor<4x8xi32>, tensor<32xf32>, tensor<f32>, tensor<8x4xf32>, tensor<4x3xf32>, tensor<6x8xf32>, tensor<4x16xf32>) {
  %0 = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<8xf32>) -> tensor<4x8xf32>
  %1 = graph.broadcast_in_dim %s {dims = array<i64>} : (tensor<f16>) -> tensor<2x3xf16>
  %2 = graph.broadcast_in_dim %k {dims = array<i64: 0, 1>} : (tensor<1x8xi32>) -> tensor<4x8xi32>
  %3 = graph.reshape %x : (tensor<4x8xf32>) -> tensor<32xf32>
  %c = graph.constant dense<1.0> : tensor<1x1xf32>
  %4 = graph.reshape %c : (tensor<1x1xf32>) -> tensor<f32>
  %5 = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %6 = graph.slice %x {start = array<i64: 0, 2>, limit = array<i64: 4, 8>, stride = array<i64: 1, 2>} : (tensor<4x8xf32>) -> tensor<4x3xf32>
  %7 = graph.concat %x, %y {dim = 0 : i64} : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<6x8xf32>
  %8 = graph.concat %x, %x {dim = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>
  return %0, %1, %2, %3, %4, %5, %6, %7, %8 : tensor<4x8xf32>, tensor<2x3xf16>, tensor<4x8xi32>, tensor<32xf32>, tensor<f32>, tensor<8x4xf32>, tensor<4x3xf32>, tensor<6x8xf32>, tensor<4x16xf32>
}

// Reductions with and without keepdim, down to rank 0; argmax gives i64.
// The generic form spells out the default keepdim = false.
// CHECK-LABEL: func.func @reductions(%arg0: tensor<2x3x4xf32>, %arg1: tensor<5xi32>) -> (tensor<2x4xf32>, tensor<2x1x4xf32>, tensor<f32>, tensor<1x1x1xf32>, tensor<i32>, tensor<2x4xi64>, tensor<2x3x1xi64>, tensor<i64>) {
// CHECK-NEXT:    %0 = graph.reduce_sum %arg0 {dims = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %1 = graph.reduce_sum %arg0 {dims = array<i64: 1>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>
// CHECK-NEXT:    %2 = graph.reduce_max %arg0 {dims = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<f32>
// CHECK-NEXT:    %3 = graph.reduce_min %arg0 {dims = array<i64: 0, 1, 2>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<1x1x1xf32>
// CHECK-NEXT:    %4 = graph.reduce_min %arg1 {dims = array<i64: 0>} : (tensor<5xi32>) -> tensor<i32>
// CHECK-NEXT:    %5 = graph.argmax %arg0 {dim = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x4xi64>
// CHECK-NEXT:    %6 = graph.argmax %arg0 {dim = 2 : i64, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<2x3x1xi64>
// CHECK-NEXT:    %7 = graph.argmax %arg1 {dim = 0 : i64} : (tensor<5xi32>) -> tensor<i64>
// CHECK-NEXT:    return %0, %1, %2, %3, %4, %5, %6, %7 : tensor<2x4xf32>, tensor<2x1x4xf32>, tensor<f32>, tensor<1x1x1xf32>, tensor<i32>, tensor<2x4xi64>, tensor<2x3x1xi64>, tensor<i64>
// CHECK-NEXT:  }
// GENERIC-LABEL: sym_name = "reductions"
// GENERIC:       %{{.*}} = "graph.reduce_sum"(%{{.*}}) <{dims = array<i64: 1>, keepdim = false}> : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
// GENERIC:       %{{.*}} = "graph.reduce_min"(%{{.*}}) <{dims = array<i64: 0, 1, 2>, keepdim = true}> : (tensor<2x3x4xf32>) -> tensor<1x1x1xf32>
// GENERIC:       %{{.*}} = "graph.argmax"(%{{.*}}) <{dim = 0 : i64, keepdim = false}> : (tensor<5xi32>) -> tensor<i64>
func.func @reductions(%x: tensor<2x3x4xf32>, %i: tensor<5xi32>) -> (tensor<2x4xf32>, tensor<2x1x4xf32>, tensor<f32>, tensor<1x1x1xf32>, tensor<i32>, tensor<2x4xi64>, tensor<2x3x1xi64>, tensor<i64>) {
  %0 = graph.reduce_sum %x {dims = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
  %1 = graph.reduce_sum %x {dims = array<i64: 1>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>
  %2 = graph.reduce_max %x {dims = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<f32>
  %3 = graph.reduce_min %x {dims = array<i64: 0, 1, 2>, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<1x1x1xf32>
  %4 = graph.reduce_min %i {dims = array<i64: 0>} : (tensor<5xi32>) -> tensor<i32>
  %5 = graph.argmax %x {dim = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x4xi64>
  %6 = graph.argmax %x {dim = 2 : i64, keepdim = true} : (tensor<2x3x4xf32>) -> tensor<2x3x1xi64>
  %7 = graph.argmax %i {dim = 0 : i64} : (tensor<5xi32>) -> tensor<i64>
  return %0, %1, %2, %3, %4, %5, %6, %7 : tensor<2x4xf32>, tensor<2x1x4xf32>, tensor<f32>, tensor<1x1x1xf32>, tensor<i32>, tensor<2x4xi64>, tensor<2x3x1xi64>, tensor<i64>
}

// matmul: plain, transposed operands, batched (f16), f64.
// CHECK-LABEL: func.func @matmul(%arg0: tensor<4x8xf32>, %arg1: tensor<16x8xf32>, %arg2: tensor<8x4xf32>, %arg3: tensor<2x4x8xf16>, %arg4: tensor<2x8x3xf16>, %arg5: tensor<3x2xf64>) -> (tensor<4x16xf32>, tensor<4x4xf32>, tensor<4x16xf32>, tensor<2x4x3xf16>, tensor<3x3xf64>) {
// CHECK-NEXT:    %0 = graph.matmul %arg0, %arg1 {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %1 = graph.matmul %arg0, %arg2 : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT:    %2 = graph.matmul %arg2, %arg1 {transpose_lhs = true, transpose_rhs = true} : (tensor<8x4xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %3 = graph.matmul %arg3, %arg4 : (tensor<2x4x8xf16>, tensor<2x8x3xf16>) -> tensor<2x4x3xf16>
// CHECK-NEXT:    %4 = graph.matmul %arg5, %arg5 {transpose_rhs = true} : (tensor<3x2xf64>, tensor<3x2xf64>) -> tensor<3x3xf64>
// CHECK-NEXT:    return %0, %1, %2, %3, %4 : tensor<4x16xf32>, tensor<4x4xf32>, tensor<4x16xf32>, tensor<2x4x3xf16>, tensor<3x3xf64>
// CHECK-NEXT:  }
// GENERIC-LABEL: sym_name = "matmul"
// GENERIC:       %{{.*}} = "graph.matmul"(%{{.*}}, %{{.*}}) <{transpose_lhs = false, transpose_rhs = false}> : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
// GENERIC:       %{{.*}} = "graph.matmul"(%{{.*}}, %{{.*}}) <{transpose_lhs = true, transpose_rhs = true}> : (tensor<8x4xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
func.func @matmul(%a: tensor<4x8xf32>, %w: tensor<16x8xf32>, %at: tensor<8x4xf32>, %ba: tensor<2x4x8xf16>, %bb: tensor<2x8x3xf16>, %d: tensor<3x2xf64>) -> (tensor<4x16xf32>, tensor<4x4xf32>, tensor<4x16xf32>, tensor<2x4x3xf16>, tensor<3x3xf64>) {
  %0 = graph.matmul %a, %w {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %1 = graph.matmul %a, %at : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %2 = graph.matmul %at, %w {transpose_lhs = true, transpose_rhs = true} : (tensor<8x4xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %3 = graph.matmul %ba, %bb : (tensor<2x4x8xf16>, tensor<2x8x3xf16>) -> tensor<2x4x3xf16>
  %4 = graph.matmul %d, %d {transpose_rhs = true} : (tensor<3x2xf64>, tensor<3x2xf64>) -> tensor<3x3xf64>
  return %0, %1, %2, %3, %4 : tensor<4x16xf32>, tensor<4x4xf32>, tensor<4x16xf32>, tensor<2x4x3xf16>, tensor<3x3xf64>
}

// gather (incl. rank-0 indices), scatter_add, random_uniform (stream = 0
// is the default: elided in the custom form, explicit in the generic one).
// CHECK-LABEL: func.func @indexing(%arg0: tensor<10x4xf32>, %arg1: tensor<2x3xi64>, %arg2: tensor<5xi32>, %arg3: tensor<10xi32>, %arg4: tensor<2x3x4xf32>, %arg5: tensor<i64>) -> (tensor<2x3x4xf32>, tensor<5xi32>, tensor<i32>, tensor<10x4xf32>, tensor<4x8xf32>, tensor<3xbf16>, tensor<f64>) {
// CHECK-NEXT:    %0 = graph.gather %arg0, %arg1 : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
// CHECK-NEXT:    %1 = graph.gather %arg3, %arg2 : (tensor<10xi32>, tensor<5xi32>) -> tensor<5xi32>
// CHECK-NEXT:    %2 = graph.constant dense<3> : tensor<i32>
// CHECK-NEXT:    %3 = graph.gather %arg3, %2 : (tensor<10xi32>, tensor<i32>) -> tensor<i32>
// CHECK-NEXT:    %4 = graph.scatter_add %arg0, %arg1, %arg4 : (tensor<10x4xf32>, tensor<2x3xi64>, tensor<2x3x4xf32>) -> tensor<10x4xf32>
// CHECK-NEXT:    %5 = graph.random_uniform %arg5 {stream = 3 : i64} : (tensor<i64>) -> tensor<4x8xf32>
// CHECK-NEXT:    %6 = graph.random_uniform %arg5 : (tensor<i64>) -> tensor<3xbf16>
// CHECK-NEXT:    %7 = graph.random_uniform %arg5 : (tensor<i64>) -> tensor<f64>
// CHECK-NEXT:    return %0, %1, %3, %4, %5, %6, %7 : tensor<2x3x4xf32>, tensor<5xi32>, tensor<i32>, tensor<10x4xf32>, tensor<4x8xf32>, tensor<3xbf16>, tensor<f64>
// CHECK-NEXT:  }
// GENERIC-LABEL: sym_name = "indexing"
// GENERIC:       %{{.*}} = "graph.gather"(%{{.*}}, %{{.*}}) : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
// GENERIC:       %{{.*}} = "graph.scatter_add"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<10x4xf32>, tensor<2x3xi64>, tensor<2x3x4xf32>) -> tensor<10x4xf32>
// GENERIC:       %{{.*}} = "graph.random_uniform"(%{{.*}}) <{stream = 0 : i64}> : (tensor<i64>) -> tensor<3xbf16>
func.func @indexing(%table: tensor<10x4xf32>, %ids: tensor<2x3xi64>, %ids32: tensor<5xi32>, %vec: tensor<10xi32>, %upd: tensor<2x3x4xf32>, %seed: tensor<i64>) -> (tensor<2x3x4xf32>, tensor<5xi32>, tensor<i32>, tensor<10x4xf32>, tensor<4x8xf32>, tensor<3xbf16>, tensor<f64>) {
  %0 = graph.gather %table, %ids : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %1 = graph.gather %vec, %ids32 : (tensor<10xi32>, tensor<5xi32>) -> tensor<5xi32>
  %s = graph.constant dense<3> : tensor<i32>
  %2 = graph.gather %vec, %s : (tensor<10xi32>, tensor<i32>) -> tensor<i32>
  %3 = graph.scatter_add %table, %ids, %upd : (tensor<10x4xf32>, tensor<2x3xi64>, tensor<2x3x4xf32>) -> tensor<10x4xf32>
  %4 = graph.random_uniform %seed {stream = 3 : i64} : (tensor<i64>) -> tensor<4x8xf32>
  %5 = graph.random_uniform %seed : (tensor<i64>) -> tensor<3xbf16>
  %6 = graph.random_uniform %seed {stream = 0 : i64} : (tensor<i64>) -> tensor<f64>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<2x3x4xf32>, tensor<5xi32>, tensor<i32>, tensor<10x4xf32>, tensor<4x8xf32>, tensor<3xbf16>, tensor<f64>
}

// softmax, log_softmax, layer_norm (1 and 2 normalised dims; the default
// epsilon is elided), linear with and without bias, dropout.
// CHECK-LABEL: func.func @composites(%arg0: tensor<4x8xf32>, %arg1: tensor<8xf32>, %arg2: tensor<8xf32>, %arg3: tensor<2x4x8xf16>, %arg4: tensor<4x8xf16>, %arg5: tensor<16x8xf32>, %arg6: tensor<16xf32>, %arg7: tensor<i64>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<2x4x8xf16>, tensor<4x16xf32>, tensor<2x4x8xf16>, tensor<4x8xf32>, tensor<4x8xf32>) {
// CHECK-NEXT:    %0 = graph.softmax %arg0 {dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %1 = graph.log_softmax %arg0 {dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %2 = graph.layer_norm %arg0, %arg1, %arg2 : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %3 = graph.layer_norm %arg3, %arg4, %arg4 {epsilon = 1.000000e-03 : f64} : (tensor<2x4x8xf16>, tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<2x4x8xf16>
// CHECK-NEXT:    %4 = graph.linear %arg0, %arg5, %arg6 : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %5 = graph.constant dense<5.000000e-01> : tensor<8x8xf16>
// CHECK-NEXT:    %6 = graph.linear %arg3, %5 : (tensor<2x4x8xf16>, tensor<8x8xf16>) -> tensor<2x4x8xf16>
// CHECK-NEXT:    %7 = graph.dropout %arg0, %arg7 {p = 1.000000e-01 : f64, stream = 2 : i64} : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
// CHECK-NEXT:    %8 = graph.dropout %arg0, %arg7 {p = 0.000000e+00 : f64} : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
// CHECK-NEXT:    return %0, %1, %2, %3, %4, %6, %7, %8 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<2x4x8xf16>, tensor<4x16xf32>, tensor<2x4x8xf16>, tensor<4x8xf32>, tensor<4x8xf32>
// CHECK-NEXT:  }
// GENERIC-LABEL: sym_name = "composites"
// GENERIC:       %{{.*}} = "graph.softmax"(%{{.*}}) <{dim = 1 : i64}> : (tensor<4x8xf32>) -> tensor<4x8xf32>
// GENERIC:       %{{.*}} = "graph.layer_norm"(%{{.*}}, %{{.*}}, %{{.*}}) <{epsilon = 1.000000e-05 : f64}> : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// GENERIC:       %{{.*}} = "graph.linear"(%{{.*}}, %{{.*}}) : (tensor<2x4x8xf16>, tensor<8x8xf16>) -> tensor<2x4x8xf16>
// GENERIC:       %{{.*}} = "graph.dropout"(%{{.*}}, %{{.*}}) <{p = 0.000000e+00 : f64, stream = 0 : i64}> : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
func.func @composites(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %x3: tensor<2x4x8xf16>, %g2: tensor<4x8xf16>, %w: tensor<16x8xf32>, %bias: tensor<16xf32>, %seed: tensor<i64>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<2x4x8xf16>, tensor<4x16xf32>, tensor<2x4x8xf16>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = graph.softmax %x {dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = graph.log_softmax %x {dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = graph.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %3 = graph.layer_norm %x3, %g2, %g2 {epsilon = 1.0e-03 : f64} : (tensor<2x4x8xf16>, tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<2x4x8xf16>
  %4 = graph.linear %x, %w, %bias : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %w2 = graph.constant dense<0.5> : tensor<8x8xf16>
  %5 = graph.linear %x3, %w2 : (tensor<2x4x8xf16>, tensor<8x8xf16>) -> tensor<2x4x8xf16>
  %6 = graph.dropout %x, %seed {p = 1.0e-01 : f64, stream = 2 : i64} : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
  %7 = graph.dropout %x, %seed {p = 0.0 : f64} : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
  return %0, %1, %2, %3, %4, %5, %6, %7 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<2x4x8xf16>, tensor<4x16xf32>, tensor<2x4x8xf16>, tensor<4x8xf32>, tensor<4x8xf32>
}

// cross_entropy, nll (incl. rank-1 input with rank-0 target), mse, bce;
// all reduce to a rank-0 tensor of the input element type.
// CHECK-LABEL: func.func @losses(%arg0: tensor<4x10xf32>, %arg1: tensor<4xi64>, %arg2: tensor<2x3x5xbf16>, %arg3: tensor<2x3xi32>, %arg4: tensor<10xf64>, %arg5: tensor<i64>, %arg6: tensor<4x1xf32>, %arg7: tensor<4x1xf32>, %arg8: tensor<f16>) -> (tensor<f32>, tensor<f32>, tensor<bf16>, tensor<f64>, tensor<f32>, tensor<f32>, tensor<f16>) {
// CHECK-NEXT:    %0 = graph.cross_entropy %arg0, %arg1 : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
// CHECK-NEXT:    %1 = graph.nll %arg0, %arg1 {ignore_index = 0 : i64} : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
// CHECK-NEXT:    %2 = graph.cross_entropy %arg2, %arg3 {ignore_index = -1 : i64} : (tensor<2x3x5xbf16>, tensor<2x3xi32>) -> tensor<bf16>
// CHECK-NEXT:    %3 = graph.nll %arg4, %arg5 : (tensor<10xf64>, tensor<i64>) -> tensor<f64>
// CHECK-NEXT:    %4 = graph.mse %arg6, %arg7 : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<f32>
// CHECK-NEXT:    %5 = graph.bce %arg6, %arg7 : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<f32>
// CHECK-NEXT:    %6 = graph.mse %arg8, %arg8 : (tensor<f16>, tensor<f16>) -> tensor<f16>
// CHECK-NEXT:    return %0, %1, %2, %3, %4, %5, %6 : tensor<f32>, tensor<f32>, tensor<bf16>, tensor<f64>, tensor<f32>, tensor<f32>, tensor<f16>
// CHECK-NEXT:  }
// GENERIC-LABEL: sym_name = "losses"
// GENERIC:       %{{.*}} = "graph.cross_entropy"(%{{.*}}, %{{.*}}) <{ignore_index = -100 : i64}> : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
// GENERIC:       %{{.*}} = "graph.nll"(%{{.*}}, %{{.*}}) <{ignore_index = -100 : i64}> : (tensor<10xf64>, tensor<i64>) -> tensor<f64>
// GENERIC:       %{{.*}} = "graph.bce"(%{{.*}}, %{{.*}}) : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<f32>
func.func @losses(%x: tensor<4x10xf32>, %t: tensor<4xi64>, %x3: tensor<2x3x5xbf16>, %t3: tensor<2x3xi32>, %v: tensor<10xf64>, %tv: tensor<i64>, %p: tensor<4x1xf32>, %q: tensor<4x1xf32>, %r: tensor<f16>) -> (tensor<f32>, tensor<f32>, tensor<bf16>, tensor<f64>, tensor<f32>, tensor<f32>, tensor<f16>) {
  %0 = graph.cross_entropy %x, %t : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  %1 = graph.nll %x, %t {ignore_index = 0 : i64} : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  %2 = graph.cross_entropy %x3, %t3 {ignore_index = -1 : i64} : (tensor<2x3x5xbf16>, tensor<2x3xi32>) -> tensor<bf16>
  %3 = graph.nll %v, %tv : (tensor<10xf64>, tensor<i64>) -> tensor<f64>
  %4 = graph.mse %p, %q : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<f32>
  %5 = graph.bce %p, %q : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<f32>
  %6 = graph.mse %r, %r : (tensor<f16>, tensor<f16>) -> tensor<f16>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<f32>, tensor<f32>, tensor<bf16>, tensor<f64>, tensor<f32>, tensor<f32>, tensor<f16>
}
