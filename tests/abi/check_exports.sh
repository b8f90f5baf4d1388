#!/usr/bin/env bash
# Fails if the shared library exports anything beyond tbcoll's public API: the C functions (tbcoll*) and the
# public C++ namespace (classes and functions of include/tbcoll, with their type info and vtables). Boost,
# fmt, standard-library template instances, the internal namespaces (tbcoll::algo, tbcoll::shm, ...) and
# Communicator::Impl must stay inside.
#   check_exports.sh LIBRARY
set -euo pipefail
lib=$1
[ -f "$lib" ] || { echo "check_exports: no $lib"; exit 1; }
symbols=$(nm -DC --defined-only "$lib" | cut -d' ' -f3-)
[ -n "$symbols" ] || { echo "check_exports: $lib exports nothing"; exit 1; }
# The public C++ names: tbcoll::X where X is a class or function of include/tbcoll (capitalised classes and the
# free functions listed), and tbcoll::transport's plug-in interface.
public='tbcoll::([A-Z][A-Za-z]*(::|\(| |$)|(dtype_size|is_floating_point|is_unsigned|to_string|parse_dtype|parse_op|op_kind_name|make_in_memory_store|connect_tcp_store)(\(|\[)|transport::([A-Z][A-Za-z]*|available_devices|register_device|load_plugin|same_call|describe_signature)(::|\(|\[|$))'
bad=$(grep -vE "^tbcoll[A-Z][A-Za-z]*\$|^((typeinfo|typeinfo name|vtable) for )?$public" <<< "$symbols" || true)
bad+=$(grep -E '^((typeinfo|typeinfo name|vtable) for )?tbcoll::[A-Za-z]+::(Impl|State)(::|$)' <<< "$symbols" || true)
if [ -n "$bad" ]; then
  echo "check_exports: $lib exports names outside the public API:"
  head -40 <<< "$bad"
  echo "($(wc -l <<< "$bad") in all)"
  exit 1
fi
echo "check_exports: $(wc -l <<< "$symbols") symbols, all of the public API"
