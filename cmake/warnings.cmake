# Warning and sanitizer flags, applied per target (never directory-wide).
function(idem_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
                         -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
                         -Wunused -Woverloaded-virtual
                         -Wimplicit-fallthrough)
  # -Wnull-dereference is left out: GCC 12 reports false positives inside
  # libstdc++ std::string when inlined (seen through CLI11 headers).
  if(IDEM_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(IDEM_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                           -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()
