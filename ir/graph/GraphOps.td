//===- GraphOps.td - graph dialect operations -------------------*- tablegen -*-===//
//
// Result types are inferred through InferTypeOpInterface wherever the operands
// and attributes determine them; the inference functions are also where the
// shape rules live, so the verifier, the parser and the tracer all report the
// same message for the same mistake.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_GRAPH_OPS
#define TILEFUSE_GRAPH_OPS

include "ir/graph/GraphBase.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// Every graph op is free of side effects: even the random op is a pure
// function of its seed operand, which is what lets autodiff reuse a mask.
class Graph_Op<string mnemonic, list<Trait> traits = []>
    : Op<Graph_Dialect, mnemonic, !listconcat(traits, [Pure])>;

//===----------------------------------------------------------------------===//
// Elementwise ops: one custom syntax `graph.add %a, %b : tensor<4xf32>`.
//===----------------------------------------------------------------------===//

class Graph_ElementwiseOp<string mnemonic, list<Trait> traits = []>
    : Graph_Op<mnemonic, !listconcat(traits, [InferTypeOpAdaptor])> {
  let results = (outs Graph_Tensor:$result);
  let hasCustomAssemblyFormat = 1;
  let extraClassDefinition = [{
    ::mlir::ParseResult $cppClass::parse(::mlir::OpAsmParser &parser,
                                         ::mlir::OperationState &result) {
      return ::tilefuse::graph::parseElementwiseOp(parser, result);
    }
    void $cppClass::print(::mlir::OpAsmPrinter &printer) {
      ::tilefuse::graph::printElementwiseOp(printer, getOperation());
    }
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &out) {
      return ::tilefuse::graph::inferElementwiseType(
          loc, getOperationName(), kKind, adaptor.getOperands(), out);
    }
  }];
}

// `kind` selects the rule in inferElementwiseType: which dtypes are allowed
// and whether the result is i1.
class Graph_BinaryOp<string mnemonic, string kind, string sum, string body,
                     list<Trait> traits = []>
    : Graph_ElementwiseOp<mnemonic, traits> {
  let summary = sum;
  let description = body # [{

    Both operands have the same type (broadcasts are explicit).

    Example:
    ```mlir
    %r = graph.}] # mnemonic # [{ %a, %b : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$lhs, Graph_Tensor:$rhs);
  let extraClassDeclaration = [{
    static constexpr ::tilefuse::graph::ElementwiseKind kKind =
        ::tilefuse::graph::ElementwiseKind::}] # kind # [{;
  }];
}

def Graph_AddOp : Graph_BinaryOp<"add", "Arithmetic", "elementwise addition",
    "`lhs + rhs`.", [Commutative]> { let hasFolder = 1; }
def Graph_SubOp : Graph_BinaryOp<"sub", "Arithmetic", "elementwise subtraction",
    "`lhs - rhs`."> { let hasFolder = 1; }
def Graph_MulOp : Graph_BinaryOp<"mul", "Arithmetic", "elementwise multiplication",
    "`lhs * rhs`.", [Commutative]> { let hasFolder = 1; }
def Graph_DivOp : Graph_BinaryOp<"div", "Arithmetic", "elementwise division",
    "`lhs / rhs`; integer division truncates toward zero and division by zero is undefined."> {
  let hasFolder = 1;
}
def Graph_PowOp : Graph_BinaryOp<"pow", "FloatOnly", "elementwise power",
    "`lhs ** rhs` for floating-point tensors.">;
def Graph_RemOp : Graph_BinaryOp<"rem", "Arithmetic", "elementwise truncated remainder",
    "`fmod(lhs, rhs)`: the sign of `lhs` (C's `%` and `fmod`; PyTorch's `fmod`).">;
def Graph_MaximumOp : Graph_BinaryOp<"maximum", "Arithmetic", "elementwise maximum",
    "`max(lhs, rhs)`; NaN propagates.", [Commutative]>;
def Graph_MinimumOp : Graph_BinaryOp<"minimum", "Arithmetic", "elementwise minimum",
    "`min(lhs, rhs)`; NaN propagates.", [Commutative]>;

def Graph_EqOp : Graph_BinaryOp<"eq", "Compare", "elementwise ==",
    "Compares two tensors, giving an i1 tensor.", [Commutative]>;
def Graph_NeOp : Graph_BinaryOp<"ne", "Compare", "elementwise !=",
    "Compares two tensors, giving an i1 tensor.", [Commutative]>;
def Graph_LtOp : Graph_BinaryOp<"lt", "Compare", "elementwise <",
    "Compares two tensors, giving an i1 tensor.">;
def Graph_LeOp : Graph_BinaryOp<"le", "Compare", "elementwise <=",
    "Compares two tensors, giving an i1 tensor.">;
def Graph_GtOp : Graph_BinaryOp<"gt", "Compare", "elementwise >",
    "Compares two tensors, giving an i1 tensor.">;
def Graph_GeOp : Graph_BinaryOp<"ge", "Compare", "elementwise >=",
    "Compares two tensors, giving an i1 tensor.">;

class Graph_UnaryOp<string mnemonic, string kind, string sum, string body,
                    list<Trait> traits = []>
    : Graph_ElementwiseOp<mnemonic, traits> {
  let summary = sum;
  let description = body # [{

    Example:
    ```mlir
    %r = graph.}] # mnemonic # [{ %x : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$operand);
  let extraClassDeclaration = [{
    static constexpr ::tilefuse::graph::ElementwiseKind kKind =
        ::tilefuse::graph::ElementwiseKind::}] # kind # [{;
  }];
}

def Graph_NegOp : Graph_UnaryOp<"neg", "Arithmetic", "elementwise negation", "`-x`."> {
  let hasFolder = 1;
}
def Graph_AbsOp : Graph_UnaryOp<"abs", "Arithmetic", "elementwise absolute value", "`|x|`.">;
def Graph_ExpOp : Graph_UnaryOp<"exp", "FloatOnly", "elementwise exponential", "`e^x`.">;
def Graph_LogOp : Graph_UnaryOp<"log", "FloatOnly", "elementwise natural logarithm",
    "`ln(x)`; -inf at 0 and NaN below.">;
def Graph_TanhOp : Graph_UnaryOp<"tanh", "FloatOnly", "elementwise hyperbolic tangent", "`tanh(x)`.">;
def Graph_SqrtOp : Graph_UnaryOp<"sqrt", "FloatOnly", "elementwise square root", "`sqrt(x)`.">;
def Graph_RsqrtOp : Graph_UnaryOp<"rsqrt", "FloatOnly", "elementwise reciprocal square root",
    "`1 / sqrt(x)`.">;
def Graph_SigmoidOp : Graph_UnaryOp<"sigmoid", "FloatOnly", "elementwise logistic sigmoid",
    "`1 / (1 + e^-x)`.">;
def Graph_ErfOp : Graph_UnaryOp<"erf", "FloatOnly", "elementwise Gauss error function", "`erf(x)`.">;
def Graph_Log1pOp : Graph_UnaryOp<"log1p", "FloatOnly", "elementwise log(1 + x)",
    "`ln(1 + x)`, accurate where `x` is small.">;
def Graph_Expm1Op : Graph_UnaryOp<"expm1", "FloatOnly", "elementwise e^x - 1",
    "`e^x - 1`, accurate where `x` is small.">;
def Graph_FloorOp : Graph_UnaryOp<"floor", "FloatOnly", "elementwise floor",
    "The largest integer not above `x`; its derivative is 0.">;
def Graph_StopGradientOp : Graph_UnaryOp<"stop_gradient", "Arithmetic",
    "identity that blocks gradients", [{
    `x` in the forward pass; no cotangent flows back through it (PyTorch's
    `detach()`). Differentiation rules use it where a value is a constant of
    the derivative (the max shift of softmax); fusion removes it.
  }]>;

def Graph_RecomputeBarrierOp : Graph_Op<"recompute_barrier",
    [AllTypesMatch<["operand", "result"]>]> {
  let summary = "a value, available only once another exists";
  let description = [{
    `operand` unchanged, but only after `after` has been computed. A
    checkpointed region (`tilefuse.checkpoint`) is recomputed in the
    backward pass from its inputs passed through this op, with the region's
    cotangent as `after`: canonicalization and CSE cannot merge the
    recomputation back into the forward pass, and fusion cannot move it
    there. It runs no code: its result is its operand's buffer.

    Example:
    ```mlir
    %r = graph.recompute_barrier %x after %g : tensor<4x8xf32>, tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$operand, Graph_Tensor:$after);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$operand `after` $after attr-dict `:` type($operand) `,` type($after)";
}

//===----------------------------------------------------------------------===//
// Composite elementwise ops (removed by --decompose).
//===----------------------------------------------------------------------===//

def Graph_ReluOp : Graph_UnaryOp<"relu", "FloatOnly", "rectified linear unit (composite)",
    "`max(x, 0)`. Decomposes into `graph.maximum` with a zero tensor.">;
def Graph_SiluOp : Graph_UnaryOp<"silu", "FloatOnly", "SiLU / swish (composite)",
    "`x * sigmoid(x)`.">;
def Graph_GeluOp : Graph_UnaryOp<"gelu", "FloatOnly", "GELU activation (composite)", [{
    `approximate = "none"` (default): `0.5 x (1 + erf(x / sqrt(2)))`;
    `approximate = "tanh"`: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
  }]> {
  let arguments = (ins Graph_Tensor:$operand,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Selection, casts, constants.
//===----------------------------------------------------------------------===//

def Graph_SelectOp : Graph_Op<"select", [InferTypeOpAdaptor]> {
  let summary = "elementwise choice between two tensors";
  let description = [{
    `cond ? on_true : on_false`, elementwise; all three have the same shape.

    Example:
    ```mlir
    %r = graph.select %c, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    ```
  }];
  let arguments = (ins Graph_BoolTensor:$cond, Graph_Tensor:$on_true, Graph_Tensor:$on_false);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$cond `,` $on_true `,` $on_false attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Graph_CastOp : Graph_Op<"cast"> {
  let summary = "element type conversion";
  let description = [{
    Converts each element to the result's element type. Float to int truncates
    toward zero; to i1 means `!= 0`; narrowing floats round to nearest even.

    Example:
    ```mlir
    %r = graph.cast %x : (tensor<4xf32>) -> tensor<4xbf16>
    ```
  }];
  let arguments = (ins Graph_Tensor:$operand);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
  // A transpose read only by matmuls moves after the cast, where the
  // matmuls read it in place.
  let hasCanonicalizer = 1;
}

def Graph_ConstantOp : Graph_Op<"constant", [ConstantLike, InferTypeOpAdaptor]> {
  let summary = "a tensor constant";
  let description = [{
    Example:
    ```mlir
    %c = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

def Graph_FullOp : Graph_Op<"full"> {
  let summary = "a tensor filled with one value";
  let description = [{
    Every element equals `value` converted to the result's element type.

    Example:
    ```mlir
    %z = graph.full 0.0 : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins F64Attr:$value);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
}

def Graph_IotaOp : Graph_Op<"iota"> {
  let summary = "element indices along one dimension";
  let description = [{
    `result[i0, ..., in] = i_dim`.

    Example:
    ```mlir
    %i = graph.iota {dim = 1 : i64} : tensor<2x5xi64>
    ```
  }];
  let arguments = (ins I64Attr:$dim);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Layout ops.
//===----------------------------------------------------------------------===//

def Graph_BroadcastInDimOp : Graph_Op<"broadcast_in_dim"> {
  let summary = "explicit broadcast";
  let description = [{
    Operand dimension `i` maps to result dimension `dims[i]` (strictly
    increasing); it must be 1 or equal to that result dimension. Result
    dimensions not named in `dims` are new.

    Example:
    ```mlir
    %r = graph.broadcast_in_dim %b {dims = array<i64: 1>} : (tensor<8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$operand, DenseI64ArrayAttr:$dims);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Graph_ReshapeOp : Graph_Op<"reshape"> {
  let summary = "row-major reshape";
  let description = [{
    Same elements in row-major order, new shape with the same element count.

    Example:
    ```mlir
    %r = graph.reshape %x : (tensor<4x8xf32>) -> tensor<32xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$operand);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Graph_TransposeOp : Graph_Op<"transpose", [InferTypeOpAdaptor]> {
  let summary = "dimension permutation";
  let description = [{
    `result.shape[i] = operand.shape[perm[i]]`.

    Example:
    ```mlir
    %r = graph.transpose %x {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$operand, DenseI64ArrayAttr:$perm);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
  // A grouped weight gradient transposed is the one with its operands
  // swapped (no kernel writes the transposed copy).
  let hasCanonicalizer = 1;
}

def Graph_SliceOp : Graph_Op<"slice", [InferTypeOpAdaptor]> {
  let summary = "strided slice";
  let description = [{
    Per dimension: elements `start, start+stride, ...` below `limit`
    (`0 <= start <= limit <= size`, `stride >= 1`).

    Example:
    ```mlir
    %r = graph.slice %x {start = array<i64: 0, 2>, limit = array<i64: 4, 8>, stride = array<i64: 1, 2>}
        : (tensor<4x8xf32>) -> tensor<4x3xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$operand, DenseI64ArrayAttr:$start,
                       DenseI64ArrayAttr:$limit, DenseI64ArrayAttr:$stride);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Graph_ConcatOp : Graph_Op<"concat", [InferTypeOpAdaptor]> {
  let summary = "concatenation along one dimension";
  let description = [{
    Example:
    ```mlir
    %r = graph.concat %a, %b {dim = 0 : i64} : (tensor<2x8xf32>, tensor<3x8xf32>) -> tensor<5x8xf32>
    ```
  }];
  let arguments = (ins Variadic<Graph_Tensor>:$inputs, I64Attr:$dim);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Reductions.
//===----------------------------------------------------------------------===//

class Graph_ReduceOp<string mnemonic, string sum>
    : Graph_Op<mnemonic, [InferTypeOpAdaptor]> {
  let summary = sum;
  let description = [{
    Reduces the dimensions listed in `dims` (sorted, unique); with
    `keepdim = true` they stay as size 1.

    Example:
    ```mlir
    %r = graph.}] # mnemonic # [{ %x {dims = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$operand, DenseI64ArrayAttr:$dims,
                       DefaultValuedAttr<BoolAttr, "false">:$keepdim);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
}

def Graph_ReduceSumOp : Graph_ReduceOp<"reduce_sum", "sum over dimensions">;
def Graph_ReduceMaxOp : Graph_ReduceOp<"reduce_max", "maximum over dimensions">;
def Graph_ReduceMinOp : Graph_ReduceOp<"reduce_min", "minimum over dimensions">;

def Graph_ArgmaxOp : Graph_Op<"argmax", [InferTypeOpAdaptor]> {
  let summary = "index of the maximum along one dimension";
  let description = [{
    i64 index of the first maximal element along `dim`.

    Example:
    ```mlir
    %r = graph.argmax %x {dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4xi64>
    ```
  }];
  let arguments = (ins Graph_Tensor:$operand, I64Attr:$dim,
                       DefaultValuedAttr<BoolAttr, "false">:$keepdim);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
}

def Graph_SortOp : Graph_Op<"sort", [InferTypeOpAdaptor]> {
  let summary = "stable sort along the last dimension (a library step)";
  let description = [{
    `operand: [..., N]` -> `values: [..., N]` (the operand's type),
    `indices: [..., N]` (i64): each row sorted ascending (descending with
    `descending`), equal elements in their original order, NaN above every
    number (last ascending, first descending), -0.0 equal to 0.0: PyTorch's
    `torch.sort(stable=True)`. Run by a library step (the CPU's); the
    importer writes short rows as comparisons instead, which every target
    fuses.

    Example:
    ```mlir
    %v, %i = graph.sort %x {descending = true} : (tensor<4x8192xf32>) -> (tensor<4x8192xf32>, tensor<4x8192xi64>)
    ```
  }];
  let arguments = (ins Graph_Tensor:$operand,
                       DefaultValuedAttr<BoolAttr, "false">:$descending);
  let results = (outs Graph_Tensor:$values, Graph_Tensor:$indices);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Contractions and indexing.
//===----------------------------------------------------------------------===//

def Graph_MatmulOp : Graph_Op<"matmul", [InferTypeOpAdaptor]> {
  let summary = "batched matrix multiplication";
  let description = [{
    `lhs: [B..., M, K]`, `rhs: [B..., K, N]` (after the optional transposes of
    the last two dimensions), same rank and batch dimensions, same element
    type (floating point). f16/bf16 accumulate in f32.

    Example:
    ```mlir
    %r = graph.matmul %a, %w {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  // An operand transposed in its last two dimensions is read in place with
  // the flag flipped.
  let hasFolder = 1;
}

def Graph_GroupedMatmulOp : Graph_Op<"grouped_matmul", [InferTypeOpAdaptor]> {
  let summary = "rows times their group's matrix (mixture-of-experts layers)";
  let description = [{
    `lhs: [S, K]`, `rhs: [G, K, N]` (`[G, N, K]` with `transpose_rhs`),
    `offsets: [G]` (i32 or i64) -> `[S, N]`.
    The rows are sorted by group: group g holds rows `[offsets[g-1],
    offsets[g])` (`offsets[-1]` = 0), and `result[r] = lhs[r] @ rhs[g]` for
    its rows. Row r belongs to group #{offsets <= r} (offsets clamped to
    `[0, S]`): with nondecreasing offsets, as cumulative counts are, the
    ranges above; rows past the last offset are in no group and are 0. The groups' sizes are
    data: a library step reads the offsets when it runs and multiplies
    each group's rows (one GEMM per group, no work for rows in no group).
    Same floating-point element type for lhs, rhs and the result.

    Example:
    ```mlir
    %r = graph.grouped_matmul %x, %w, %offs : (tensor<16x8xf32>, tensor<4x8x12xf32>, tensor<4xi32>) -> tensor<16x12xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       Graph_IndexTensor:$offsets,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs `,` $offsets attr-dict `:` functional-type(operands, results)";
  // A transposed rhs is read in place with the flag flipped.
  let hasFolder = 1;
}

def Graph_GroupedMatmulWeightGradOp : Graph_Op<"grouped_matmul_weight_grad", [InferTypeOpAdaptor]> {
  let summary = "per group, its rows of lhs transposed times its rows of grad";
  let description = [{
    `lhs: [S, K]`, `grad: [S, N]`, `offsets: [G]` -> `[G, K, N]`,
    `result[g] = lhs[rows of g]^T @ grad[rows of g]` with the groups of
    `graph.grouped_matmul` (an empty group gives 0): the gradient of
    grouped_matmul with respect to its rhs.

    Example:
    ```mlir
    %dw = graph.grouped_matmul_weight_grad %x, %dy, %offs : (tensor<16x8xf32>, tensor<16x12xf32>, tensor<4xi32>) -> tensor<4x8x12xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$grad,
                       Graph_IndexTensor:$offsets);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $grad `,` $offsets attr-dict `:` functional-type(operands, results)";
}

def Graph_AttentionOp : Graph_Op<"attention", [InferTypeOpAdaptor, AttrSizedOperandSegments]> {
  let summary = "fused scaled dot-product attention (an anchor op, like matmul)";
  let description = [{
    `query: [B..., H, L, E]`, `key: [B..., Hk, S, E]`, `value: [B..., Hk, S, Ev]`,
    optional `mask: [B'..., H', L, S]` (each leading dimension equal to the
    query's or 1; i1: false masks the score out; float: added to the score)
    -> `result: [B..., H, L, Ev]`, `logsumexp: [B..., H, L]`.
    Hk divides H: query head h reads key/value head h / (H / Hk).

    `score = scale * q k^T`, then the mask, then `-inf` above the diagonal
    where `causal` (aligned top-left, as PyTorch's is_causal);
    `result = softmax(score) v`, `logsumexp = log(sum(exp(score)))` per
    query row. A row whose scores are all `-inf` gets 0 and a logsumexp of 0.
    Executed by a library kernel that never builds the L x S scores
    (FlashAttention-2): the logsumexp is what `graph.attention_grad` needs.
    f32, bf16 or f16 (compiled) or f64 (the reference interpreter); the
    mask is i1 or of the query's type. With 16-bit operands the result is
    of their type and the logsumexp f32: the products take the 16-bit
    operands with f32 accumulation, the softmax's statistics are f32, and
    implementations may round the probabilities to 16 bits for the product
    with `value` (PyTorch's flash kernels do); the reference computes in
    f32 and rounds the result once.

    Dropout (`dropout_p` > 0, with a `seed`): the probabilities are those of
    `graph.dropout(softmax(score), seed, dropout_p, stream)` on the
    [B..., H, L, S] probabilities (the same Philox bits, element by element),
    so the written-out form and the fused one drop the same entries; the
    logsumexp is that of the scores, before dropout.

    Example:
    ```mlir
    %o, %lse = graph.attention %q, %k, %v {scale = 1.250000e-01 : f64, causal = true}
        : (tensor<2x4x16x64xf32>, tensor<2x4x16x64xf32>, tensor<2x4x16x64xf32>)
        -> (tensor<2x4x16x64xf32>, tensor<2x4x16xf32>)
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$query, Graph_FloatTensor:$key,
                       Graph_FloatTensor:$value, Optional<Graph_Tensor>:$mask,
                       Optional<Graph_SeedTensor>:$seed,
                       F64Attr:$scale, DefaultValuedAttr<BoolAttr, "false">:$causal,
                       DefaultValuedAttr<F64Attr, "0.0">:$dropout_p,
                       DefaultValuedAttr<I64Attr, "0">:$stream);
  let results = (outs Graph_FloatTensor:$result, Graph_FloatTensor:$logsumexp);
  let assemblyFormat = "$query `,` $key `,` $value (`,` $mask^)? (`seed` $seed^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Graph_AttentionGradOp : Graph_Op<"attention_grad", [InferTypeOpAdaptor, AttrSizedOperandSegments]> {
  let summary = "gradients of graph.attention (FlashAttention-2 backward)";
  let description = [{
    Operands: `query`, `key`, `value`, `result` and `logsumexp` of a
    `graph.attention` with the same `scale`, `causal` and `mask`, and the
    result's cotangent `grad` (the shape of `result`), and its `seed`,
    `dropout_p` and `stream` when it drops probabilities. Results: the
    cotangents of `query`, `key` and `value` (their shapes). The
    probabilities are recomputed from `logsumexp`; a key/value head's
    gradients sum over the query heads that read it.

    Example:
    ```mlir
    %dq, %dk, %dv = graph.attention_grad %q, %k, %v, %o, %lse, %do {scale = 1.250000e-01 : f64}
        : (tensor<2x4x16x64xf32>, tensor<2x4x16x64xf32>, tensor<2x4x16x64xf32>,
           tensor<2x4x16x64xf32>, tensor<2x4x16xf32>, tensor<2x4x16x64xf32>)
        -> (tensor<2x4x16x64xf32>, tensor<2x4x16x64xf32>, tensor<2x4x16x64xf32>)
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$query, Graph_FloatTensor:$key,
                       Graph_FloatTensor:$value, Graph_FloatTensor:$result,
                       Graph_FloatTensor:$logsumexp, Graph_FloatTensor:$grad,
                       Optional<Graph_Tensor>:$mask, Optional<Graph_SeedTensor>:$seed,
                       F64Attr:$scale, DefaultValuedAttr<BoolAttr, "false">:$causal,
                       DefaultValuedAttr<F64Attr, "0.0">:$dropout_p,
                       DefaultValuedAttr<I64Attr, "0">:$stream);
  let results = (outs Graph_FloatTensor:$grad_query, Graph_FloatTensor:$grad_key,
                      Graph_FloatTensor:$grad_value);
  let assemblyFormat = "$query `,` $key `,` $value `,` $result `,` $logsumexp `,` $grad (`,` $mask^)? (`seed` $seed^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

// Convolution: an anchor op like matmul, executed by a library (oneDNN on
// the CPU). The three ops share their window attributes: `strides`,
// `padding_low`, `padding_high` and `dilation` have one entry per spatial
// dimension (1 to 3), `groups` divides the channels. With `channels_last`
// the activations (input, output and their cotangents) hold their channels
// innermost, `[N, S..., C]`; the weight stays `[O, C / groups, K...]`. Fusion
// chooses that layout on targets whose library runs it without reorders
// (passes/LayOutChannelsLast.cpp); the shape rules below are stated for the
// default, channels-first form.
class Graph_ConvLikeOp<string mnemonic> : Graph_Op<mnemonic, [InferTypeOpAdaptor]> {
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def Graph_ConvOp : Graph_ConvLikeOp<"conv"> {
  let summary = "N-d convolution (cross-correlation, as PyTorch's conv)";
  let description = [{
    `lhs` (input): `[N, C, S...]`, `rhs` (weight): `[O, C / groups, K...]`
    -> `[N, O, Q...]` with
    `Q_i = (S_i + padding_low_i + padding_high_i - dilation_i (K_i - 1) - 1) / strides_i + 1`
    (rounded down, at least 1). Output channel `o` of group
    `g = o / (O / groups)` sums over the input channels of that group:
    `result[n, o, q] = sum_{c, k} lhs[n, g C/groups + c, q strides - padding_low + k dilation] rhs[o, c, k]`,
    positions outside the input reading 0. No bias (add it after).

    Example:
    ```mlir
    %y = graph.conv %x, %w {strides = array<i64: 2, 2>, padding_low = array<i64: 1, 1>,
                            padding_high = array<i64: 1, 1>, dilation = array<i64: 1, 1>}
        : (tensor<8x3x64x64xf32>, tensor<16x3x3x3xf32>) -> tensor<8x16x32x32xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding_low,
                       DenseI64ArrayAttr:$padding_high, DenseI64ArrayAttr:$dilation,
                       DefaultValuedAttr<I64Attr, "1">:$groups,
                       DefaultValuedAttr<BoolAttr, "false">:$channels_last);
}

def Graph_ConvBiasActOp : Graph_Op<"conv_bias_act", [InferTypeOpAdaptor]> {
  let summary = "graph.conv with a per-channel bias and an activation the convolution library applies";
  let description = [{
    `graph.conv` of `lhs` and `rhs` (same attributes, same result shape),
    then `bias[o]` (`[O]`, optional) added to output channel `o`, then
    `activation`: "none", "relu" (`max(x, 0)`, NaN kept) or "silu"
    (`x * sigmoid(x)`). Formed by fusion, after differentiation, on targets
    whose convolution library applies the bias and the activation while it
    writes its output (oneDNN's bias and post-ops): the epilogue costs no
    pass of its own. Inference batch norm reaches it folded: its per-channel
    scale multiplies the weight, its shift is the bias. Fusion folds silu
    only: oneDNN's relu makes a NaN 0, so the CPU applies "relu" after the
    convolution. Has no VJP: differentiate `graph.conv`.

    Example:
    ```mlir
    %y = graph.conv_bias_act %x, %w, %b {strides = array<i64: 1, 1>,
                                         padding_low = array<i64: 1, 1>,
                                         padding_high = array<i64: 1, 1>,
                                         dilation = array<i64: 1, 1>, activation = "relu"}
        : (tensor<8x3x64x64xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<8x16x64x64xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       Optional<Graph_FloatTensor>:$bias,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding_low,
                       DenseI64ArrayAttr:$padding_high, DenseI64ArrayAttr:$dilation,
                       DefaultValuedAttr<I64Attr, "1">:$groups,
                       DefaultValuedAttr<StrAttr, "\"none\"">:$activation,
                       DefaultValuedAttr<BoolAttr, "false">:$channels_last);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs (`,` $bias^)? attr-dict `:` functional-type(operands, results)";
}

def Graph_ConvGradInputOp : Graph_ConvLikeOp<"conv_grad_input"> {
  let summary = "the input's gradient of graph.conv (a transposed convolution)";
  let description = [{
    `lhs` (the result's cotangent): `[N, O, Q...]`, `rhs` (weight):
    `[O, C / groups, K...]` -> `[N, C, input_spatial...]`: the cotangent of
    `graph.conv`'s input for a convolution with these attributes of an input
    of spatial size `input_spatial` (which `Q` alone does not fix: strides
    round down). The same op is PyTorch's transposed convolution.
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding_low,
                       DenseI64ArrayAttr:$padding_high, DenseI64ArrayAttr:$dilation,
                       DefaultValuedAttr<I64Attr, "1">:$groups,
                       DenseI64ArrayAttr:$input_spatial,
                       DefaultValuedAttr<BoolAttr, "false">:$channels_last);
}

def Graph_ConvGradWeightOp : Graph_ConvLikeOp<"conv_grad_weight"> {
  let summary = "the weight's gradient of graph.conv";
  let description = [{
    `lhs` (input): `[N, C, S...]`, `rhs` (the result's cotangent):
    `[N, O, Q...]` -> `[O, C / groups, kernel...]`: the cotangent of
    `graph.conv`'s weight, of spatial size `kernel`.
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$padding_low,
                       DenseI64ArrayAttr:$padding_high, DenseI64ArrayAttr:$dilation,
                       DefaultValuedAttr<I64Attr, "1">:$groups,
                       DenseI64ArrayAttr:$kernel,
                       DefaultValuedAttr<BoolAttr, "false">:$channels_last);
}

def Graph_GatherOp : Graph_Op<"gather", [InferTypeOpAdaptor]> {
  let summary = "rows of a table by integer index (embedding lookup)";
  let description = [{
    `table: [V, D...]`, `indices: [I...]` -> `[I..., D...]`,
    `result[i..., d...] = table[indices[i...], d...]`. An index outside
    `[0, V)` is an error at run time.

    Example:
    ```mlir
    %r = graph.gather %table, %ids : (tensor<1024x128xf32>, tensor<4x16xi64>) -> tensor<4x16x128xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$table, Graph_IndexTensor:$indices);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$table `,` $indices attr-dict `:` functional-type(operands, results)";
}

def Graph_ScatterAddOp : Graph_Op<"scatter_add", [InferTypeOpAdaptor]> {
  let summary = "accumulate rows into a table (gradient of gather)";
  let description = [{
    `base: [V, D...]`, `indices: [I...]`, `updates: [I..., D...]`;
    `result = base` then `result[indices[i...], d...] += updates[i..., d...]`.

    Example:
    ```mlir
    %r = graph.scatter_add %zeros, %ids, %dy : (tensor<1024x128xf32>, tensor<4x16xi64>, tensor<4x16x128xf32>) -> tensor<1024x128xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$base, Graph_IndexTensor:$indices, Graph_Tensor:$updates);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$base `,` $indices `,` $updates attr-dict `:` functional-type(operands, results)";
}

def Graph_RandomUniformOp : Graph_Op<"random_uniform"> {
  let summary = "counter-based uniform random numbers (Philox 4x32-10)";
  let description = [{
    Element `i` (row-major) is drawn from Philox 4x32-10 with key
    `(seed & 0xffffffff, seed >> 32)` and counter
    `(i / 4 & 0xffffffff, i / 4 >> 32, stream, 0)`, taking word `i % 4` as
    `u32` and returning `(u32 >> (32 - m)) * 2^-m` in `[0, 1)`, where `m` is
    24 for f32, 11 for f16, 8 for bf16 and 32 for f64 (exact in the result
    type, so rounding never produces 1.0). Every target
    produces the same bits, so a dropout mask is reproducible and the
    backward pass reuses it rather than drawing again.

    Inside a `graph.fusion` the stream may come from an operand instead
    (`stream_value`, with the attribute 0): fusion moves it there, so the
    kernels of repeated layers, which differ only in their streams, are one
    kernel compiled once.

    Example:
    ```mlir
    %u = graph.random_uniform %seed {stream = 3 : i64} : (tensor<i64>) -> tensor<4x8xf32>
    %v = graph.random_uniform %seed, %stream : (tensor<i64>, tensor<i64>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_SeedTensor:$seed, Optional<Graph_SeedTensor>:$stream_value,
                       DefaultValuedAttr<I64Attr, "0">:$stream);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$seed (`,` $stream_value^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Composite ops (removed by --decompose).
//===----------------------------------------------------------------------===//

class Graph_SoftmaxLikeOp<string mnemonic, string sum, string formula>
    : Graph_Op<mnemonic, [InferTypeOpAdaptor]> {
  let summary = sum # " (composite)";
  let description = formula # [{ along `dim`, computed stably (the row
    maximum is subtracted first).

    Example:
    ```mlir
    %r = graph.}] # mnemonic # [{ %x {dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$operand, I64Attr:$dim);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$operand attr-dict `:` functional-type(operands, results)";
}

def Graph_SoftmaxOp : Graph_SoftmaxLikeOp<"softmax", "softmax", "`exp(x) / sum(exp(x))`">;
def Graph_LogSoftmaxOp : Graph_SoftmaxLikeOp<"log_softmax", "log-softmax",
    "`x - log(sum(exp(x)))`">;

def Graph_LayerNormOp : Graph_Op<"layer_norm", [InferTypeOpAdaptor]> {
  let summary = "layer normalisation (composite)";
  let description = [{
    Normalises over the trailing dimensions that `weight` and `bias` have
    (biased variance): `(x - mean) / sqrt(var + epsilon) * weight + bias`.

    Example:
    ```mlir
    %r = graph.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f64}
        : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$operand, Graph_FloatTensor:$weight,
                       Graph_FloatTensor:$bias, DefaultValuedAttr<F64Attr, "1e-5">:$epsilon);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$operand `,` $weight `,` $bias attr-dict `:` functional-type(operands, results)";
}

def Graph_LinearOp : Graph_Op<"linear", [InferTypeOpAdaptor]> {
  let summary = "affine layer x W^T + b (composite)";
  let description = [{
    `x: [..., in]`, `weight: [out, in]`, optional `bias: [out]` -> `[..., out]`.

    Example:
    ```mlir
    %r = graph.linear %x, %w, %b : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$operand, Graph_FloatTensor:$weight,
                       Optional<Graph_FloatTensor>:$bias);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$operand `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)";
}

def Graph_DropoutOp : Graph_Op<"dropout", [InferTypeOpAdaptor]> {
  let summary = "inverted dropout (composite)";
  let description = [{
    Keeps an element where `graph.random_uniform(seed, stream) >= p` and scales
    it by `1 / (1 - p)`; `0 <= p < 1`. A dropped element is exactly 0, even
    where the input is NaN or infinite.

    Example:
    ```mlir
    %r = graph.dropout %x, %seed {p = 1.0e-01 : f64, stream = 0 : i64}
        : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$operand, Graph_SeedTensor:$seed, F64Attr:$p,
                       DefaultValuedAttr<I64Attr, "0">:$stream);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$operand `,` $seed attr-dict `:` functional-type(operands, results)";
}

class Graph_ClassLossOp<string mnemonic, string sum, string what>
    : Graph_Op<mnemonic, [InferTypeOpAdaptor]> {
  let summary = sum # " (composite)";
  let description = [{
    `input: [..., C]` }] # what # [{, `target: [...]` integer class ids.
    Mean over the entries whose target is not `ignore_index`
    (NaN when every entry is ignored, as in PyTorch).

    Example:
    ```mlir
    %l = graph.}] # mnemonic # [{ %x, %t {ignore_index = -100 : i64}
        : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_IndexTensor:$target,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input `,` $target attr-dict `:` functional-type(operands, results)";
}

def Graph_CrossEntropyOp : Graph_ClassLossOp<"cross_entropy",
    "softmax cross-entropy loss", "logits">;
def Graph_NllOp : Graph_ClassLossOp<"nll", "negative log-likelihood loss",
    "log-probabilities">;

class Graph_PairLossOp<string mnemonic, string sum, string formula>
    : Graph_Op<mnemonic, [InferTypeOpAdaptor]> {
  let summary = sum # " (composite)";
  let description = formula # [{, averaged over all elements into a 0-d tensor.

    Example:
    ```mlir
    %l = graph.}] # mnemonic # [{ %a, %b : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$target);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input `,` $target attr-dict `:` functional-type(operands, results)";
}

def Graph_MseOp : Graph_PairLossOp<"mse", "mean squared error", "`(input - target)^2`">;
def Graph_BceOp : Graph_PairLossOp<"bce", "binary cross-entropy on probabilities",
    "`-(t log(p) + (1 - t) log(1 - p))` with each log clamped below at -100 (as PyTorch)">;

//===----------------------------------------------------------------------===//
// Fusion regions (built by --fuse).
//===----------------------------------------------------------------------===//

def Graph_FusionOp : Graph_Op<"fusion", [IsolatedFromAbove]> {
  let summary = "a group of ops compiled into one kernel";
  let description = [{
    The fusion pass records each kernel it decides on as one `graph.fusion`:
    the body computes the results from the block arguments (one per input)
    and ends with `graph.yield`. `kind` says how the kernel iterates:
    `pointwise` (one loop nest over `domain`), `reduction` (over `domain`,
    reducing the dimensions `reduced`; it may also hold the reduction's
    elementwise prologue and epilogue) or `matmul` (a GEMM whose library
    applies the elementwise epilogue in the body, where the target can).

    Example:
    ```mlir
    %r = graph.fusion "kernel0" (%x) {kind = "pointwise", domain = array<i64: 4, 8>, reduced = array<i64>}
        : (tensor<4x8xf32>) -> tensor<4x8xf32> {
    ^bb0(%a: tensor<4x8xf32>):
      %0 = graph.exp %a : tensor<4x8xf32>
      graph.yield %0 : tensor<4x8xf32>
    }
    ```
  }];
  let arguments = (ins StrAttr:$kernel_name, Variadic<Graph_Tensor>:$inputs,
                       StrAttr:$kind, DenseI64ArrayAttr:$domain,
                       DenseI64ArrayAttr:$reduced);
  let results = (outs Variadic<Graph_Tensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kernel_name `(` $inputs `)` attr-dict `:` functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
}

def Graph_YieldOp : Graph_Op<"yield", [Terminator, HasParent<"FusionOp">]> {
  let summary = "results of a fusion region";
  let description = [{
    Example:
    ```mlir
    graph.yield %0, %1 : tensor<4xf32>, tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Variadic<Graph_Tensor>:$values);
  let assemblyFormat = "$values attr-dict `:` type($values)";
}

//===----------------------------------------------------------------------===//
// Collectives: one op per collective starts it over a symbolic process group
// (a name and a size, never a live handle: the runtime binds the name to a
// communicator at load), graph.collective_wait finishes it. Between the two,
// the bytes are in flight: the memory plan keeps them, fusion never moves an
// op across either, and the ops in between overlap the communication.
//===----------------------------------------------------------------------===//

class Graph_CollectiveStartOp<string mnemonic> : Graph_Op<mnemonic, [InferTypeOpAdaptor]> {
  let results = (outs Graph_Tensor:$pending);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($pending)";
}

def Graph_AllReduceStartOp : Graph_CollectiveStartOp<"all_reduce_start"> {
  let summary = "starts an all-reduce over a process group";
  let description = [{
    Every rank of `group` (`group_size` ranks) contributes `input`; once
    waited for, each holds the elementwise `reduce` ("sum", "max" or "min")
    of all ranks' inputs, of `input`'s type. Same program on every rank
    (SPMD): ranks issue their collectives in the same order.

    Example:
    ```mlir
    %p = graph.all_reduce_start %g {group = "dp", group_size = 2 : i64} : tensor<1024xf32> -> tensor<1024xf32>
    %r = graph.collective_wait %p : tensor<1024xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$input, StrAttr:$group, I64Attr:$group_size,
                       DefaultValuedAttr<StrAttr, "\"sum\"">:$reduce);
}

def Graph_ReduceScatterStartOp : Graph_CollectiveStartOp<"reduce_scatter_start"> {
  let summary = "starts a reduce-scatter over a process group";
  let description = [{
    `input: [N, D...]` with `N` a multiple of `group_size` -> `[N / group_size, D...]`:
    rank `r` receives rows `[r * N / group_size, (r + 1) * N / group_size)` of
    the elementwise `reduce` of all ranks' inputs.

    Example:
    ```mlir
    %p = graph.reduce_scatter_start %g {group = "dp", group_size = 4 : i64} : tensor<1024xf32> -> tensor<256xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$input, StrAttr:$group, I64Attr:$group_size,
                       DefaultValuedAttr<StrAttr, "\"sum\"">:$reduce);
}

def Graph_AllGatherStartOp : Graph_CollectiveStartOp<"all_gather_start"> {
  let summary = "starts an all-gather over a process group";
  let description = [{
    `input: [N, D...]` -> `[group_size * N, D...]`: rank `r`'s input is rows
    `[r * N, (r + 1) * N)` of every rank's result.

    Example:
    ```mlir
    %p = graph.all_gather_start %shard {group = "dp", group_size = 4 : i64} : tensor<256xf32> -> tensor<1024xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$input, StrAttr:$group, I64Attr:$group_size);
}

def Graph_BroadcastStartOp : Graph_CollectiveStartOp<"broadcast_start"> {
  let summary = "starts a broadcast from one rank of a process group";
  let description = [{
    Every rank's result is rank `root`'s `input` (same type).

    Example:
    ```mlir
    %p = graph.broadcast_start %w {group = "dp", group_size = 2 : i64, root = 0 : i64} : tensor<8x8xf32> -> tensor<8x8xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$input, StrAttr:$group, I64Attr:$group_size,
                       DefaultValuedAttr<I64Attr, "0">:$root);
}

def Graph_CollectiveWaitOp : Graph_Op<"collective_wait", [AllTypesMatch<["pending", "result"]>]> {
  let summary = "waits for a collective and gives its result";
  let description = [{
    `pending`, the result of a `graph.*_start` op (its only use), once the
    collective has finished on this rank. It runs no code of its own: the
    result is the pending value's buffer.

    Example:
    ```mlir
    %r = graph.collective_wait %p : tensor<1024xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$pending);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$pending attr-dict `:` type($pending)";
  let hasVerifier = 1;
}

#endif // TILEFUSE_GRAPH_OPS
