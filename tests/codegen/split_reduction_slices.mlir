// RUN: tilefuse-opt %s --emit=cuda --target=cuda:sm_90 | FileCheck %s --check-prefix=CUDA
// RUN: tilefuse-opt %s --emit=tile --target=cpu | FileCheck %s --check-prefix=CPU
// A large full reduction is split into slices that keep the whole machine
// busy (TargetInfo::fullReductionSlices): 512 blocks on a GPU (about four
// per SM), 32 programs on the CPU's thread pool.

// CUDA-LABEL: // total_kernel0_partial_{{[0-9a-f]+}}: grid 512 x block 1024
// CUDA-LABEL: // total_kernel0_combine_{{[0-9a-f]+}}: grid 1 x block 512 (128 threads x 4 lanes)
// CPU-LABEL: func.func @total_kernel0_partial_{{[0-9a-f]+}}(
// CPU-SAME:    tile.grid = 32
func.func @total(%x: tensor<1048576xf32>) -> tensor<f32> {
  %0 = graph.reduce_sum %x {dims = array<i64: 0>} : (tensor<1048576xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}
