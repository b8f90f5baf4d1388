# Warning flags used by every tbcoll target.
function(tbcoll_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-missing-field-initializers)
endfunction()
