// RUN: tilefuse-opt %s --emit=tile | tilefuse-opt --tilefuse-tile-to-llvm=narrow-masked-lanes=false | FileCheck %s --check-prefix=SPLIT
// RUN: tilefuse-opt %s --emit=tile | tilefuse-opt --tilefuse-tile-to-llvm | FileCheck %s --check-prefix=MASKED
//
// A target without masked 8- and 16-bit lanes (AVX2: no AVX-512BW) reads a
// row's whole blocks of bf16 with plain vector loads and only the last one
// masked, and writes its bytes (booleans) the same way; a target with them
// keeps one masked access per block. Blocks move as i16 either way.

// SPLIT-LABEL: llvm.func @bf16_row_max_kernel0_{{[0-9a-f]+}}(
// SPLIT-DAG:     llvm.load {{.*}} : !llvm.ptr -> vector<32xi16>
// SPLIT-DAG:     llvm.intr.masked.load {{.*}} -> vector<32xi16>
// MASKED-LABEL: llvm.func @bf16_row_max_kernel0_{{[0-9a-f]+}}(
// MASKED-NOT:    llvm.load {{.*}} : !llvm.ptr -> vector<32xi16>
// MASKED:        llvm.intr.masked.load {{.*}} -> vector<32xi16>
func.func @bf16_row_max(%x: tensor<4x1000xbf16>) -> tensor<4xbf16> {
  %0 = graph.reduce_max %x {dims = array<i64: 1>} : (tensor<4x1000xbf16>) -> tensor<4xbf16>
  return %0 : tensor<4xbf16>
}

// SPLIT-LABEL: llvm.func @mask_rows_kernel0_{{[0-9a-f]+}}(
// SPLIT-DAG:     llvm.store {{.*}} : vector<{{[0-9]+}}xi8>, !llvm.ptr
// SPLIT-DAG:     llvm.intr.masked.store {{.*}} : vector<{{[0-9]+}}xi8>, vector<{{[0-9]+}}xi1> into !llvm.ptr
func.func @mask_rows(%x: tensor<4x1000xf32>, %y: tensor<4x1000xf32>) -> tensor<4x1000xi1> {
  %0 = graph.lt %x, %y : tensor<4x1000xf32>
  return %0 : tensor<4x1000xi1>
}
