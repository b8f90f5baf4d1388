// Invariant checks that print both operands and throw (the library never aborts the process).
#pragma once

#include <fmt/format.h>

#include "tbcoll/error.hpp"

#define TBCOLL_ENFORCE_OP_(a, b, op)                                                                      \
  do {                                                                                                    \
    const auto& tbcoll_lhs_ = (a);                                                                        \
    const auto& tbcoll_rhs_ = (b);                                                                        \
    if (!(tbcoll_lhs_ op tbcoll_rhs_)) {                                                                  \
      throw ::tbcoll::Error(tbcollInternalError,                                                          \
                            fmt::format("{}:{}: enforce failed: {} {} {} ({} vs {})", __FILE__, __LINE__, \
                                        #a, #op, #b, tbcoll_lhs_, tbcoll_rhs_));                          \
    }                                                                                                     \
  } while (0)

#define TBCOLL_ENFORCE_EQ(a, b) TBCOLL_ENFORCE_OP_(a, b, ==)
#define TBCOLL_ENFORCE_NE(a, b) TBCOLL_ENFORCE_OP_(a, b, !=)
#define TBCOLL_ENFORCE_LE(a, b) TBCOLL_ENFORCE_OP_(a, b, <=)
#define TBCOLL_ENFORCE_LT(a, b) TBCOLL_ENFORCE_OP_(a, b, <)
#define TBCOLL_ENFORCE_GE(a, b) TBCOLL_ENFORCE_OP_(a, b, >=)
#define TBCOLL_ENFORCE(cond)                                                                               \
  do {                                                                                                     \
    if (!(cond)) {                                                                                         \
      throw ::tbcoll::Error(tbcollInternalError,                                                           \
                            fmt::format("{}:{}: enforce failed: {}", __FILE__, __LINE__, #cond));          \
    }                                                                                                      \
  } while (0)
