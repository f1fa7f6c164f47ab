// RUN: tilefuse-opt %s --autocast=precision=bf16 | FileCheck %s
// RUN: tilefuse-opt %s "--autocast=precision=fp16 keep-fp32=gelu" | FileCheck %s --check-prefix=F16
// RUN: tilefuse-opt %s --autocast=precision=fp32 | FileCheck %s --check-prefix=F32
// RUN: not tilefuse-opt %s --autocast=precision=int8 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not tilefuse-opt %s --autocast=keep-fp32=gleu 2>&1 | FileCheck %s --check-prefix=BADOP

// An MLP block with a softmax and a loss: the GEMMs (linear, matmul) read
// bf16 casts of their f32 operands and produce bf16; gelu follows its bf16
// operand; the scale by a Python scalar (a splat fill) stays bf16; softmax,
// layer_norm and the loss run in f32; the arguments (master weights) and
// the result keep f32.
// CHECK-LABEL: func.func @block(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<4x8xf32>, %[[W:[^:]+]]: tensor<16x8xf32>, %[[B:[^:]+]]: tensor<16xf32>, %[[V:[^:]+]]: tensor<16x8xf32>, %[[T:[^:]+]]: tensor<4xi64>, {{.*}}) -> tensor<f32>
// CHECK-DAG:     %[[XL:.+]] = graph.cast %[[X]] : (tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK-DAG:     %[[WL:.+]] = graph.cast %[[W]] : (tensor<16x8xf32>) -> tensor<16x8xbf16>
// CHECK-DAG:     %[[BL:.+]] = graph.cast %[[B]] : (tensor<16xf32>) -> tensor<16xbf16>
// CHECK-DAG:     %[[VL:.+]] = graph.cast %[[V]] : (tensor<16x8xf32>) -> tensor<16x8xbf16>
// CHECK:         %[[H:.+]] = graph.linear %[[XL]], %[[WL]], %[[BL]] : {{.*}} -> tensor<4x16xbf16>
// CHECK:         %[[G:.+]] = graph.gelu %[[H]] {{.*}}: tensor<4x16xbf16>
// CHECK:         %[[S:.+]] = graph.full 5.000000e-01 : tensor<4x16xf32>
// CHECK:         %[[SL:.+]] = graph.cast %[[S]] : (tensor<4x16xf32>) -> tensor<4x16xbf16>
// CHECK:         %[[M:.+]] = graph.mul %[[G]], %[[SL]] : tensor<4x16xbf16>
// CHECK:         %[[Y:.+]] = graph.matmul %[[M]], %[[VL]] : (tensor<4x16xbf16>, tensor<16x8xbf16>) -> tensor<4x8xbf16>
// CHECK:         %[[YF:.+]] = graph.cast %[[Y]] : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK:         %[[P:.+]] = graph.softmax %[[YF]] {{.*}} -> tensor<4x8xf32>
// CHECK:         graph.layer_norm %[[P]]{{.*}}-> tensor<4x8xf32>
// CHECK:         graph.cross_entropy {{.*}} -> tensor<f32>
// CHECK:         return {{.*}} : tensor<f32>
// With fp16 and keep-fp32=gelu the gelu reads an f32 cast of the GEMM's f16.
// F16:           graph.linear {{.*}} -> tensor<4x16xf16>
// F16:           %[[HF:.+]] = graph.cast %{{.+}} : (tensor<4x16xf16>) -> tensor<4x16xf32>
// F16:           graph.gelu %[[HF]] {{.*}}: tensor<4x16xf32>
// F32-NOT:       graph.cast
// BAD: unknown precision 'int8'; expected fp32, bf16 or fp16
// BADOP: autocast: 'gleu' names no graph op
func.func @block(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>,
                 %v: tensor<16x8xf32>, %t: tensor<4xi64>, %gamma: tensor<8xf32>,
                 %beta: tensor<8xf32>) -> tensor<f32> {
  %h = graph.linear %x, %w, %b : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %g = graph.gelu %h : tensor<4x16xf32>
  %s = graph.full 5.000000e-01 : tensor<4x16xf32>
  %m = graph.mul %g, %s : tensor<4x16xf32>
  %y = graph.matmul %m, %v : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %p = graph.softmax %y {dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %n = graph.layer_norm %p, %gamma, %beta : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %l = graph.cross_entropy %n, %t : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
