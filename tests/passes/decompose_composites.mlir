// RUN: tilefuse-opt %s --decompose-composites | FileCheck %s --check-prefixes=CHECK,DECOMP
// RUN: tilefuse-opt %s --decompose-composites --canonicalize --cse | FileCheck %s --check-prefixes=CHECK,CSE
// RUN: tilefuse-opt %s --decompose-composites | FileCheck %s --check-prefix=NOCOMP
// RUN: tilefuse-opt %s --decompose-composites --canonicalize --cse | FileCheck %s --check-prefix=NOCOMP
//
// Every composite op becomes primitives. Where a rule builds two sibling
// operands in one C++ call expression (e.g. `mul(a(), b())`), their creation
// order depends on the compiler's argument evaluation order, so those ops are
// matched with CHECK-DAG.

// No composite op survives anywhere in the output.
// NOCOMP-NOT: graph.{{(softmax|log_softmax|layer_norm|gelu|silu|relu|linear|dropout|cross_entropy|nll|mse|bce)}}

// Softmax subtracts the row maximum before exp; the shift carries no
// gradient (stop_gradient), as in PyTorch and JAX.
// CHECK-LABEL: func.func @softmax(
// CHECK-SAME:      %[[X:.+]]: tensor<4x8xf32>)
// CHECK-NEXT:    %[[MAXR:.+]] = graph.reduce_max %[[X]] {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
// CHECK-NEXT:    %[[MAX:.+]] = graph.stop_gradient %[[MAXR]] : tensor<4x1xf32>
// CHECK-NEXT:    %[[MAXB:.+]] = graph.broadcast_in_dim %[[MAX]] {dims = array<i64: 0, 1>} : (tensor<4x1xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[SHIFT:.+]] = graph.sub %[[X]], %[[MAXB]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[EXP:.+]] = graph.exp %[[SHIFT]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[SUM:.+]] = graph.reduce_sum %[[EXP]] {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
// CHECK-NEXT:    %[[SUMB:.+]] = graph.broadcast_in_dim %[[SUM]] {dims = array<i64: 0, 1>} : (tensor<4x1xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[R:.+]] = graph.div %[[EXP]], %[[SUMB]] : tensor<4x8xf32>
// CHECK-NEXT:    return %[[R]] : tensor<4x8xf32>
func.func @softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = graph.softmax %x {dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// log_softmax(x) = (x - max) - log(sum(exp(x - max))), here along dim 0 in f16.
// CHECK-LABEL: func.func @log_softmax(
// CHECK-SAME:      %[[X:.+]]: tensor<4x8xf16>)
// CHECK-NEXT:    %[[MAXR:.+]] = graph.reduce_max %[[X]] {dims = array<i64: 0>, keepdim = true} : (tensor<4x8xf16>) -> tensor<1x8xf16>
// CHECK-NEXT:    %[[MAX:.+]] = graph.stop_gradient %[[MAXR]] : tensor<1x8xf16>
// CHECK-NEXT:    %[[MAXB:.+]] = graph.broadcast_in_dim %[[MAX]] {dims = array<i64: 0, 1>} : (tensor<1x8xf16>) -> tensor<4x8xf16>
// CHECK-NEXT:    %[[SHIFT:.+]] = graph.sub %[[X]], %[[MAXB]] : tensor<4x8xf16>
// CHECK-NEXT:    %[[EXP:.+]] = graph.exp %[[SHIFT]] : tensor<4x8xf16>
// CHECK-NEXT:    %[[SUM:.+]] = graph.reduce_sum %[[EXP]] {dims = array<i64: 0>, keepdim = true} : (tensor<4x8xf16>) -> tensor<1x8xf16>
// CHECK-NEXT:    %[[LSE:.+]] = graph.log %[[SUM]] : tensor<1x8xf16>
// CHECK-NEXT:    %[[LSEB:.+]] = graph.broadcast_in_dim %[[LSE]] {dims = array<i64: 0, 1>} : (tensor<1x8xf16>) -> tensor<4x8xf16>
// CHECK-NEXT:    %[[R:.+]] = graph.sub %[[SHIFT]], %[[LSEB]] : tensor<4x8xf16>
// CHECK-NEXT:    return %[[R]] : tensor<4x8xf16>
func.func @log_softmax(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
  %0 = graph.log_softmax %x {dim = 0 : i64} : (tensor<4x8xf16>) -> tensor<4x8xf16>
  return %0 : tensor<4x8xf16>
}

// layer_norm over the last dimension: biased variance, default epsilon 1e-5.
// CHECK-LABEL: func.func @layer_norm(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<4x8xf32>, %[[W:[^:]+]]: tensor<8xf32>, %[[B:[^:]+]]: tensor<8xf32>)
// CHECK-NEXT:    %[[SUM:.+]] = graph.reduce_sum %[[X]] {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
// CHECK-NEXT:    %[[INVN:.+]] = graph.full 1.250000e-01 : tensor<4x1xf32>
// CHECK-NEXT:    %[[MEAN:.+]] = graph.mul %[[SUM]], %[[INVN]] : tensor<4x1xf32>
// CHECK-NEXT:    %[[MEANB:.+]] = graph.broadcast_in_dim %[[MEAN]] {dims = array<i64: 0, 1>} : (tensor<4x1xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[C:.+]] = graph.sub %[[X]], %[[MEANB]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[SQ:.+]] = graph.mul %[[C]], %[[C]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[SQSUM:.+]] = graph.reduce_sum %[[SQ]] {dims = array<i64: 1>, keepdim = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
// DECOMP-NEXT:   %[[INVN2:.+]] = graph.full 1.250000e-01 : tensor<4x1xf32>
// DECOMP-NEXT:   %[[VAR:.+]] = graph.mul %[[SQSUM]], %[[INVN2]] : tensor<4x1xf32>
// CSE-NEXT:      %[[VAR:.+]] = graph.mul %[[SQSUM]], %[[INVN]] : tensor<4x1xf32>
// CHECK-NEXT:    %[[EPS:.+]] = graph.full 1.000000e-05 : tensor<4x1xf32>
// CHECK-NEXT:    %[[VE:.+]] = graph.add %[[VAR]], %[[EPS]] : tensor<4x1xf32>
// CHECK-NEXT:    %[[INV:.+]] = graph.rsqrt %[[VE]] : tensor<4x1xf32>
// CHECK-NEXT:    %[[INVB:.+]] = graph.broadcast_in_dim %[[INV]] {dims = array<i64: 0, 1>} : (tensor<4x1xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[N:.+]] = graph.mul %[[C]], %[[INVB]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[WB:.+]] = graph.broadcast_in_dim %[[W]] {dims = array<i64: 1>} : (tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[S:.+]] = graph.mul %[[N]], %[[WB]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[BB:.+]] = graph.broadcast_in_dim %[[B]] {dims = array<i64: 1>} : (tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[R:.+]] = graph.add %[[S]], %[[BB]] : tensor<4x8xf32>
// CHECK-NEXT:    return %[[R]] : tensor<4x8xf32>
func.func @layer_norm(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = graph.layer_norm %x, %g, %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// layer_norm over the two trailing dimensions: 1/n = 1/32, explicit epsilon.
// CHECK-LABEL: func.func @layer_norm_2d(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<2x4x8xf32>, %[[W:[^:]+]]: tensor<4x8xf32>, %[[B:[^:]+]]: tensor<4x8xf32>)
// CHECK-NEXT:    %[[SUM:.+]] = graph.reduce_sum %[[X]] {dims = array<i64: 1, 2>, keepdim = true} : (tensor<2x4x8xf32>) -> tensor<2x1x1xf32>
// CHECK-NEXT:    %[[INVN:.+]] = graph.full 3.125000e-02 : tensor<2x1x1xf32>
// CHECK-NEXT:    %[[MEAN:.+]] = graph.mul %[[SUM]], %[[INVN]] : tensor<2x1x1xf32>
// CHECK-NEXT:    %[[MEANB:.+]] = graph.broadcast_in_dim %[[MEAN]] {dims = array<i64: 0, 1, 2>} : (tensor<2x1x1xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:    %[[C:.+]] = graph.sub %[[X]], %[[MEANB]] : tensor<2x4x8xf32>
// CHECK-NEXT:    %[[SQ:.+]] = graph.mul %[[C]], %[[C]] : tensor<2x4x8xf32>
// CHECK-NEXT:    %[[SQSUM:.+]] = graph.reduce_sum %[[SQ]] {dims = array<i64: 1, 2>, keepdim = true} : (tensor<2x4x8xf32>) -> tensor<2x1x1xf32>
// DECOMP-NEXT:   graph.full 3.125000e-02 : tensor<2x1x1xf32>
// CHECK-NEXT:    %[[VAR:.+]] = graph.mul %[[SQSUM]], %{{.+}} : tensor<2x1x1xf32>
// CHECK-NEXT:    %[[EPS:.+]] = graph.full 1.000000e-03 : tensor<2x1x1xf32>
// CHECK-NEXT:    %[[VE:.+]] = graph.add %[[VAR]], %[[EPS]] : tensor<2x1x1xf32>
// CHECK-NEXT:    %[[INV:.+]] = graph.rsqrt %[[VE]] : tensor<2x1x1xf32>
// CHECK-NEXT:    %[[INVB:.+]] = graph.broadcast_in_dim %[[INV]] {dims = array<i64: 0, 1, 2>} : (tensor<2x1x1xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:    %[[N:.+]] = graph.mul %[[C]], %[[INVB]] : tensor<2x4x8xf32>
// CHECK-NEXT:    %[[WB:.+]] = graph.broadcast_in_dim %[[W]] {dims = array<i64: 1, 2>} : (tensor<4x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:    %[[S:.+]] = graph.mul %[[N]], %[[WB]] : tensor<2x4x8xf32>
// CHECK-NEXT:    %[[BB:.+]] = graph.broadcast_in_dim %[[B]] {dims = array<i64: 1, 2>} : (tensor<4x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:    %[[R:.+]] = graph.add %[[S]], %[[BB]] : tensor<2x4x8xf32>
// CHECK-NEXT:    return %[[R]] : tensor<2x4x8xf32>
func.func @layer_norm_2d(%x: tensor<2x4x8xf32>, %g: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<2x4x8xf32> {
  %0 = graph.layer_norm %x, %g, %b {epsilon = 1.0e-03 : f64} : (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// gelu (exact): 0.5 x (1 + erf(x / sqrt 2)).
// CHECK-LABEL: func.func @gelu(
// CHECK-SAME:      %[[X:.+]]: tensor<4xf32>)
// CHECK-NEXT:    %[[RS2:.+]] = graph.full 0.70710678118654757 : tensor<4xf32>
// CHECK-NEXT:    %[[XS:.+]] = graph.mul %[[X]], %[[RS2]] : tensor<4xf32>
// CHECK-NEXT:    %[[ERF:.+]] = graph.erf %[[XS]] : tensor<4xf32>
// CHECK-DAG:     %[[ONE:.+]] = graph.full 1.000000e+00 : tensor<4xf32>
// CHECK-DAG:     %[[P1:.+]] = graph.add %[[ERF]], %[[ONE]] : tensor<4xf32>
// CHECK-DAG:     %[[HALF:.+]] = graph.full 5.000000e-01 : tensor<4xf32>
// CHECK-DAG:     %[[HX:.+]] = graph.mul %[[X]], %[[HALF]] : tensor<4xf32>
// CHECK:         %[[R:.+]] = graph.mul %[[HX]], %[[P1]] : tensor<4xf32>
// CHECK-NEXT:    return %[[R]] : tensor<4xf32>
// CHECK-NOT:     graph.tanh
// CHECK:       }
func.func @gelu(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.gelu %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// gelu (tanh): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), no erf.
// CHECK-LABEL: func.func @gelu_tanh(
// CHECK-SAME:      %[[X:.+]]: tensor<4xf32>)
// CHECK-NOT:     graph.erf
// CHECK:         %[[X2:.+]] = graph.mul %[[X]], %[[X]] : tensor<4xf32>
// CHECK-NEXT:    %[[X3:.+]] = graph.mul %[[X2]], %[[X]] : tensor<4xf32>
// CHECK-NEXT:    %[[K:.+]] = graph.full 4.471500e-02 : tensor<4xf32>
// CHECK-NEXT:    %[[KX3:.+]] = graph.mul %[[X3]], %[[K]] : tensor<4xf32>
// CHECK-NEXT:    %[[POLY:.+]] = graph.add %[[X]], %[[KX3]] : tensor<4xf32>
// CHECK-NEXT:    %[[S2PI:.+]] = graph.full 0.79788456080286541 : tensor<4xf32>
// CHECK-NEXT:    %[[ARG:.+]] = graph.mul %[[POLY]], %[[S2PI]] : tensor<4xf32>
// CHECK-NEXT:    %[[TANH:.+]] = graph.tanh %[[ARG]] : tensor<4xf32>
// CHECK-DAG:     %[[ONE:.+]] = graph.full 1.000000e+00 : tensor<4xf32>
// CHECK-DAG:     %[[P1:.+]] = graph.add %[[TANH]], %[[ONE]] : tensor<4xf32>
// CHECK-DAG:     %[[HALF:.+]] = graph.full 5.000000e-01 : tensor<4xf32>
// CHECK-DAG:     %[[HX:.+]] = graph.mul %[[X]], %[[HALF]] : tensor<4xf32>
// CHECK-NOT:     graph.erf
// CHECK:         %[[R:.+]] = graph.mul %[[HX]], %[[P1]] : tensor<4xf32>
// CHECK-NEXT:    return %[[R]] : tensor<4xf32>
func.func @gelu_tanh(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.gelu %x {approximate = "tanh"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// silu(x) = x * sigmoid(x)
// CHECK-LABEL: func.func @silu(
// CHECK-SAME:      %[[X:.+]]: tensor<4xbf16>)
// CHECK-NEXT:    %[[SIG:.+]] = graph.sigmoid %[[X]] : tensor<4xbf16>
// CHECK-NEXT:    %[[R:.+]] = graph.mul %[[X]], %[[SIG]] : tensor<4xbf16>
// CHECK-NEXT:    return %[[R]] : tensor<4xbf16>
func.func @silu(%x: tensor<4xbf16>) -> tensor<4xbf16> {
  %0 = graph.silu %x : tensor<4xbf16>
  return %0 : tensor<4xbf16>
}

// relu(x) = x <= 0 ? 0 : x (a select, so relu'(0) = 0 and NaN passes).
// CHECK-LABEL: func.func @relu(
// CHECK-SAME:      %[[X:.+]]: tensor<2x3xf64>)
// CHECK-NEXT:    %[[Z:.+]] = graph.full 0.000000e+00 : tensor<2x3xf64>
// CHECK-NEXT:    %[[LE:.+]] = graph.le %[[X]], %[[Z]] : tensor<2x3xf64>
// CHECK-NEXT:    %[[R:.+]] = graph.select %[[LE]], %[[Z]], %[[X]] :
// CHECK-NEXT:    return %[[R]] : tensor<2x3xf64>
func.func @relu(%x: tensor<2x3xf64>) -> tensor<2x3xf64> {
  %0 = graph.relu %x : tensor<2x3xf64>
  return %0 : tensor<2x3xf64>
}

// linear on a matrix: no reshapes, x @ W^T + broadcast(b).
// CHECK-LABEL: func.func @linear(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<4x8xf32>, %[[W:[^:]+]]: tensor<16x8xf32>, %[[B:[^:]+]]: tensor<16xf32>)
// CHECK-NEXT:    %[[MM:.+]] = graph.matmul %[[X]], %[[W]] {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %[[BB:.+]] = graph.broadcast_in_dim %[[B]] {dims = array<i64: 1>} : (tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %[[R:.+]] = graph.add %[[MM]], %[[BB]] : tensor<4x16xf32>
// CHECK-NEXT:    return %[[R]] : tensor<4x16xf32>
func.func @linear(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %0 = graph.linear %x, %w, %b : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// linear without bias: just the matmul.
// CHECK-LABEL: func.func @linear_no_bias(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<4x8xf32>, %[[W:[^:]+]]: tensor<16x8xf32>)
// CHECK-NEXT:    %[[MM:.+]] = graph.matmul %[[X]], %[[W]] {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    return %[[MM]] : tensor<4x16xf32>
func.func @linear_no_bias(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>) -> tensor<4x16xf32> {
  %0 = graph.linear %x, %w : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// linear on a rank-3 input: batch dimensions flattened into rows and back.
// CHECK-LABEL: func.func @linear_rank3(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<2x3x8xf32>, %[[W:[^:]+]]: tensor<16x8xf32>, %[[B:[^:]+]]: tensor<16xf32>)
// CHECK-NEXT:    %[[ROWS:.+]] = graph.reshape %[[X]] : (tensor<2x3x8xf32>) -> tensor<6x8xf32>
// CHECK-NEXT:    %[[MM:.+]] = graph.matmul %[[ROWS]], %[[W]] {transpose_rhs = true} : (tensor<6x8xf32>, tensor<16x8xf32>) -> tensor<6x16xf32>
// CHECK-NEXT:    %[[Y:.+]] = graph.reshape %[[MM]] : (tensor<6x16xf32>) -> tensor<2x3x16xf32>
// CHECK-NEXT:    %[[BB:.+]] = graph.broadcast_in_dim %[[B]] {dims = array<i64: 2>} : (tensor<16xf32>) -> tensor<2x3x16xf32>
// CHECK-NEXT:    %[[R:.+]] = graph.add %[[Y]], %[[BB]] : tensor<2x3x16xf32>
// CHECK-NEXT:    return %[[R]] : tensor<2x3x16xf32>
func.func @linear_rank3(%x: tensor<2x3x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>) -> tensor<2x3x16xf32> {
  %0 = graph.linear %x, %w, %b : (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x3x16xf32>
  return %0 : tensor<2x3x16xf32>
}

// dropout with p = 0.25: keep where u >= p, scale kept values by 1/(1-p).
// CHECK-LABEL: func.func @dropout(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<4x8xf32>, %[[SEED:[^:]+]]: tensor<i64>)
// CHECK-NEXT:    %[[U:.+]] = graph.random_uniform %[[SEED]] {stream = 7 : i64} : (tensor<i64>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[P:.+]] = graph.full 2.500000e-01 : tensor<4x8xf32>
// CHECK-NEXT:    %[[KEEP:.+]] = graph.ge %[[U]], %[[P]] : tensor<4x8xf32>
// CHECK-DAG:     %[[Z:.+]] = graph.full 0.000000e+00 : tensor<4x8xf32>
// CHECK-DAG:     %[[SCALE:.+]] = graph.full 1.3333333333333333 : tensor<4x8xf32>
// CHECK-DAG:     %[[XS:.+]] = graph.mul %[[X]], %[[SCALE]] : tensor<4x8xf32>
// CHECK:         %[[R:.+]] = graph.select %[[KEEP]], %[[XS]], %[[Z]] : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    return %[[R]] : tensor<4x8xf32>
func.func @dropout(%x: tensor<4x8xf32>, %seed: tensor<i64>) -> tensor<4x8xf32> {
  %0 = graph.dropout %x, %seed {p = 2.5e-01 : f64, stream = 7 : i64} : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// dropout with p = 0 is the identity: no random numbers are drawn.
// CHECK-LABEL: func.func @dropout_p0(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<4x8xf32>, %{{[^:]+}}: tensor<i64>)
// CHECK-NEXT:    return %[[X]] : tensor<4x8xf32>
func.func @dropout_p0(%x: tensor<4x8xf32>, %seed: tensor<i64>) -> tensor<4x8xf32> {
  %0 = graph.dropout %x, %seed {p = 0.0 : f64} : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// cross_entropy = nll(log_softmax(x)) with the default ignore_index -100;
// the target is picked with a one-hot mask (iota == target), not a gather;
// a gather of zero rows by the non-ignored targets checks them at run time
// (an out-of-range class is an error, not a zero loss) and adds exactly 0.
// CHECK-LABEL: func.func @cross_entropy(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<4x10xf32>, %[[T:[^:]+]]: tensor<4xi64>)
// CHECK-NEXT:    %[[MAXR:.+]] = graph.reduce_max %[[X]] {dims = array<i64: 1>, keepdim = true} : (tensor<4x10xf32>) -> tensor<4x1xf32>
// CHECK-NEXT:    %[[MAX:.+]] = graph.stop_gradient %[[MAXR]] : tensor<4x1xf32>
// CHECK-NEXT:    %[[MAXB:.+]] = graph.broadcast_in_dim %[[MAX]] {dims = array<i64: 0, 1>} : (tensor<4x1xf32>) -> tensor<4x10xf32>
// CHECK-NEXT:    %[[SHIFT:.+]] = graph.sub %[[X]], %[[MAXB]] : tensor<4x10xf32>
// CHECK-NEXT:    %[[EXP:.+]] = graph.exp %[[SHIFT]] : tensor<4x10xf32>
// CHECK-NEXT:    %[[SUM:.+]] = graph.reduce_sum %[[EXP]] {dims = array<i64: 1>, keepdim = true} : (tensor<4x10xf32>) -> tensor<4x1xf32>
// CHECK-NEXT:    %[[LSE:.+]] = graph.log %[[SUM]] : tensor<4x1xf32>
// CHECK-NEXT:    %[[LSEB:.+]] = graph.broadcast_in_dim %[[LSE]] {dims = array<i64: 0, 1>} : (tensor<4x1xf32>) -> tensor<4x10xf32>
// CHECK-NEXT:    %[[LOGP:.+]] = graph.sub %[[SHIFT]], %[[LSEB]] : tensor<4x10xf32>
// CHECK-NEXT:    %[[CLS:.+]] = graph.iota {dim = 1 : i64} : tensor<4x10xi64>
// CHECK-NEXT:    %[[TB:.+]] = graph.broadcast_in_dim %[[T]] {dims = array<i64: 0>} : (tensor<4xi64>) -> tensor<4x10xi64>
// CHECK-NEXT:    %[[HOT:.+]] = graph.eq %[[CLS]], %[[TB]] : tensor<4x10xi64>
// CHECK-NEXT:    %[[Z2:.+]] = graph.full 0.000000e+00 : tensor<4x10xf32>
// CHECK-NEXT:    %[[SEL:.+]] = graph.select %[[HOT]], %[[LOGP]], %[[Z2]] : (tensor<4x10xi1>, tensor<4x10xf32>, tensor<4x10xf32>) -> tensor<4x10xf32>
// CHECK-NEXT:    %[[PICK:.+]] = graph.reduce_sum %[[SEL]] {dims = array<i64: 1>} : (tensor<4x10xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[IGN:.+]] = graph.full -1.000000e+02 : tensor<4xi64>
// CHECK-NEXT:    %[[VALID:.+]] = graph.ne %[[T]], %[[IGN]] : tensor<4xi64>
// CHECK-NEXT:    %[[Z0:.+]] = graph.full 0.000000e+00 : tensor<4xi64>
// CHECK-NEXT:    %[[SAFE:.+]] = graph.select %[[VALID]], %[[T]], %[[Z0]] :
// CHECK-NEXT:    %[[NOROWS:.+]] = graph.full 0.000000e+00 : tensor<10x1xf32>
// CHECK-NEXT:    %[[CHECKED:.+]] = graph.gather %[[NOROWS]], %[[SAFE]] : (tensor<10x1xf32>, tensor<4xi64>) -> tensor<4x1xf32>
// CHECK-NEXT:    %[[ZERO:.+]] = graph.reshape %[[CHECKED]] : (tensor<4x1xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[PICKED:.+]] = graph.add %[[PICK]], %[[ZERO]] : tensor<4xf32>
// CHECK-DAG:     %[[Z1:.+]] = graph.full 0.000000e+00 : tensor<4xf32>
// CHECK-DAG:     %[[NEG:.+]] = graph.neg %[[PICKED]] : tensor<4xf32>
// CHECK:         %[[LOSS:.+]] = graph.select %[[VALID]], %[[NEG]], %[[Z1]] : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[VF:.+]] = graph.cast %[[VALID]] : (tensor<4xi1>) -> tensor<4xf32>
// CHECK-NEXT:    %[[COUNT:.+]] = graph.reduce_sum %[[VF]] {dims = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
// CHECK-NEXT:    %[[TOTAL:.+]] = graph.reduce_sum %[[LOSS]] {dims = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
// CHECK-NEXT:    %[[R:.+]] = graph.div %[[TOTAL]], %[[COUNT]] : tensor<f32>
// CHECK-NEXT:    return %[[R]] : tensor<f32>
func.func @cross_entropy(%x: tensor<4x10xf32>, %t: tensor<4xi64>) -> tensor<f32> {
  %0 = graph.cross_entropy %x, %t : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// nll on log-probabilities with i32 targets and ignore_index = 3: no
// log_softmax, the iota takes the target's element type.
// CHECK-LABEL: func.func @nll(
// CHECK-SAME:      %[[X:[^:]+]]: tensor<4x10xf32>, %[[T:[^:]+]]: tensor<4xi32>)
// CHECK-NOT:     graph.exp
// CHECK:         %[[CLS:.+]] = graph.iota {dim = 1 : i64} : tensor<4x10xi32>
// CHECK-NEXT:    %[[TB:.+]] = graph.broadcast_in_dim %[[T]] {dims = array<i64: 0>} : (tensor<4xi32>) -> tensor<4x10xi32>
// CHECK-NEXT:    %[[HOT:.+]] = graph.eq %[[CLS]], %[[TB]] : tensor<4x10xi32>
// CHECK-NEXT:    %[[Z2:.+]] = graph.full 0.000000e+00 : tensor<4x10xf32>
// CHECK-NEXT:    %[[SEL:.+]] = graph.select %[[HOT]], %[[X]], %[[Z2]] : (tensor<4x10xi1>, tensor<4x10xf32>, tensor<4x10xf32>) -> tensor<4x10xf32>
// CHECK-NEXT:    %[[PICK:.+]] = graph.reduce_sum %[[SEL]] {dims = array<i64: 1>} : (tensor<4x10xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[IGN:.+]] = graph.full 3.000000e+00 : tensor<4xi32>
// CHECK-NEXT:    %[[VALID:.+]] = graph.ne %[[T]], %[[IGN]] : tensor<4xi32>
// CHECK-NEXT:    %[[Z0:.+]] = graph.full 0.000000e+00 : tensor<4xi32>
// CHECK-NEXT:    %[[SAFE:.+]] = graph.select %[[VALID]], %[[T]], %[[Z0]] :
// CHECK-NEXT:    %[[NOROWS:.+]] = graph.full 0.000000e+00 : tensor<10x1xf32>
// CHECK-NEXT:    %[[CHECKED:.+]] = graph.gather %[[NOROWS]], %[[SAFE]] : (tensor<10x1xf32>, tensor<4xi32>) -> tensor<4x1xf32>
// CHECK-NEXT:    %[[ZERO:.+]] = graph.reshape %[[CHECKED]] : (tensor<4x1xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[PICKED:.+]] = graph.add %[[PICK]], %[[ZERO]] : tensor<4xf32>
// CHECK-DAG:     %[[Z1:.+]] = graph.full 0.000000e+00 : tensor<4xf32>
// CHECK-DAG:     %[[NEG:.+]] = graph.neg %[[PICKED]] : tensor<4xf32>
// CHECK:         %[[LOSS:.+]] = graph.select %[[VALID]], %[[NEG]], %[[Z1]] : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[VF:.+]] = graph.cast %[[VALID]] : (tensor<4xi1>) -> tensor<4xf32>
// CHECK-NEXT:    %[[COUNT:.+]] = graph.reduce_sum %[[VF]] {dims = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
// CHECK-NEXT:    %[[TOTAL:.+]] = graph.reduce_sum %[[LOSS]] {dims = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
// CHECK-NEXT:    %[[R:.+]] = graph.div %[[TOTAL]], %[[COUNT]] : tensor<f32>
// CHECK-NEXT:    return %[[R]] : tensor<f32>
func.func @nll(%x: tensor<4x10xf32>, %t: tensor<4xi32>) -> tensor<f32> {
  %0 = graph.nll %x, %t {ignore_index = 3 : i64} : (tensor<4x10xf32>, tensor<4xi32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// mse = sum((a - b)^2) / numel
// CHECK-LABEL: func.func @mse(
// CHECK-SAME:      %[[A:[^:]+]]: tensor<4x2xf32>, %[[B:[^:]+]]: tensor<4x2xf32>)
// CHECK-NEXT:    %[[D:.+]] = graph.sub %[[A]], %[[B]] : tensor<4x2xf32>
// CHECK-NEXT:    %[[SQ:.+]] = graph.mul %[[D]], %[[D]] : tensor<4x2xf32>
// CHECK-NEXT:    %[[SUM:.+]] = graph.reduce_sum %[[SQ]] {dims = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
// CHECK-NEXT:    %[[N:.+]] = graph.full 8.000000e+00 : tensor<f32>
// CHECK-NEXT:    %[[R:.+]] = graph.div %[[SUM]], %[[N]] : tensor<f32>
// CHECK-NEXT:    return %[[R]] : tensor<f32>
func.func @mse(%a: tensor<4x2xf32>, %b: tensor<4x2xf32>) -> tensor<f32> {
  %0 = graph.mse %a, %b : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// bce = mean(-(t L(p) + (1 - t) L1m(p))) with L(x) = max(log x, -100),
// written as max(select(x > 0, log(select(x > 0, x, 1)), -100), -100) so
// that its gradient stays finite at x = 0, and L1m(p) = max(log1p(-p), -100)
// the same way (log1p: no rounding of 1 - p for small p).
// CHECK-LABEL: func.func @bce(
// CHECK-SAME:      %[[P:[^:]+]]: tensor<4xf32>, %[[T:[^:]+]]: tensor<4xf32>)
// CHECK:         %[[POS:.+]] = graph.gt %[[P]], %{{.+}} : tensor<4xf32>
// CHECK:         %[[SAFE:.+]] = graph.select %[[POS]], %[[P]], %{{.+}} :
// CHECK:         %[[LOGP:.+]] = graph.log %[[SAFE]] : tensor<4xf32>
// CHECK:         %[[SELP:.+]] = graph.select %[[POS]], %[[LOGP]], %{{.+}} :
// CHECK:         graph.maximum %[[SELP]], %{{.+}} : tensor<4xf32>
// CHECK:         %[[BELOW:.+]] = graph.lt %[[P]], %{{.+}} : tensor<4xf32>
// CHECK:         %[[SAFE1:.+]] = graph.select %[[BELOW]], %[[P]], %{{.+}} :
// CHECK:         %[[NEGP:.+]] = graph.neg %[[SAFE1]] : tensor<4xf32>
// CHECK:         graph.log1p %[[NEGP]] : tensor<4xf32>
// CHECK:         graph.maximum
// CHECK:         graph.sub %{{.+}}, %[[T]] : tensor<4xf32>
// CHECK:         graph.neg
// CHECK:         graph.reduce_sum %{{.+}} {dims = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
// CHECK:         graph.div
// CHECK-NEXT:    return
func.func @bce(%p: tensor<4xf32>, %t: tensor<4xf32>) -> tensor<f32> {
  %0 = graph.bce %p, %t : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}
