// RUN: tilefuse-opt %s --emit=llvm | FileCheck %s
//
// The CPU backend's lowering: the kernel ABI, masked vector memory ops, and
// exp as a polynomial (no libm call per lane).

// CHECK-LABEL: llvm.func @exp_kernel0_{{[0-9a-f]+}}(
// CHECK-SAME:    %{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64)
// CHECK:         llvm.load {{.*}} : !llvm.ptr -> !llvm.ptr
// CHECK:         llvm.intr.masked.load {{.*}} -> vector<64xf32>
// CHECK-NOT:     llvm.call @expf
// CHECK:         llvm.intr.fma
// CHECK:         llvm.intr.masked.store {{.*}} : vector<64xf32>, vector<64xi1> into !llvm.ptr
// CHECK-NOT:     tile.
func.func @exp(%x: tensor<1000xf32>) -> tensor<1000xf32> {
  %0 = graph.exp %x : tensor<1000xf32>
  return %0 : tensor<1000xf32>
}

// Strided reads become gathers.
// CHECK-LABEL: llvm.func @transposed_kernel0_{{[0-9a-f]+}}(
// CHECK:         llvm.intr.masked.gather
func.func @transposed(%x: tensor<64x8xf32>) -> tensor<8x64xf32> {
  %0 = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<64x8xf32>) -> tensor<8x64xf32>
  %1 = graph.neg %0 : tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}

// A streamed result: full blocks are non-temporal stores, the tail
// (17039376 = 266240 blocks of 64 and 16) masked.
// CHECK-LABEL: llvm.func @big_kernel0_{{[0-9a-f]+}}(
// CHECK:         llvm.store {{.*}} {alignment = 64 : i64, nontemporal}
// CHECK:         llvm.intr.masked.store
func.func @big(%x: tensor<17039376xf32>) -> tensor<17039376xf32> {
  %0 = graph.neg %x : tensor<17039376xf32>
  return %0 : tensor<17039376xf32>
}

// Rows that fill their blocks: plain loads and stores, no masks.
// CHECK-LABEL: llvm.func @rows_kernel0_{{[0-9a-f]+}}(
// CHECK-NOT:     llvm.intr.masked
// CHECK:         llvm.return
func.func @rows(%x: tensor<16x4096xf32>) -> tensor<16x4096xf32> {
  %0 = graph.neg %x : tensor<16x4096xf32>
  return %0 : tensor<16x4096xf32>
}

// 16-bit floats move through memory as i16 blocks and are reinterpreted in
// registers: masked loads and stores of bf16 vectors are legal only on CPUs
// with AVX512-BF16 (elsewhere LLVM splits them lane by lane).
// CHECK-LABEL: llvm.func @bf16_row_max_kernel0_{{[0-9a-f]+}}(
// CHECK:         llvm.intr.masked.load {{.*}} -> vector<{{[0-9]+}}xi16>
// CHECK-NOT:     llvm.intr.masked.load {{.*}} -> vector<{{[0-9]+}}xbf16>
// CHECK-LABEL: llvm.func @bf16_scale_kernel0_{{[0-9a-f]+}}(
// CHECK-NOT:     xbf16>, vector<{{[0-9]+}}xi1> into
// CHECK:         llvm.intr.masked.store {{.*}} : vector<{{[0-9]+}}xi16>, vector<{{[0-9]+}}xi1> into !llvm.ptr
func.func @bf16_row_max(%x: tensor<4x1000xbf16>) -> tensor<4xbf16> {
  %0 = graph.reduce_max %x {dims = array<i64: 1>} : (tensor<4x1000xbf16>) -> tensor<4xbf16>
  return %0 : tensor<4xbf16>
}
func.func @bf16_scale(%x: tensor<1000xbf16>) -> tensor<1000xbf16> {
  %0 = graph.add %x, %x : tensor<1000xbf16>
  return %0 : tensor<1000xbf16>
}
