function(fp4gap_set_warnings target)
  set(cxx_warnings -Wall -Wextra -Wpedantic -Wshadow)
  set(cuda_host_warnings -Wall,-Wextra)
  if(FP4GAP_WARNINGS_AS_ERRORS)
    list(APPEND cxx_warnings -Werror)
    set(cuda_errors -Werror=all-warnings -Xcompiler=-Werror)
  endif()
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${cxx_warnings}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${cuda_host_warnings} ${cuda_errors}>)
endfunction()
