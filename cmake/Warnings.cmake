function(fp4gap_set_warnings target)
  set(cxx_warnings -Wall -Wextra -Wpedantic -Wshadow)
  # GCC 12 reports -Wrestrict inside libstdc++'s std::string concatenation at -O3, a false
  # positive (GCC bug 105329); the warning stays on for every other compiler.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    list(APPEND cxx_warnings -Wno-restrict)
  endif()
  set(cuda_host_warnings -Wall,-Wextra)
  if(FP4GAP_WARNINGS_AS_ERRORS)
    list(APPEND cxx_warnings -Werror)
    set(cuda_errors -Werror=all-warnings -Xcompiler=-Werror)
  endif()
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${cxx_warnings}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${cuda_host_warnings} ${cuda_errors}>)
endfunction()
