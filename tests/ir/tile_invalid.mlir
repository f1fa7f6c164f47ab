// RUN: tilefuse-opt %s --split-input-file --verify-diagnostics
//
// A diagnostic for every tile verifier error.

func.func @mismatched_load(%p: !tile.ptr<f32>, %i: i64) {
  // expected-error @+1 {{'tile.load' op moves 'f16' through a pointer to 'f32'; the element types must match}}
  %v = tile.load %p[%i], %i {stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf16>
  return
}

// -----

func.func @negative_stride(%p: !tile.ptr<f32>, %i: i64) {
  // expected-error @+1 {{'tile.load' op stride -1 is negative}}
  %v = tile.load %p[%i], %i {stride = -1 : i64} : !tile.ptr<f32> -> vector<16xf32>
  return
}

// -----

func.func @zero_div(%p: !tile.ptr<f32>, %i: i64) {
  // expected-error @+1 {{'tile.load' op div 0 must be at least 1}}
  %v = tile.load %p[%i], %i from %i {div = 0 : i64, stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf32>
  return
}

// -----

func.func @broadcast_store(%p: !tile.ptr<f32>, %i: i64, %v: vector<8xf32>) {
  // expected-error @+1 {{'tile.store' op stride 0 would store several lanes to one element}}
  tile.store %v, %p[%i], %i {stride = 0 : i64} : vector<8xf32>, !tile.ptr<f32>
  return
}

// -----

func.func @gather_lanes(%p: !tile.ptr<f32>, %o: vector<8xi64>, %m: vector<16xi1>) {
  // expected-error @+1 {{'tile.gather' op offsets, mask and result must have 16 lanes each}}
  %v = tile.gather %p[%o], %m : !tile.ptr<f32>, vector<8xi64>, vector<16xi1> -> vector<16xf32>
  return
}

// -----

func.func @scatter_lanes(%p: !tile.ptr<f32>, %v: vector<8xf32>, %o: vector<8xi64>, %m: vector<4xi1>) {
  // expected-error @+1 {{'tile.scatter' op value, offsets and mask must have 8 lanes each}}
  tile.scatter %v, %p[%o], %m : vector<8xf32>, !tile.ptr<f32>, vector<8xi64>, vector<4xi1>
  return
}

// -----

func.func @bad_pointee(%p: !tile.ptr<i16>, %i: i64) {
  // expected-error @+1 {{'tile.load_scalar' op points to 'i16'; expected f32, f16, bf16, f64, i32, i64 or i8}}
  %v = tile.load_scalar %p[%i] : !tile.ptr<i16> -> i32
  return
}

// -----

func.func @scalar_store(%p: !tile.ptr<f64>, %i: i64, %x: f32) {
  // expected-error @+1 {{'tile.store_scalar' op moves 'f32' through a pointer to 'f64'; the element types must match}}
  tile.store_scalar %x, %p[%i] : f32, !tile.ptr<f64>
  return
}

// -----

func.func @reduce_type(%v: vector<8xf32>) {
  // expected-error @+1 {{'tile.reduce' op reduces 'vector<8xf32>' to 'f64'; the element types must match}}
  %r = tile.reduce add %v : vector<8xf32> -> f64
  return
}
