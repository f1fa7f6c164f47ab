//===- Passes.td - code generation passes ------------------------*- tablegen -*-===//
#ifndef TILEFUSE_CODEGEN_PASSES
#define TILEFUSE_CODEGEN_PASSES

include "mlir/Pass/PassBase.td"

def LowerToTilePass : Pass<"tilefuse-lower-to-tile", "mlir::ModuleOp"> {
  let summary = "Replace fused graph functions by their tile kernels";
  let description = [{
    For every function whose body is fused (graph.fusion regions, library
    calls, constants), builds its runtime program and replaces the module's
    contents by one tile kernel per graph.fusion, with the block sizes the
    target chooses. What `--emit=tile` prints.
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "Target whose block sizes to use: cpu or cuda[:sm_XX]">,
  ];
  let dependentDialects = [
    "::tilefuse::tile::TileDialect", "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"];
}

def TileToLLVMPass : Pass<"tilefuse-tile-to-llvm", "mlir::ModuleOp"> {
  let summary = "Lower tile kernels to the LLVM dialect for the CPU";
  let description = [{
    Gives each kernel the CPU calling convention
    `void name(void **buffers, i64 first, i64 end)` (a loop over program
    ids), replaces exp/log/tanh/erf by polynomials and lowers everything to
    the LLVM dialect: masked vector loads and stores for contiguous blocks,
    gathers and scatters otherwise. What `--emit=llvm` prints.
  }];
  let options = [
    Option<"narrowMaskedLanes", "narrow-masked-lanes", "bool", /*default=*/"true",
           "The target masks 8- and 16-bit vector lanes in hardware (AVX-512BW); "
           "false splits such blocks into whole (unmasked) and tail accesses">
  ];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect", "::mlir::cf::ControlFlowDialect"];
}

#endif // TILEFUSE_CODEGEN_PASSES
