//===- TileOps.td - the tile dialect ----------------------------*- tablegen -*-===//
//
// The tile dialect describes one Triton-style program per fused kernel: a
// kernel is a `func.func` marked `tile.kernel` whose body runs once per
// program id. Blocks of elements are MLIR vectors, so elementwise math on
// blocks is plain `arith`/`math` on vectors; this dialect adds only what
// arith and math cannot say: which program runs, where a block lives in
// memory (masked, strided loads and stores through typed pointers) and how a
// block folds into one value.
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_TILE_OPS
#define TILEFUSE_TILE_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Tile_Dialect : Dialect {
  let name = "tile";
  let cppNamespace = "::tilefuse::tile";
  let summary = "Triton-style block programs of fused kernels";
  let description = [{
    One program of a kernel handles one block of elements. A kernel is a
    `func.func` with the unit attribute `tile.kernel`, typed-pointer
    arguments (one per input and output buffer, in that order) and the
    attributes `tile.grid` (number of programs), `tile.block` (elements per
    block) and `tile.fused_ops` (the source ops it computes, for reports).
    Backends run the body once per program id in `[0, tile.grid)`.
  }];
  let useDefaultTypePrinterParser = 1;
}

class Tile_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tile_Dialect, mnemonic, traits>;

def Tile_PtrType : TypeDef<Tile_Dialect, "Ptr"> {
  let mnemonic = "ptr";
  let summary = "pointer to a buffer of elements";
  let description = [{
    The address of element 0 of a row-major buffer. The pointee is the
    storage type: f32, f16, bf16, f64, i32, i64, or i8 for booleans.
  }];
  let parameters = (ins "::mlir::Type":$pointee);
  let assemblyFormat = "`<` $pointee `>`";
}

def Tile_Storage : AnyTypeOf<[F32, F16, BF16, F64, I32, I64, I8]>;
def Tile_Block : VectorOfRankAndType<[1], [F32, F16, BF16, F64, I32, I64, I8]>;
def Tile_ReduceKind : I32EnumAttr<"ReduceKind", "how a block folds", [
    I32EnumAttrCase<"add", 0>, I32EnumAttrCase<"max", 1>,
    I32EnumAttrCase<"min", 2>]> {
  let cppNamespace = "::tilefuse::tile";
}

def Tile_ProgramIdOp : Tile_Op<"program_id", [Pure]> {
  let summary = "the id of the running program";
  let description = [{
    In `[0, tile.grid)` of the enclosing kernel.
    ```mlir
    %pid = tile.program_id : i64
    ```
  }];
  let results = (outs I64:$id);
  let assemblyFormat = "attr-dict `:` type($id)";
}

def Tile_LanesOp : Tile_Op<"lanes", [Pure]> {
  let summary = "the lane numbers 0, 1, ..., B-1 of a block";
  let description = [{
    ```mlir
    %l = tile.lanes : vector<16xi64>
    ```
  }];
  let results = (outs VectorOfRankAndType<[1], [I64]>:$lanes);
  let assemblyFormat = "attr-dict `:` type($lanes)";
}

def Tile_LoadOp : Tile_Op<"load", [MemoryEffects<[MemRead]>]> {
  let summary = "masked, strided load of a block";
  let description = [{
    Lane `l` reads element `offset + (l / div) * stride` when
    `first <= l < limit` (`first` is 0 when absent, `div` 1); other lanes are
    zero and touch no memory. `stride` 0 broadcasts one element, 1 is a
    contiguous (vector) load. A `div` above 1 repeats each element for `div`
    consecutive lanes (the inverse of a strided slice, nearest upsampling):
    a contiguous load of `B / div` elements spread over the block, not a
    gather. A `first` above 0 keeps the lanes below it off memory (a block
    that starts before its input, as a concatenation's second input does).
    ```mlir
    %v = tile.load %p[%off], %limit {stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf32>
    %w = tile.load %p[%off], %limit from %first {div = 2 : i64, stride = 1 : i64} : !tile.ptr<f32> -> vector<16xf32>
    ```
  }];
  let arguments = (ins Tile_PtrType:$ptr, I64:$offset, I64:$limit,
                       I64Attr:$stride, Optional<I64>:$first,
                       DefaultValuedAttr<I64Attr, "1">:$div);
  let results = (outs Tile_Block:$result);
  let assemblyFormat = [{
    $ptr `[` $offset `]` `,` $limit (`from` $first^)? attr-dict `:` qualified(type($ptr)) `->` type($result)
  }];
  let builders = [
    // The plain form: every lane from 0 below `limit`, one element each.
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$ptr, "::mlir::Value":$offset,
                   "::mlir::Value":$limit, "::mlir::IntegerAttr":$stride), [{
      build($_builder, $_state, result, ptr, offset, limit, stride, ::mlir::Value(),
            $_builder.getI64IntegerAttr(1));
    }]>
  ];
  let hasVerifier = 1;
}

def Tile_GatherOp : Tile_Op<"gather", [MemoryEffects<[MemRead]>]> {
  let summary = "load of a block at arbitrary element offsets";
  let description = [{
    Lane `l` reads element `offsets[l]` where `mask[l]`, else is zero.
    ```mlir
    %v = tile.gather %p[%offs], %mask : !tile.ptr<f32>, vector<16xi64>, vector<16xi1> -> vector<16xf32>
    ```
  }];
  let arguments = (ins Tile_PtrType:$ptr, VectorOfRankAndType<[1], [I64]>:$offsets,
                       VectorOfRankAndType<[1], [I1]>:$mask);
  let results = (outs Tile_Block:$result);
  let assemblyFormat = [{
    $ptr `[` $offsets `]` `,` $mask attr-dict `:` qualified(type($ptr)) `,` type($offsets) `,` type($mask) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tile_LoadScalarOp : Tile_Op<"load_scalar", [MemoryEffects<[MemRead]>]> {
  let summary = "load of one element";
  let description = [{
    ```mlir
    %s = tile.load_scalar %p[%off] : !tile.ptr<f32> -> f32
    ```
  }];
  let arguments = (ins Tile_PtrType:$ptr, I64:$offset);
  let results = (outs Tile_Storage:$result);
  let assemblyFormat = "$ptr `[` $offset `]` attr-dict `:` qualified(type($ptr)) `->` type($result)";
  let hasVerifier = 1;
}

def Tile_StoreOp : Tile_Op<"store", [MemoryEffects<[MemWrite]>]> {
  let summary = "masked, strided store of a block";
  let description = [{
    Lane `l` writes element `offset + l * stride` when `l < limit`.
    `alignment` is a number of bytes known to divide the address of lane 0
    (buffers start 64-byte aligned). `streaming` says the result is too
    large to stay in cache for its readers: backends may write it around
    the cache (non-temporal stores) where the block is aligned.
    ```mlir
    tile.store %v, %p[%off], %limit {stride = 1 : i64} : vector<16xf32>, !tile.ptr<f32>
    ```
  }];
  let arguments = (ins Tile_Block:$value, Tile_PtrType:$ptr, I64:$offset,
                       I64:$limit, I64Attr:$stride,
                       DefaultValuedAttr<I64Attr, "1">:$alignment,
                       UnitAttr:$streaming);
  let assemblyFormat = [{
    $value `,` $ptr `[` $offset `]` `,` $limit attr-dict `:` type($value) `,` qualified(type($ptr))
  }];
  let hasVerifier = 1;
}

def Tile_ScatterOp : Tile_Op<"scatter", [MemoryEffects<[MemWrite]>]> {
  let summary = "store of a block at arbitrary element offsets";
  let description = [{
    Lane `l` writes element `offsets[l]` where `mask[l]`.
    ```mlir
    tile.scatter %v, %p[%offs], %mask : vector<16xf32>, !tile.ptr<f32>, vector<16xi64>, vector<16xi1>
    ```
  }];
  let arguments = (ins Tile_Block:$value, Tile_PtrType:$ptr,
                       VectorOfRankAndType<[1], [I64]>:$offsets,
                       VectorOfRankAndType<[1], [I1]>:$mask);
  let assemblyFormat = [{
    $value `,` $ptr `[` $offsets `]` `,` $mask attr-dict `:` type($value) `,` qualified(type($ptr)) `,` type($offsets) `,` type($mask)
  }];
  let hasVerifier = 1;
}

def Tile_StoreScalarOp : Tile_Op<"store_scalar", [MemoryEffects<[MemWrite]>]> {
  let summary = "store of one element";
  let description = [{
    ```mlir
    tile.store_scalar %s, %p[%off] : f32, !tile.ptr<f32>
    ```
  }];
  let arguments = (ins Tile_Storage:$value, Tile_PtrType:$ptr, I64:$offset);
  let assemblyFormat = "$value `,` $ptr `[` $offset `]` attr-dict `:` type($value) `,` qualified(type($ptr))";
  let hasVerifier = 1;
}

def Tile_ScratchOp : Tile_Op<"scratch", [MemoryEffects<[MemAlloc]>]> {
  let summary = "a buffer private to one program";
  let description = [{
    `elements` elements that the running program alone reads and writes;
    their contents are undefined when the program starts. Row kernels keep
    a value computed in one pass over a row here for a later pass (a
    softmax's exponentials), so the later pass loads it instead of
    computing it again. Only targets whose programs run on one core with
    a private stack (the CPU) are given scratch buffers.
    ```mlir
    %s = tile.scratch {elements = 1024 : i64} : !tile.ptr<f32>
    ```
  }];
  let arguments = (ins I64Attr:$elements);
  let results = (outs Tile_PtrType:$result);
  let assemblyFormat = "attr-dict `:` qualified(type($result))";
  let hasVerifier = 1;
}

def Tile_ReduceOp : Tile_Op<"reduce", [Pure]> {
  let summary = "folds a block into one value";
  let description = [{
    `max` and `min` propagate NaN. Masked-off lanes must already hold the
    neutral element.
    ```mlir
    %s = tile.reduce add %v : vector<16xf32> -> f32
    ```
  }];
  let arguments = (ins Tile_ReduceKind:$kind, Tile_Block:$block);
  let results = (outs AnyTypeOf<[F32, F64, I32, I64]>:$result);
  let assemblyFormat = "$kind $block attr-dict `:` type($block) `->` type($result)";
  let hasVerifier = 1;
}

#endif // TILEFUSE_TILE_OPS
