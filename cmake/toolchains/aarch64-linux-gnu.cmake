# Cross-compiling for arm64 Linux with Debian's g++-aarch64-linux-gnu; the test binaries run under qemu-aarch64
# (qemu-user). Libraries (GoogleTest, fmt) come from Debian's multiarch arm64 packages (tools/setup.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# With libc6:arm64 installed, qemu finds the arm64 loader and libraries in their multiarch places: no -L (mixing in
# /usr/aarch64-linux-gnu's glibc hangs the first pthread_create).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
