/* TBCOLL_API marks what libtbcoll exports: the C API, the public C++ classes and functions of include/tbcoll. The
 * library is built with hidden visibility, so everything else (internal namespaces, Boost.Asio, fmt) stays
 * inside it: an engine that links its own fmt or asio cannot clash with ours. */
#ifndef TBCOLL_EXPORT_H_
#define TBCOLL_EXPORT_H_

#if defined(_WIN32)
#define TBCOLL_API
#define TBCOLL_LOCAL
#else
#define TBCOLL_API __attribute__((visibility("default")))
#define TBCOLL_LOCAL __attribute__((visibility("hidden")))
#endif

#endif /* TBCOLL_EXPORT_H_ */
