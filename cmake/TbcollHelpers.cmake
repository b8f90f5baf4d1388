# Warning flags used by every tbcoll target.
function(tbcoll_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-missing-field-initializers)
endfunction()

# Appends transports/<name>/*.cc to list_var when option is ON, else the transport's "not available" stub
# (transports/<name>/stub/<name>_stub.cc), so the core never needs an #ifdef.
function(tbcoll_optional_transport list_var name option)
  if(${option})
    file(GLOB sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/transports/${name}/*.cc)
  else()
    set(sources ${PROJECT_SOURCE_DIR}/transports/${name}/stub/${name}_stub.cc)
  endif()
  set(${list_var} ${${list_var}} ${sources} PARENT_SCOPE)
endfunction()
