// RUN: tilefuse-opt %s --emit=tile | FileCheck %s
// RUN: tilefuse-opt %s --emit=tile --target=cuda:sm_90 | FileCheck %s --check-prefix=CUDA
//
// graph.fusion -> tile programs: how programs split the domain, which loads
// are contiguous, strided, broadcast or gathered, and where reductions live.

// Softmax with rows that fit one block (row reductions use blocks of up to
// 32 on the CPU): one program per row, the row read
// once, both reductions in registers, one store.
// CHECK-LABEL: func.func @softmax_kernel0_{{[0-9a-f]+}}(
// CHECK-SAME:    tile.block = 32 : i64
// CHECK-SAME:    tile.fused_ops = ["graph.reduce_max", "graph.broadcast_in_dim", "graph.sub", "graph.exp", "graph.reduce_sum", "graph.broadcast_in_dim", "graph.div"]
// CHECK-SAME:    tile.grid = 16 : i64
// CHECK:         tile.program_id
// CHECK-COUNT-1: tile.load {{.*}}{stride = 1 : i64}
// CHECK-NOT:     tile.load
// CHECK:         tile.reduce max
// CHECK:         math.exp
// CHECK:         tile.reduce add
// CHECK-NOT:     scf.for
// CHECK:         tile.store {{.*}}stride = 1 : i64}
// CUDA-LABEL: func.func @softmax_kernel0_{{[0-9a-f]+}}(
// CUDA-SAME:    tile.block = 32 : i64
func.func @softmax(%x: tensor<16x30xf32>) -> tensor<16x30xf32> {
  %0 = graph.softmax %x {dim = 1 : i64} : (tensor<16x30xf32>) -> tensor<16x30xf32>
  return %0 : tensor<16x30xf32>
}

// Rows longer than a block: the reductions loop over the row in blocks.
// CHECK-LABEL: func.func @softmax_long_kernel0_{{[0-9a-f]+}}(
// CHECK-SAME:    tile.grid = 4 : i64
// CHECK:         scf.for
// CHECK:           tile.load
// CHECK:         tile.reduce max
// CHECK:         scf.for
// CHECK:         tile.reduce add
// CHECK:         scf.for
// CHECK:           tile.store
// CUDA-LABEL: func.func @softmax_long_kernel0_{{[0-9a-f]+}}(
// CUDA-SAME:    tile.block = 1024 : i64
func.func @softmax_long(%x: tensor<4x1000xf32>) -> tensor<4x1000xf32> {
  %0 = graph.softmax %x {dim = 1 : i64} : (tensor<4x1000xf32>) -> tensor<4x1000xf32>
  return %0 : tensor<4x1000xf32>
}

// A bias broadcast along rows is a contiguous block; a per-row value is one
// scalar load; a transposed operand is a strided block load.
// CHECK-LABEL: func.func @views_kernel0_{{[0-9a-f]+}}(
// CHECK-SAME:    tile.grid = 8 : i64
// CHECK-DAG:     tile.load %arg0[{{.*}}], {{.*}}{stride = 1 : i64}
// CHECK-DAG:     tile.load %arg1[{{.*}}], {{.*}}{stride = 1 : i64}
// CHECK-DAG:     tile.load_scalar %arg2
// CHECK-DAG:     tile.load %arg3[{{.*}}], {{.*}}{stride = 8 : i64}
func.func @views(%x: tensor<8x64xf32>, %b: tensor<64xf32>, %r: tensor<8x1xf32>, %t: tensor<64x8xf32>) -> tensor<8x64xf32> {
  %0 = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<64xf32>) -> tensor<8x64xf32>
  %1 = graph.broadcast_in_dim %r {dims = array<i64: 0, 1>} : (tensor<8x1xf32>) -> tensor<8x64xf32>
  %2 = graph.transpose %t {perm = array<i64: 1, 0>} : (tensor<64x8xf32>) -> tensor<8x64xf32>
  %3 = graph.add %x, %0 : tensor<8x64xf32>
  %4 = graph.mul %3, %1 : tensor<8x64xf32>
  %5 = graph.sub %4, %2 : tensor<8x64xf32>
  %6 = graph.tanh %5 : tensor<8x64xf32>
  return %6 : tensor<8x64xf32>
}

// A transpose whose rows span several blocks: consecutive programs step
// along the result's rows (the input's columns) and only then along the
// blocks of a row, so the input's lines a block gathers from are read again
// by the next programs while still cached.
// CHECK-LABEL: func.func @transposed_program_order_kernel0_{{[0-9a-f]+}}(
// CHECK-SAME:    tile.grid = 1536 : i64
// CHECK:         %[[PID:.*]] = tile.program_id
// CHECK-DAG:     %[[ROW:.*]] = arith.remui %[[PID]], %c384_i64
// CHECK-DAG:     %[[REST:.*]] = arith.divui %[[PID]], %c384_i64
// CHECK-DAG:     %[[BLOCK:.*]] = arith.remui %[[REST]], %c4_i64
// CHECK:         tile.load %arg0[{{.*}}], {{.*}}{stride = 384 : i64}
// CHECK:         tile.store {{.*}}{alignment = 64 : i64, stride = 1 : i64}
// The same kernel reading its input in place walks rows in order.
// CHECK-LABEL: func.func @row_major_program_order_kernel0_{{[0-9a-f]+}}(
// CHECK:         %[[PID2:.*]] = tile.program_id
// CHECK:         arith.divui %[[PID2]], %c4_i64
func.func @transposed_program_order(%x: tensor<256x384xf32>) -> tensor<384x256xf32> {
  %0 = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<256x384xf32>) -> tensor<384x256xf32>
  return %0 : tensor<384x256xf32>
}
func.func @row_major_program_order(%x: tensor<384x256xf32>) -> tensor<384x256xf32> {
  %0 = graph.neg %x : tensor<384x256xf32>
  return %0 : tensor<384x256xf32>
}

// A long f32 row sum: each lane accumulates in f64, the lanes fold in f64,
// the result is rounded to f32 once.
// CHECK-LABEL: func.func @long_row_sum_kernel0_{{[0-9a-f]+}}(
// CHECK:         scf.for {{.*}} iter_args({{.*}}) -> (vector<{{[0-9]+}}xf64>)
// CHECK:           arith.extf {{.*}} to vector<{{[0-9]+}}xf64>
// CHECK:         tile.reduce add {{.*}} : vector<{{[0-9]+}}xf64> -> f64
// CHECK:         arith.truncf {{.*}} : f64 to f32
func.func @long_row_sum(%x: tensor<2x100000xf32>) -> tensor<2xf32> {
  %0 = graph.reduce_sum %x {dims = array<i64: 1>} : (tensor<2x100000xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// A reshape whose rows do not line up with the block: row-major in, row-major
// out, so the per-lane coordinates linearize back to the program's own
// contiguous index: a block load, not a gather.
// CHECK-LABEL: func.func @reshape_gather_kernel0_{{[0-9a-f]+}}(
// CHECK-NOT:     tile.gather
// CHECK:         tile.load %arg0[[[OFF:%[0-9]+]]], %c6_i64 {stride = 1 : i64}
// CHECK:         tile.store {{.*}}, %arg1[[[OFF]]]
func.func @reshape_gather(%x: tensor<6x5xf32>) -> tensor<5x6xf32> {
  %0 = graph.reshape %x : (tensor<6x5xf32>) -> tensor<5x6xf32>
  %1 = graph.exp %0 : tensor<5x6xf32>
  return %1 : tensor<5x6xf32>
}

// Through a transpose the lanes' addresses are no longer contiguous: a
// gather with per-lane indices.
// CHECK-LABEL: func.func @reshape_of_transpose_kernel0_{{[0-9a-f]+}}(
// CHECK:         arith.remui {{.*}} : vector<{{[0-9]+}}xi64>
// CHECK:         tile.gather
func.func @reshape_of_transpose(%x: tensor<6x5xf32>) -> tensor<6x5xf32> {
  %t = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<6x5xf32>) -> tensor<5x6xf32>
  %0 = graph.reshape %t : (tensor<5x6xf32>) -> tensor<6x5xf32>
  %1 = graph.exp %0 : tensor<6x5xf32>
  return %1 : tensor<6x5xf32>
}

// Reducing the leading dimension (layer_norm's dgamma): lanes run along the
// kept columns, a scalar loop over the rows accumulates per lane (f32 in
// f64), no horizontal reduction.
// CHECK-LABEL: func.func @column_sum_kernel0_{{[0-9a-f]+}}(
// CHECK-SAME:    tile.grid = 1 : i64
// CHECK:         scf.for {{.*}} iter_args({{.*}}) -> (vector<64xf64>)
// CHECK:           tile.load {{.*}}{stride = 1 : i64}
// CHECK-NOT:     tile.reduce
// CHECK:         tile.store
func.func @column_sum(%x: tensor<32x64xf32>) -> tensor<64xf32> {
  %0 = graph.reduce_sum %x {dims = array<i64: 0>} : (tensor<32x64xf32>) -> tensor<64xf32>
  return %0 : tensor<64xf32>
}

// f16 storage, f32 arithmetic; booleans are bytes.
// CHECK-LABEL: func.func @half_kernel0_{{[0-9a-f]+}}(
// CHECK-SAME:    !tile.ptr<f16>, %{{.*}}: !tile.ptr<i8>
// CHECK-DAG:     arith.extf {{.*}} : vector<64xf16> to vector<64xf32>
// CHECK-DAG:     arith.cmpi ne, {{.*}} : vector<64xi8>
// CHECK:         arith.truncf {{.*}} : vector<64xf32> to vector<64xf16>
// CHECK:         tile.store {{.*}} : vector<64xf16>
func.func @half(%x: tensor<128xf16>, %m: tensor<128xi1>) -> tensor<128xf16> {
  %0 = graph.exp %x : tensor<128xf16>
  %1 = graph.select %m, %0, %x : (tensor<128xi1>, tensor<128xf16>, tensor<128xf16>) -> tensor<128xf16>
  return %1 : tensor<128xf16>
}

// Results of 64 MiB and more are streamed past the cache on the CPU (the
// alignment says whole cache lines); small ones are not.
// CHECK-LABEL: func.func @big_kernel0_{{[0-9a-f]+}}(
// CHECK:         tile.store {{.*}}{alignment = 64 : i64, streaming, stride = 1 : i64}
// CHECK-LABEL: func.func @small_kernel0_{{[0-9a-f]+}}(
// CHECK-NOT:     streaming
// CHECK:         return
// CUDA-LABEL: func.func @big_kernel0_{{[0-9a-f]+}}(
// CUDA-NOT:     streaming
// CUDA:         return
func.func @big(%x: tensor<4096x4096xf32>) -> tensor<4096x4096xf32> {
  %0 = graph.neg %x : tensor<4096x4096xf32>
  return %0 : tensor<4096x4096xf32>
}
func.func @small(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %0 = graph.neg %x : tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}

// Dropout's Philox on contiguous lanes: one Philox per counter of four
// elements, words interleaved by shuffles (no per-lane word select).
// CHECK-LABEL: func.func @dropout_kernel0_{{[0-9a-f]+}}(
// CHECK-NOT:     arith.cmpi eq
// CHECK:         arith.mului_extended {{.*}} : vector<16xi32>
// CHECK-NOT:     arith.cmpi eq
// CHECK:         vector.interleave {{.*}} : vector<16xi32>
// CHECK:         vector.interleave {{.*}} : vector<16xi32>
// CHECK:         vector.shuffle
// CHECK:         return
func.func @dropout(%x: tensor<4x64xf32>, %seed: tensor<i64>) -> tensor<4x64xf32> {
  %0 = graph.dropout %x, %seed {p = 1.000000e-01 : f64} : (tensor<4x64xf32>, tensor<i64>) -> tensor<4x64xf32>
  return %0 : tensor<4x64xf32>
}

// A full reduction of 2^18 elements or more: 32 programs fold a slice each
// into slots, one program folds the slots and finishes (here: the mean).
// CHECK-LABEL: func.func @mean_kernel0_partial_{{[0-9a-f]+}}(
// CHECK-SAME:    !tile.ptr<f32>, %{{.*}}: !tile.ptr<f32>)
// CHECK-SAME:    tile.grid = 32 : i64
// CHECK:         tile.program_id
// CHECK:         scf.for
// CHECK:         tile.reduce add
// CHECK:         tile.store_scalar
// CHECK-LABEL: func.func @mean_kernel0_combine_{{[0-9a-f]+}}(
// CHECK-SAME:    tile.block = 32 : i64
// CHECK-SAME:    tile.grid = 1 : i64
// CHECK:         tile.load %arg1[{{.*}}], {{.*}}
// CHECK:         tile.reduce add {{.*}} : vector<32xf32>
// CHECK:         arith.divf
// CHECK:         tile.store_scalar
func.func @mean(%x: tensor<512x1024xf32>) -> tensor<f32> {
  %0 = graph.reduce_sum %x {dims = array<i64: 0, 1>} : (tensor<512x1024xf32>) -> tensor<f32>
  %n = graph.full 5.24288e+05 : tensor<f32>
  %1 = graph.div %0, %n : tensor<f32>
  return %1 : tensor<f32>
}

// A column reduction with few blocks of kept elements (96 columns: 2 CPU
// blocks) over many rows: the partial kernel's programs each fold a slice
// of the rows (128 slices of 64 rows) into slot[slice, column]; on the CPU
// a program walks its rows in memory order, both blocks of each row, into
// f64 accumulators kept in a scratch row; the combine kernel folds the 128
// slices per column and finishes (here: times w). On CUDA (one block of
// 128 columns), 256 slices of 32 rows.
// CHECK-LABEL: func.func @colsum_kernel0_partial_{{[0-9a-f]+}}(
// CHECK-SAME:    tile.grid = 128 : i64
// CHECK:         %[[ACC:.*]] = tile.scratch {elements = 96 : i64} : !tile.ptr<f64>
// CHECK:         %[[SLICE:.*]] = tile.program_id
// CHECK:         scf.for %{{.*}} = %c0_i64 to %c2_i64
// CHECK:           tile.store %{{.*}}, %[[ACC]]
// CHECK:         scf.for %{{.*}} = %[[LO:.*]] to %[[HI:.*]] step
// CHECK:           scf.for %{{.*}} = %c0_i64 to %c2_i64
// CHECK:             tile.load %arg0
// CHECK:             math.exp
// CHECK:             tile.load %[[ACC]]
// CHECK:             arith.addf
// CHECK:             tile.store %{{.*}}, %[[ACC]]
// CHECK:         scf.for %{{.*}} = %c0_i64 to %c2_i64
// CHECK:           tile.load %[[ACC]]
// CHECK:           arith.muli %[[SLICE]], %c96_i64
// CHECK:           tile.store %{{.*}}, %arg2[
// CHECK-NOT:     tile.reduce
// CHECK-LABEL: func.func @colsum_kernel0_combine_{{[0-9a-f]+}}(
// CHECK-SAME:    tile.grid = 2 : i64
// CHECK:         scf.for %{{.*}} = %c0_i64 to %c128_i64
// CHECK:           tile.load %arg2[
// CHECK:         arith.mulf
// CHECK:         tile.store
// CUDA-LABEL: func.func @colsum_kernel0_partial_{{[0-9a-f]+}}(
// CUDA-SAME:    tile.block = 128 : i64
// CUDA-SAME:    tile.grid = 256 : i64
// CUDA-LABEL: func.func @colsum_kernel0_combine_{{[0-9a-f]+}}(
// CUDA-SAME:    tile.grid = 1 : i64
func.func @colsum(%x: tensor<8192x96xf32>, %w: tensor<96xf32>) -> tensor<96xf32> {
  %0 = graph.exp %x : tensor<8192x96xf32>
  %1 = graph.reduce_sum %0 {dims = array<i64: 0>} : (tensor<8192x96xf32>) -> tensor<96xf32>
  %2 = graph.mul %1, %w : tensor<96xf32>
  return %2 : tensor<96xf32>
}

// A concat along the lanes whose inputs each span whole blocks: every
// block lies in one input, so each input is read contiguously where it is,
// with its loads masked off (limit 0) outside its own blocks, and the block
// picks its input whole. Where inputs split blocks, each input's lanes are
// a range [from, limit) of the block (the first input's from lane 0): its
// loads stay contiguous, confined to that range, and the lanes pick their
// input.
// CHECK-LABEL: func.func @concat_blocks_kernel0
// CHECK-NOT:     tile.gather
// CHECK:         %[[IN0:.+]] = arith.andi %{{.+}}, %{{.+}} : i1
// CHECK:         %[[LIM0:.+]] = arith.select %[[IN0]], %c64_i64, %c0_i64 : i64
// CHECK:         %[[A:.+]] = tile.load %arg0[%{{.+}}], %[[LIM0]] {stride = 1 : i64}
// CHECK:         %[[IN1:.+]] = arith.andi %{{.+}}, %{{.+}} : i1
// CHECK:         %[[LIM1:.+]] = arith.select %[[IN1]], %c64_i64, %c0_i64 : i64
// CHECK:         %[[B:.+]] = tile.load %arg1[%{{.+}}], %[[LIM1]] {stride = 1 : i64}
// CHECK:         %[[V:.+]] = arith.select %[[IN1]], %[[B]], %[[A]] : vector<64xf32>
// CHECK:         tile.store %[[V]], %arg2
// CHECK-LABEL: func.func @concat_unaligned_kernel0
// CHECK-NOT:     tile.gather
// CHECK:         %[[A:.+]] = tile.load %arg0[%{{.+}}], %{{.+}} {stride = 1 : i64}
// CHECK:         %[[B:.+]] = tile.load %arg1[%{{.+}}], %{{.+}} from %[[FROM:.+]] {stride = 1 : i64}
// CHECK:         %[[LANES:.+]] = vector.splat %[[FROM]]
// CHECK:         %[[IN1:.+]] = arith.andi
// CHECK:         arith.select %[[IN1]], %[[B]], %[[A]] : vector<64xi1>, vector<64xf32>
// CHECK-NOT:     tile.gather
func.func @concat_blocks(%a: tensor<64x128xf32>, %b: tensor<64x128xf32>) -> tensor<64x256xf32> {
  %c = graph.concat %a, %b {dim = 1 : i64} : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x256xf32>
  return %c : tensor<64x256xf32>
}
func.func @concat_unaligned(%a: tensor<64x100xf32>, %b: tensor<64x156xf32>) -> tensor<64x256xf32> {
  %c = graph.concat %a, %b {dim = 1 : i64} : (tensor<64x100xf32>, tensor<64x156xf32>) -> tensor<64x256xf32>
  return %c : tensor<64x256xf32>
}

// Interleaving with zeros (the inverse of a stride-2 slice: reshape to
// [.., 13, 1], concatenate zeros, reshape to [.., 26]): lane l reads
// element l / 2 of the row, one load of half a block spread over the
// lanes (div = 2), and the lanes' parity picks the zeros. No gather.
// CHECK-LABEL: func.func @interleave_zeros_kernel0
// CHECK-NOT:     tile.gather
// CHECK:         %[[HALF:.+]] = tile.load %arg0[%{{.+}}], %c26_i64 {div = 2 : i64, stride = 1 : i64}
// CHECK:         arith.select %{{.+}}, %{{.+}}, %[[HALF]]
// CHECK-NOT:     tile.gather
// CUDA-LABEL: func.func @interleave_zeros_kernel0
// CUDA:         tile.load %arg0[%{{.+}}], %{{.+}} {div = 2 : i64, stride = 1 : i64}
func.func @interleave_zeros(%a: tensor<8x13xf32>) -> tensor<8x26xf32> {
  %r = graph.reshape %a : (tensor<8x13xf32>) -> tensor<8x13x1xf32>
  %z = graph.full 0.0 : tensor<8x13x1xf32>
  %c = graph.concat %r, %z {dim = 2 : i64} : (tensor<8x13x1xf32>, tensor<8x13x1xf32>) -> tensor<8x13x2xf32>
  %o = graph.reshape %c : (tensor<8x13x2xf32>) -> tensor<8x26xf32>
  %e = graph.exp %o : tensor<8x26xf32>
  return %e : tensor<8x26xf32>
}

// A column kernel whose full-size result reads no reduction, split over
// slices of rows (one block of 64 kept elements alone is too little
// parallelism): the partial kernel's walk stores the result at the
// elements it computes while it sums them (tanh once per element; arg1 is
// the slices' sums, arg2 the result), and the combine kernel only folds
// the slices.
// CHECK-LABEL: func.func @column_early_kernel0_partial
// CHECK:         scf.for
// CHECK:           %[[SUM:.+]] = scf.for {{.*}} iter_args({{.*}}) -> (vector<64xf64>)
// CHECK:             %[[T:.+]] = math.tanh
// CHECK:             arith.addf
// CHECK:             tile.store %[[T]], %arg2
// CHECK:             scf.yield
// CHECK-NOT:     math.tanh
// CHECK:         tile.store %{{.+}}, %arg1
// CHECK-LABEL: func.func @column_early_kernel0_combine
// CHECK-NOT:     math.tanh
// CHECK:         tile.store %{{.+}}, %arg2
func.func @column_early(%x: tensor<512x64xf32>) -> (tensor<512x64xf32>, tensor<64xf32>) {
  %c = graph.full 2.0 : tensor<512x64xf32>
  %m = graph.mul %x, %c : tensor<512x64xf32>
  %t = graph.tanh %m : tensor<512x64xf32>
  %s = graph.reduce_sum %t {dims = array<i64: 0>} : (tensor<512x64xf32>) -> tensor<64xf32>
  return %t, %s : tensor<512x64xf32>, tensor<64xf32>
}

// A pointwise kernel whose result is its domain reshaped with the rows kept
// ([B*T, V] written as [B, T, V]; a row of 100 over blocks of 64): the
// result's coordinates map the leading ones alone, so a value per row stays
// one scalar load per program, not a gather per lane.
// CHECK-LABEL: func.func @row_values_reshaped_on_store_kernel0_{{[0-9a-f]+}}(
// CHECK-NOT:     tile.gather
// CHECK:         tile.load {{.*}}{stride = 1 : i64} : !tile.ptr<f32> -> vector<64xf32>
// CHECK:         tile.load_scalar
// CHECK-NOT:     tile.gather
// CHECK:         tile.store {{.*}}stride = 1 : i64} : vector<64xbf16>
func.func @row_values_reshaped_on_store(%x: tensor<4x100xf32>, %s: tensor<4x1xf32>) -> tensor<2x2x100xbf16> {
  %e = graph.exp %x : tensor<4x100xf32>
  %sb = graph.broadcast_in_dim %s {dims = array<i64: 0, 1>} : (tensor<4x1xf32>) -> tensor<4x100xf32>
  %m = graph.mul %e, %sb : tensor<4x100xf32>
  %r = graph.reshape %m : (tensor<4x100xf32>) -> tensor<2x2x100xf32>
  %c = graph.cast %r : (tensor<2x2x100xf32>) -> tensor<2x2x100xbf16>
  return %c : tensor<2x2x100xbf16>
}
