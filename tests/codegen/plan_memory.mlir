// RUN: tilefuse-opt %s --emit=plan | FileCheck %s
// RUN: tilefuse-opt %s --emit=plan --target=cuda:sm_90 | FileCheck %s --check-prefix=CUDA

// Four GEMMs in a chain: each intermediate dies at the next GEMM, so two
// 16 KiB buffers suffice where the unplanned arena holds all four.
// CHECK-LABEL: func @chain (cpu)
// CHECK: memory plan: 4 steps
// CHECK: peak (arena)  32768 bytes
// CHECK: lower bound   32768 bytes (0.03 MiB), peak / bound 1.000
// CHECK: unplanned     65536 bytes
// CHECK: arguments     32768 bytes (0.03 MiB), outside the arena
// The first and third intermediates share offset 0, the second and the
// result share the other 16 KiB.
// CHECK-DAG: | f32[64, 64] | 16384 | 0 | 0..1 | forward | graph.matmul
// CHECK-DAG: | f32[64, 64] | 16384 | 0 | 2..3 | forward | graph.matmul
// CHECK-DAG: | f32[64, 64] | 16384 | 16384 | 1..2 | forward | graph.matmul
// CHECK-DAG: | f32[64, 64] | 16384 | 16384 | 3..end | forward | graph.matmul
// CUDA: func @chain (cuda:sm_90)
// CUDA: peak (arena)  32768 bytes
func.func @chain(%x: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %a = graph.matmul %x, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %b = graph.matmul %a, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %c = graph.matmul %b, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %d = graph.matmul %c, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  return %d : tensor<64x64xf32>
}

// Two big values made before either is used: the scheduler runs each use
// right after its producer, so only one big buffer is ever live.
// CHECK-LABEL: func @produce_then_use (cpu)
// CHECK: peak (arena)  528384 bytes (0.50 MiB)
// CHECK: lower bound   528384 bytes (0.50 MiB), peak / bound 1.000
// CHECK: unplanned     1052672 bytes (1.00 MiB)
// The second product is made only after the first one's use (step 1).
// CHECK-DAG: | f32[512, 256] | 524288 | 0 | 0..1 | forward | graph.matmul
// CHECK-DAG: | f32[512, 256] | 524288 | 0 | 2..3 | forward | graph.matmul
func.func @produce_then_use(%x: tensor<512x256xf32>, %w: tensor<256x256xf32>, %v: tensor<256x1xf32>) -> (tensor<512x1xf32>, tensor<512x1xf32>) {
  %a = graph.matmul %x, %w : (tensor<512x256xf32>, tensor<256x256xf32>) -> tensor<512x256xf32>
  %b = graph.matmul %x, %w {transpose_rhs = true} : (tensor<512x256xf32>, tensor<256x256xf32>) -> tensor<512x256xf32>
  %ua = graph.matmul %a, %v : (tensor<512x256xf32>, tensor<256x1xf32>) -> tensor<512x1xf32>
  %ub = graph.matmul %b, %v : (tensor<512x256xf32>, tensor<256x1xf32>) -> tensor<512x1xf32>
  return %ua, %ub : tensor<512x1xf32>, tensor<512x1xf32>
}

// A reshape between a kernel and the matmuls that read it is a view of the
// kernel's buffer: three steps (no copy), and that buffer lives until the
// last matmul reads the view.
// CHECK-LABEL: func @reshape_view (cpu)
// CHECK: memory plan: 3 steps
// CHECK: | f32[4, 8, 16] | 2048 | {{[0-9]+}} | 0..2 | forward | reshape_view_kernel0
// CHECK-NOT: f32[32, 16] | 2048 | {{[0-9]+}} | {{.*}} | reshape_view_kernel
func.func @reshape_view(%x: tensor<4x8x16xf32>, %w: tensor<16x16xf32>) -> (tensor<32x16xf32>, tensor<32x16xf32>) {
  %e = graph.exp %x : tensor<4x8x16xf32>
  %r = graph.reshape %e : (tensor<4x8x16xf32>) -> tensor<32x16xf32>
  %a = graph.matmul %r, %w : (tensor<32x16xf32>, tensor<16x16xf32>) -> tensor<32x16xf32>
  %b = graph.matmul %r, %w {transpose_rhs = true} : (tensor<32x16xf32>, tensor<16x16xf32>) -> tensor<32x16xf32>
  return %a, %b : tensor<32x16xf32>, tensor<32x16xf32>
}

// A product returned reshaped: the GEMM writes the result's buffer, one
// step, the buffer in the returned shape; of two reshapes of it returned,
// one gets a copy (each result its own buffer).
// CHECK-LABEL: func @returned_logits (cpu)
// CHECK: memory plan: 1 steps
// CHECK: | f32[2, 4, 40] | 1280 | {{[0-9]+}} | 0..end | forward | graph.matmul
// CHECK-LABEL: func @returned_logits_twice (cpu)
// CHECK: memory plan: 2 steps
// CHECK-DAG: | f32[2, 4, 40] | 1280 | {{[0-9]+}} | 1..end | forward | graph.reshape
// CHECK-DAG: | f32[4, 2, 40] | 1280 | {{[0-9]+}} | 0..end | forward | graph.matmul
func.func @returned_logits(%h: tensor<8x16xf32>, %w: tensor<40x16xf32>) -> tensor<2x4x40xf32> {
  %0 = graph.matmul %h, %w {transpose_rhs = true} : (tensor<8x16xf32>, tensor<40x16xf32>) -> tensor<8x40xf32>
  %1 = graph.reshape %0 : (tensor<8x40xf32>) -> tensor<2x4x40xf32>
  return %1 : tensor<2x4x40xf32>
}
func.func @returned_logits_twice(%h: tensor<8x16xf32>, %w: tensor<40x16xf32>) -> (tensor<2x4x40xf32>, tensor<4x2x40xf32>) {
  %0 = graph.matmul %h, %w {transpose_rhs = true} : (tensor<8x16xf32>, tensor<40x16xf32>) -> tensor<8x40xf32>
  %1 = graph.reshape %0 : (tensor<8x40xf32>) -> tensor<2x4x40xf32>
  %2 = graph.reshape %0 : (tensor<8x40xf32>) -> tensor<4x2x40xf32>
  return %1, %2 : tensor<2x4x40xf32>, tensor<4x2x40xf32>
}
