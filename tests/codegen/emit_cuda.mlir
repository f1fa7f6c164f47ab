// RUN: tilefuse-opt %s --emit=cuda --target=cuda:sm_90 | FileCheck %s
// RUN: not tilefuse-opt %s --emit=cuda --target=cpu 2>&1 | FileCheck %s --check-prefix=CPU
//
// The CUDA renderer: one program = one thread block, one lane = one thread;
// each kernel starts with the source ops it fuses; block reductions by warp
// shuffles; loads and stores guarded by the block's limit.

// CHECK: template <typename T, typename Op> __device__ T tf_block_reduce(
// CHECK:   __shfl_xor_sync
// CHECK: struct alignas(sizeof(T) * V) tf_pack { T v[V]; };
// CHECK-LABEL: // softmax_kernel0_{{[0-9a-f]+}}: grid 16 x block 64 (64 threads x 1 lanes); fuses graph.reduce_max graph.broadcast_in_dim graph.sub graph.exp graph.reduce_sum graph.broadcast_in_dim graph.div
// CHECK-NEXT: extern "C" __global__ void __launch_bounds__(64) softmax_kernel0_{{[0-9a-f]+}}(float* __restrict__ [[X:v[0-9]+]], float* __restrict__ [[Y:v[0-9]+]])
// CHECK:   (long long)blockIdx.x
// CHECK:   threadIdx.x < {{v[0-9]+}} ? [[X]][
// CHECK:   tf_block_reduce<float>({{.*}}, tf_max_op<float>())
// CHECK:   expf(
// CHECK:   tf_block_reduce<double>({{.*}}, tf_add_op<double>())
// CHECK:   if (threadIdx.x < {{v[0-9]+}}) [[Y]][
// CPU: --emit=cuda needs a CUDA target
func.func @softmax(%x: tensor<16x50xf32>) -> tensor<16x50xf32> {
  %0 = graph.softmax %x {dim = 1 : i64} : (tensor<16x50xf32>) -> tensor<16x50xf32>
  return %0 : tensor<16x50xf32>
}

// f16 storage, f32 arithmetic, booleans as bytes; 128 lanes = 32 threads
// holding 4 lanes each.
// CHECK-LABEL: // half_kernel0_{{[0-9a-f]+}}: grid 1 x block 128 (32 threads x 4 lanes)
// CHECK: __half* __restrict__ {{v[0-9]+}}, signed char* __restrict__
// CHECK: tf_load<__half, 4, 1>(
// CHECK: for (int j = 0; j < 4; ++j) {{v[0-9]+}}[j] = (float)({{v[0-9]+}}[j]);
// CHECK: for (int j = 0; j < 4; ++j) {{v[0-9]+}}[j] = (__half)({{v[0-9]+}}[j]);
func.func @half(%x: tensor<128xf16>, %m: tensor<128xi1>) -> tensor<128xf16> {
  %0 = graph.exp %x : tensor<128xf16>
  %1 = graph.select %m, %0, %x : (tensor<128xi1>, tensor<128xf16>, tensor<128xf16>) -> tensor<128xf16>
  return %1 : tensor<128xf16>
}

// Contiguous blocks move as one 128-bit access per thread (4 f32 lanes,
// tf_pack aligned to 16 bytes) when whole and aligned, lane by lane
// otherwise; a row reduction folds a thread's own lanes before the shuffles
// (an f32 sum in double: FusionToTile accumulates f32 sums of rows in f64).
// CHECK-LABEL: // rows_kernel0_{{[0-9a-f]+}}: grid 64 x block 1024 (256 threads x 4 lanes); fuses graph.exp graph.reduce_sum graph.broadcast_in_dim graph.div
// CHECK-NEXT: __launch_bounds__(256) rows_kernel0_{{[0-9a-f]+}}(float* __restrict__ [[IN:v[0-9]+]], float* __restrict__ [[OUT:v[0-9]+]])
// CHECK: float [[LOADED:v[0-9]+]][4];
// CHECK-NEXT: tf_load<float, 4, 1>([[LOADED]], [[IN]],
// CHECK: tf_block_reduce<double>(tf_fold({{v[0-9]+}}, tf_add_op<double>()), tf_add_op<double>())
// CHECK: tf_store<float, 4, 1>({{v[0-9]+}}, [[OUT]],
func.func @rows(%x: tensor<64x1000xf32>) -> tensor<64x1000xf32> {
  %0 = graph.exp %x : tensor<64x1000xf32>
  %1 = graph.reduce_sum %0 {dims = array<i64: 1>, keepdim = true} : (tensor<64x1000xf32>) -> tensor<64x1xf32>
  %2 = graph.broadcast_in_dim %1 {dims = array<i64: 0, 1>} : (tensor<64x1xf32>) -> tensor<64x1000xf32>
  %3 = graph.div %0, %2 : tensor<64x1000xf32>
  return %3 : tensor<64x1000xf32>
}
