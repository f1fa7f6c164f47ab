// RUN: tilefuse-opt %s --emit=cuda --target=cuda:sm_90 | FileCheck %s
// RUN: not tilefuse-opt %s --emit=cuda --target=cpu 2>&1 | FileCheck %s --check-prefix=CPU
//
// The CUDA renderer: one program = one thread block, one lane = one thread;
// each kernel starts with the source ops it fuses; block reductions by warp
// shuffles; loads and stores guarded by the block's limit.

// CHECK: template <typename T, typename Op> __device__ T tf_block_reduce(
// CHECK:   __shfl_xor_sync
// CHECK-LABEL: // softmax_kernel0: grid 16 x block 64; fuses graph.reduce_max graph.broadcast_in_dim graph.sub graph.exp graph.reduce_sum graph.broadcast_in_dim graph.div
// CHECK-NEXT: extern "C" __global__ void __launch_bounds__(64) softmax_kernel0(float* __restrict__ [[X:v[0-9]+]], float* __restrict__ [[Y:v[0-9]+]])
// CHECK:   (long long)blockIdx.x
// CHECK:   threadIdx.x < {{v[0-9]+}} ? [[X]][
// CHECK:   tf_block_reduce<float>({{.*}}, tf_max_op<float>())
// CHECK:   expf(
// CHECK:   tf_block_reduce<float>({{.*}}, tf_add_op<float>())
// CHECK:   if (threadIdx.x < {{v[0-9]+}}) [[Y]][
// CPU: --emit=cuda needs a CUDA target
func.func @softmax(%x: tensor<16x50xf32>) -> tensor<16x50xf32> {
  %0 = graph.softmax %x {dim = 1 : i64} : (tensor<16x50xf32>) -> tensor<16x50xf32>
  return %0 : tensor<16x50xf32>
}

// f16 storage, f32 arithmetic, booleans as bytes.
// CHECK-LABEL: // half_kernel0:
// CHECK: __half* __restrict__ {{v[0-9]+}}, signed char* __restrict__
// CHECK: float {{v[0-9]+}} = (float)(
// CHECK: __half {{v[0-9]+}} = (__half)(
func.func @half(%x: tensor<128xf16>, %m: tensor<128xi1>) -> tensor<128xf16> {
  %0 = graph.exp %x : tensor<128xf16>
  %1 = graph.select %m, %0, %x : (tensor<128xi1>, tensor<128xf16>, tensor<128xf16>) -> tensor<128xf16>
  return %1 : tensor<128xf16>
}
