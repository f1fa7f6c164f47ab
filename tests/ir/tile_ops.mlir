// RUN: tilefuse-opt %s | tilefuse-opt | FileCheck %s
// RUN: tilefuse-opt %s --tilefuse-tile-to-llvm | FileCheck %s --check-prefix=LLVM
//
// Every tile op prints and parses back.

// CHECK-LABEL: func.func @all_ops(
// CHECK: tile.program_id : i64
// CHECK: tile.lanes : vector<16xi64>
// CHECK: tile.load %arg0[%{{.*}}], %{{.*}} {stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf32>
// CHECK: tile.load %arg0[%{{.*}}], %{{.*}} {stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf32>
// CHECK: tile.gather %arg0[%{{.*}}], %{{.*}} : !tile.ptr<f32>, vector<16xi64>, vector<16xi1> -> vector<16xf32>
// CHECK: tile.load_scalar %arg1[%{{.*}}] : !tile.ptr<i8> -> i8
// CHECK: tile.reduce max %{{.*}} : vector<16xf32> -> f32
// CHECK: tile.store %{{.*}}, %arg2[%{{.*}}], %{{.*}} {stride = 2 : i64} : vector<16xf32>, !tile.ptr<f32>
// CHECK: tile.scatter %{{.*}}, %arg2[%{{.*}}], %{{.*}} : vector<16xf32>, !tile.ptr<f32>, vector<16xi64>, vector<16xi1>
// CHECK: tile.store_scalar %{{.*}}, %arg2[%{{.*}}] : f32, !tile.ptr<f32>
// CHECK: tile.scratch {elements = 16 : i64} : !tile.ptr<f32>
// LLVM-LABEL: llvm.func @all_ops(
// LLVM-SAME:     !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64)
// A scratch row is allocated once, before the loop over programs.
// LLVM: llvm.alloca %{{.*}} x f32 {alignment = 64 : i64}
// LLVM: ^bb
// A block known to be full needs no mask.
// LLVM: llvm.load %{{.*}} {alignment = 4 : i64} : !llvm.ptr -> vector<16xf32>
// LLVM: llvm.intr.masked.load
// LLVM: llvm.intr.masked.gather
// LLVM: llvm.intr.vector.reduce.fmaximum
// LLVM: llvm.intr.masked.scatter
func.func @all_ops(%p: !tile.ptr<f32>, %b: !tile.ptr<i8>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.grid = 4 : i64, tile.block = 16 : i64} {
  %pid = tile.program_id : i64
  %l = tile.lanes : vector<16xi64>
  %c16 = arith.constant 16 : i64
  %off = arith.muli %pid, %c16 : i64
  %full = tile.load %p[%off], %c16 {stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf32>
  %left = arith.subi %c16, %pid : i64
  %part = tile.load %p[%off], %left {stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf32>
  %v = arith.addf %full, %part : vector<16xf32>
  %lim = vector.splat %c16 : vector<16xi64>
  %m = arith.cmpi slt, %l, %lim : vector<16xi64>
  %g = tile.gather %p[%l], %m : !tile.ptr<f32>, vector<16xi64>, vector<16xi1> -> vector<16xf32>
  %byte = tile.load_scalar %b[%pid] : !tile.ptr<i8> -> i8
  %zero = arith.constant 0 : i8
  %flag = arith.cmpi ne, %byte, %zero : i8
  %s = arith.select %flag, %v, %g : vector<16xf32>
  %r = tile.reduce max %s : vector<16xf32> -> f32
  tile.store %s, %o[%off], %c16 {stride = 2 : i64} : vector<16xf32>, !tile.ptr<f32>
  tile.scatter %g, %o[%l], %m : vector<16xf32>, !tile.ptr<f32>, vector<16xi64>, vector<16xi1>
  tile.store_scalar %r, %o[%pid] : f32, !tile.ptr<f32>
  %row = tile.scratch {elements = 16 : i64} : !tile.ptr<f32>
  tile.store %v, %row[%pid], %c16 {stride = 1 : i64} : vector<16xf32>, !tile.ptr<f32>
  return
}

// A load from a first lane (a concatenation's later input) and one that
// repeats each element for two lanes (the inverse of a stride-2 slice):
// on the CPU, masked loads; the repeated one reads half a block and
// spreads it with a shuffle, no gather.
// CHECK-LABEL: func.func @ranged_loads(
// CHECK: tile.load %arg0[%{{.*}}], %{{.*}} from %{{.*}} {stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf32>
// CHECK: tile.load %arg0[%{{.*}}], %{{.*}} {div = 2 : i64, stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf32>
// CHECK: tile.load %arg0[%{{.*}}], %{{.*}} from %{{.*}} {div = 4 : i64, stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf32>
// CHECK: tile.load %arg0[%{{.*}}], %{{.*}} {div = 2 : i64, stride = 2 : i64} : !tile.ptr<f32> -> vector<16xf32>
// CHECK: tile.load %arg0[%{{.*}}], %{{.*}} {stride = 2 : i64} : !tile.ptr<f32> -> vector<16xf32>
// CHECK: tile.load %arg0[%{{.*}}], %{{.*}} {div = 2 : i64, stride = 10 : i64} : !tile.ptr<f32> -> vector<16xf32>
// LLVM-LABEL: llvm.func @ranged_loads(
// LLVM: llvm.intr.masked.load %{{.*}} : (!llvm.ptr, vector<16xi1>, vector<16xf32>) -> vector<16xf32>
// LLVM: llvm.load %{{.*}} {alignment = 4 : i64} : !llvm.ptr -> vector<8xf32>
// LLVM: llvm.shufflevector %{{.*}} [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7] : vector<8xf32>
// LLVM: llvm.intr.masked.load %{{.*}} : (!llvm.ptr, vector<4xi1>, vector<4xf32>) -> vector<4xf32>
// LLVM: llvm.shufflevector %{{.*}} [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3] : vector<4xf32>
// Stride 2, each element twice: the 15 elements from the first to the
// last, read as one masked block, every other one spread.
// LLVM: llvm.intr.masked.load %{{.*}} : (!llvm.ptr, vector<16xi1>, vector<16xf32>) -> vector<16xf32>
// LLVM: llvm.shufflevector %{{.*}} [0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14] : vector<16xf32>
// Stride 2 alone: the 31 elements as two blocks, every other one picked.
// LLVM: llvm.intr.masked.load %{{.*}} : (!llvm.ptr, vector<32xi1>, vector<32xf32>) -> vector<32xf32>
// LLVM: llvm.shufflevector %{{.*}} [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30] : vector<32xf32>
// Stride 10: 71 elements, more than four blocks: a gather.
// LLVM: llvm.intr.masked.gather
func.func @ranged_loads(%p: !tile.ptr<f32>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.grid = 4 : i64, tile.block = 16 : i64} {
  %pid = tile.program_id : i64
  %c16 = arith.constant 16 : i64
  %c3 = arith.constant 3 : i64
  %off = arith.muli %pid, %c16 : i64
  %a = tile.load %p[%off], %c16 from %c3 {stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf32>
  %b = tile.load %p[%off], %c16 {div = 2 : i64, stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf32>
  %c = tile.load %p[%off], %c16 from %c3 {div = 4 : i64, stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf32>
  %e = tile.load %p[%off], %c16 {div = 2 : i64, stride = 2 : i64} : !tile.ptr<f32> -> vector<16xf32>
  %f = tile.load %p[%off], %c16 {stride = 2 : i64} : !tile.ptr<f32> -> vector<16xf32>
  %d = tile.load %p[%off], %c16 {div = 2 : i64, stride = 10 : i64} : !tile.ptr<f32> -> vector<16xf32>
  %ab = arith.addf %a, %b : vector<16xf32>
  %cd = arith.addf %c, %d : vector<16xf32>
  %ef = arith.addf %e, %f : vector<16xf32>
  %abe = arith.addf %ab, %ef : vector<16xf32>
  %s = arith.addf %abe, %cd : vector<16xf32>
  tile.store %s, %o[%off], %c16 {stride = 1 : i64} : vector<16xf32>, !tile.ptr<f32>
  return
}
