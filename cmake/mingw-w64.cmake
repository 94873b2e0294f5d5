# CMake toolchain file: cross-builds MoonTail for 64-bit Windows (x86_64-w64-mingw32) with
# Debian's mingw-w64 GCC, against the libraries tools/win-deps.sh builds, and runs the
# results (try_run, tests) under wine.
#
#   tools/win-deps.sh                 # once: builds the prefix (build-win/prefix)
#   cmake -G Ninja -B build-win/node -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake
#
# The prefix: -DMT_WIN_PREFIX=DIR, else $WIN_DEPS_PREFIX (as for tools/win-deps.sh), else
# build-win/prefix in this repository.
#
# Compiler: x86_64-w64-mingw32-gcc-posix. Debian installs two variants, and the default
# alternative (x86_64-w64-mingw32-gcc) points at -win32, whose thread model is win32; the
# -posix one's is posix, on winpthreads, which MoonTail's pthread code needs (a C program
# can include pthread.h with either, but only -posix builds libgcc and its own
# thread-local and atomic support on the same winpthreads). Executables link it
# statically (-static below: no libwinpthread-1.dll, libgcc_s_seh-1.dll to ship); the one
# DLL is libmicrohttpd-12.dll in the prefix's bin/, found through WINEPATH under wine.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(MT_MINGW_TRIPLE x86_64-w64-mingw32)

set(CMAKE_C_COMPILER ${MT_MINGW_TRIPLE}-gcc-posix)
set(CMAKE_CXX_COMPILER ${MT_MINGW_TRIPLE}-g++-posix) # only if C++ is ever enabled
set(CMAKE_RC_COMPILER ${MT_MINGW_TRIPLE}-windres)
set(CMAKE_AR ${MT_MINGW_TRIPLE}-gcc-ar-posix CACHE FILEPATH "")
set(CMAKE_RANLIB ${MT_MINGW_TRIPLE}-gcc-ranlib-posix CACHE FILEPATH "")

if(NOT MT_WIN_PREFIX)
  if(DEFINED ENV{WIN_DEPS_PREFIX})
    set(MT_WIN_PREFIX "$ENV{WIN_DEPS_PREFIX}")
  else()
    set(MT_WIN_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../build-win/prefix")
  endif()
endif()
get_filename_component(MT_WIN_PREFIX "${MT_WIN_PREFIX}" ABSOLUTE)
# try_compile projects re-read this file: hand them the prefix too
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES MT_WIN_PREFIX)

# Libraries and headers from the prefix and the mingw-w64 runtime, programs from the host.
set(CMAKE_FIND_ROOT_PATH "${MT_WIN_PREFIX}" /usr/${MT_MINGW_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config (FindPkgConfig's pkg_check_modules) sees only the prefix's .pc files. They
# are relocatable (prefix=${pcfiledir}/../..), so no sysroot is set, and static: Libs
# carries the system libraries and Cflags the *_STATIC defines.
set(PKG_CONFIG_EXECUTABLE pkg-config CACHE FILEPATH "host pkg-config")
set(ENV{PKG_CONFIG_LIBDIR} "${MT_WIN_PREFIX}/lib/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
unset(ENV{PKG_CONFIG_SYSROOT_DIR})

# Windows 10 API; C99 printf/scanf formats (%zu, %lld, %Lf) from mingw-w64's own stdio
# instead of msvcrt's.
set(CMAKE_C_FLAGS_INIT "-D_WIN32_WINNT=0x0A00 -D__USE_MINGW_ANSI_STDIO=1")
set(CMAKE_CXX_FLAGS_INIT "-D_WIN32_WINNT=0x0A00 -D__USE_MINGW_ANSI_STDIO=1")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")

# Run cross-built programs (try_run, add_test through ctest, add_custom_command on an
# executable target) with wine, quietly, with the prefix's DLLs on the path.
find_program(MT_WINE NAMES wine)
if(MT_WINE)
  string(REPLACE "/" "\\" _mt_win_bin "Z:${MT_WIN_PREFIX}/bin")
  set(CMAKE_CROSSCOMPILING_EMULATOR /usr/bin/env WINEDEBUG=-all "WINEPATH=${_mt_win_bin}" ${MT_WINE})
endif()
