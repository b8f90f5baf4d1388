# Where the ibverbs transport's <infiniband/verbs.h> comes from.
#
# Linux: rdma-core's, wherever the compiler finds it (Debian: libibverbs-dev).
# macOS: the SDK's own, and only an SDK of macOS 26.2 or later, the first with Apple's Thunderbolt RDMA (librdma):
# an older SDK has no such header, and a header found elsewhere (say Homebrew's rdma-core) describes another
# library's structures than the librdma.dylib the transport loads.

# Checks an SDK at sdk_path: sets ${result_var} to the directory holding infiniband/verbs.h when the SDK is 26.2 or
# later and has the header, else to "" with ${why_var} saying what is wrong.
function(tbcoll_apple_sdk_verbs sdk_path result_var why_var)
  set(${result_var} "" PARENT_SCOPE)
  set(version "")
  if(EXISTS "${sdk_path}/SDKSettings.json")
    file(READ "${sdk_path}/SDKSettings.json" settings)
    if(settings MATCHES "\"Version\"[ \t\r\n]*:[ \t\r\n]*\"([0-9]+(\\.[0-9]+)*)\"")
      set(version ${CMAKE_MATCH_1})
    endif()
  endif()
  if(version STREQUAL "")
    set(${why_var} "cannot tell the version of the macOS SDK at ${sdk_path} (no Version in SDKSettings.json)"
        PARENT_SCOPE)
  elseif(version VERSION_LESS 26.2)
    set(${why_var} "the macOS SDK at ${sdk_path} is ${version}; Thunderbolt RDMA (librdma, infiniband/verbs.h) needs the macOS 26.2 SDK or later (Xcode 26.2+)"
        PARENT_SCOPE)
  elseif(NOT EXISTS "${sdk_path}/usr/include/infiniband/verbs.h")
    set(${why_var} "the macOS ${version} SDK at ${sdk_path} has no usr/include/infiniband/verbs.h" PARENT_SCOPE)
  else()
    set(${result_var} "${sdk_path}/usr/include" PARENT_SCOPE)
    set(${why_var} "" PARENT_SCOPE)
  endif()
endfunction()

# Sets TBCOLL_IBVERBS_INCLUDE_DIR (cached; "" when there is no usable header) and TBCOLL_IBVERBS_WHY_NOT.
function(tbcoll_find_verbs_header)
  if(APPLE)
    set(sdk "${CMAKE_OSX_SYSROOT}")
    if(NOT IS_DIRECTORY "${sdk}")
      execute_process(COMMAND xcrun --sdk macosx --show-sdk-path OUTPUT_VARIABLE sdk
                      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    endif()
    tbcoll_apple_sdk_verbs("${sdk}" dir why)
    set(TBCOLL_IBVERBS_INCLUDE_DIR "${dir}" CACHE PATH "Where infiniband/verbs.h is (the macOS SDK's)" FORCE)
    set(TBCOLL_IBVERBS_WHY_NOT "${why}" PARENT_SCOPE)
  else()
    find_path(TBCOLL_IBVERBS_INCLUDE_DIR infiniband/verbs.h)
    if(NOT TBCOLL_IBVERBS_INCLUDE_DIR)
      set(TBCOLL_IBVERBS_WHY_NOT "no infiniband/verbs.h (install rdma-core's headers: Debian libibverbs-dev)"
          PARENT_SCOPE)
    endif()
  endif()
endfunction()
