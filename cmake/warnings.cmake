# Warning and sanitizer flags, applied per target (never directory-wide).
function(idem_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
                         -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
                         -Wunused -Woverloaded-virtual
                         -Wimplicit-fallthrough)
  # -Wnull-dereference is left out: GCC 12 reports false positives inside
  # libstdc++ std::string when inlined (seen through CLI11 headers).
  # A unity build (CMAKE_UNITY_BUILD=ON, as scripts/test.sh builds) compiles each source
  # included into a generated one, and GCC then reports every class of a source that holds
  # a type of that source's anonymous namespace: a warning meant for headers, which no
  # source here is.
  if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wno-subobject-linkage)
  endif()
  if(IDEM_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(IDEM_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                           -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()
