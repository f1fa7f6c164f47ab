# FileCheck tests (tests/ir, tests/passes) as one ctest `lit`.
# include()d from tests/CMakeLists.txt. Needs `pip install lit` and LLVM 19's
# FileCheck/not (see lit.cfg.py for how the tools are found).
if(NOT Python3_EXECUTABLE)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
endif()

# Not `python -m lit`: lit 23's wheel has no lit/__main__.py. lit.main.main()
# is the entry point of every version (written without `;`, which CMake
# would take for a list separator).
add_test(NAME lit
  COMMAND ${Python3_EXECUTABLE} -c "__import__('lit.main').main.main()"
          -v ${CMAKE_CURRENT_SOURCE_DIR}
          --param tools_dir=${CMAKE_BINARY_DIR}/bin
          --param exec_root=${CMAKE_CURRENT_BINARY_DIR}/lit)
set_tests_properties(lit PROPERTIES LABELS lit)
