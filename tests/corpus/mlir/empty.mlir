// EXPECT: error the module defines no function
// An empty module: only these comment lines.
// EXPECT(opt,fused,llvm,cuda): ok
