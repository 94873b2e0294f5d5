#!/usr/bin/env bash
# tools/win-deps.sh: builds the C libraries MoonTail's node links (libsodium, jansson,
# pcre2, sqlite3, curl, libmicrohttpd) for 64-bit Windows with Debian's mingw-w64 cross
# compiler, from Debian's own source packages, into a prefix that the Windows build
# (cmake -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake) finds through pkg-config.
# Debian ships no mingw builds of these libraries; this makes them reproducibly.
#
# Usage (from anywhere; as root it installs what it needs with apt):
#   tools/win-deps.sh [--prefix DIR] [--check] [--rebuild] [--jobs N]
#     --prefix DIR  where to install (default: build-win/prefix under the repository root;
#                   or set WIN_DEPS_PREFIX). The work dir is WIN_DEPS_WORK, default
#                   build-win/deps-src (both under build*/, which .gitignore covers)
#     --check       after building (instant when cached), compile the smoke programs in
#                   tools/win-deps/ against the prefix (static, -static) and run them
#                   under wine (one of them against an HTTPS server on 127.0.0.1, to
#                   prove Schannel's key pinning and certinfo), and build
#                   tools/win-deps/cmake-check with cmake/mingw-w64.cmake and run its
#                   test: the test that the prefix works
#     --rebuild     ignore the stamps and build every library again
#     --jobs N      make -jN, and with N >= 2 two libraries build at once (default:
#                   WIN_DEPS_JOBS or nproc)
#   WIN_DEPS_STRICT=1  build only the Debian revisions pinned below (see "Pins")
#   WIN_DEPS_NO_APT=1  never call apt-get install (it is skipped anyway when not root)
#
# What is built (-O2, static .a, x86_64-w64-mingw32-gcc-posix as in cmake/mingw-w64.cmake):
#   libsodium  static; users must define SODIUM_STATIC (the .pc's Cflags do)
#   jansson    static
#   pcre2      8-bit only, JIT, static; users must define PCRE2_STATIC (the .pc's Cflags do)
#   sqlite3    the amalgamation (generated from Debian's source tree with the native
#              toolchain), compiled threadsafe (SQLITE_THREADSAFE=1) into a static lib
#   curl       static, Schannel only, HTTP/HTTPS only, no zlib/IDN/PSL/HTTP2/SSH/LDAP;
#              users must define CURL_STATICLIB (the .pc's Cflags do)
#   libmicrohttpd  a DLL (LGPL: users must be able to swap it), no HTTPS, W32 threads
# Each .pc file is made relocatable (prefix=${pcfiledir}/../..) and, the prefix being
# static, carries its private libs in Libs, so a plain `pkg-config --libs` links.
#
# Pins and the checksum policy: each library is pinned to an upstream version and the
# sha256 of Debian's upstream (orig) tarball, which stays the same across Debian
# revisions, and to the Debian revision it was tested with. The .dsc and Debian's patches
# are verified by apt against the signed Release file (then by dpkg-source against the
# .dsc). Bookworm's security updates replace revisions (curl 7.88.1-10+deb12uN), and an
# archive may lack one it lists, so the newest listed revision of the pinned upstream
# version that downloads is used, with a warning when it is not the tested one;
# WIN_DEPS_STRICT=1 refuses that. A changed orig tarball, or a pinned upstream version
# gone from bookworm, stops the build with a message naming the fix.
#
# Debian's patches are applied (dpkg-source -x), all of them but two of curl's:
# 90_gnutls.patch and 99_nss.patch rename the library to make Debian's GnuTLS and NSS
# flavours (its rules pop them for the plain one). The Linux-only ones are harmless here
# (sqlite's lemon and Makefile patches only touch the native amalgamation step).
#
# Caching: a stamp per library in PREFIX/share/win-deps/ keyed by its pin, its build
# function, the shared build helpers and the compiler's version; a rerun with nothing
# changed takes well under a second and needs no network. A stamped build is kept even
# when Debian publishes a newer revision: use --rebuild to pick that up.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HOST=x86_64-w64-mingw32
# The posix-threads compiler: its libgcc and default thread model are winpthreads, which
# the project's pthread code needs (the default alternative, -win32, has thread model win32).
CC=$HOST-gcc-posix
PREFIX=${WIN_DEPS_PREFIX:-$ROOT/build-win/prefix}
WORK=${WIN_DEPS_WORK:-$ROOT/build-win/deps-src}
JOBS=${WIN_DEPS_JOBS:-$(nproc)}
CHECK=0
REBUILD=0
LIBS=(libsodium jansson pcre2 sqlite3 curl libmicrohttpd)

# ---- Pins: source package, upstream version, orig tarball, its sha256, tested revision ----
# (apt-cache showsrc --only-source NAME lists what bookworm has.)
declare -A PIN_UP PIN_ORIG PIN_SHA PIN_DEB
pin() { PIN_UP[$1]=$2 PIN_ORIG[$1]=$3 PIN_SHA[$1]=$4 PIN_DEB[$1]=$5; }
pin libsodium 1.0.18 libsodium_1.0.18.orig.tar.gz \
  d59323c6b712a1519a5daf710b68f5e7fde57040845ffec53850911f10a5d4f4 1.0.18-1+deb12u1
pin jansson 2.14 jansson_2.14.orig.tar.gz \
  c739578bf6b764aa0752db9a2fdadcfe921c78f1228c7ec0bb47fa804c55d17b 2.14-2
# bookworm-security lists 10.42-1+deb12u2, which is tried first, but it was missing from
# the archive when this was pinned (404), so the tested build is bookworm's 10.42-1.
pin pcre2 10.42 pcre2_10.42.orig.tar.gz \
  c33b418e3b936ee3153de2c61cc638e7e4fe3156022a5c77d0711bcbb9d64f1f 10.42-1
pin sqlite3 3.40.1 sqlite3_3.40.1.orig.tar.xz \
  aaa776260ab4dc976db34aa7891819484c8676b5b2783123ebc6301e2ca5d655 3.40.1-2+deb12u2
pin curl 7.88.1 curl_7.88.1.orig.tar.gz \
  cdb38b72e36bc5d33d5b8810f8018ece1baa29a8f215b4495e495ded82bbf3c7 7.88.1-10+deb12u15
pin libmicrohttpd 0.9.75 libmicrohttpd_0.9.75.orig.tar.xz \
  796e7e217a4802679fcac667a4e98501c53185dcf50ca0583870e84192620131 0.9.75-6

# Host tools: the cross compiler (posix and win32 variants come together), wine for
# --check and cmake's emulator, dpkg-source, autotools (libsodium's and jansson's orig
# tarballs are git snapshots without configure), tclsh and a native gcc for sqlite's
# amalgamation, pkg-config, cmake and ninja for the smoke checks, python3 and openssl for
# the smoke check's HTTPS server.
APT_PKGS=(gcc-mingw-w64-x86-64 wine dpkg-dev make patch xz-utils autoconf automake libtool
  pkgconf tcl gcc libc6-dev cmake ninja-build python3 openssl)

msg() { printf 'win-deps: %s\n' "$*" >&2; }
die() {
  printf 'win-deps: error: %s\n' "$*" >&2
  exit 1
}
now() { printf '%s' "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

while [ $# -gt 0 ]; do
  case $1 in
    --prefix) PREFIX=${2:?--prefix needs a directory}; shift 2 ;;
    --prefix=*) PREFIX=${1#--prefix=}; shift ;;
    --check) CHECK=1; shift ;;
    --rebuild) REBUILD=1; shift ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
done
mkdir -p "$PREFIX" "$WORK"
PREFIX=$(cd "$PREFIX" && pwd)
WORK=$(cd "$WORK" && pwd)
STAMPS=$PREFIX/share/win-deps
LOGS=$WORK/logs
mkdir -p "$STAMPS" "$LOGS" "$WORK/dl"

# ---- host setup ----
ensure_host_tools() {
  local missing=() p
  for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
      missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ] || [ "${WIN_DEPS_NO_APT:-0}" = 1 ]; then
    die "missing packages: ${missing[*]} (run as root, or: apt-get install ${missing[*]})"
  fi
  msg "installing ${missing[*]}"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "${missing[@]}" >"$LOGS/apt-install.log" 2>&1; then
    apt-get update -q >>"$LOGS/apt-install.log" 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "${missing[@]}" >>"$LOGS/apt-install.log" 2>&1 ||
      die "apt-get install ${missing[*]} failed: see $LOGS/apt-install.log"
  fi
}

# deb-src entries for bookworm, bookworm-updates and bookworm-security: copies of the
# configured Debian "deb" entries (same mirror and keyring) with Types: deb-src, in a file
# of their own. Returns 0 when it wrote the file (apt-get update is then needed).
DEB_SRC_FILE=/etc/apt/sources.list.d/moontail-deb-src.sources
ensure_deb_src() {
  [ -e "$DEB_SRC_FILE" ] && return 1
  # already configured by someone else?
  if grep -rqsE '^[[:space:]]*(deb-src[[:space:]]|Types:.*deb-src)' /etc/apt/sources.list \
    /etc/apt/sources.list.d/ && apt-cache showsrc --only-source curl 2>/dev/null |
    grep -q '^Version:'; then
    return 1
  fi
  [ "$(id -u)" = 0 ] || die "no deb-src entries for bookworm: run once as root to add $DEB_SRC_FILE"
  local body=''
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -e "$f" ] || continue
    # each deb822 paragraph whose Types has deb and whose Suites name bookworm*
    body+=$(awk 'BEGIN { RS = ""; FS = "\n" }
      {
        types = 0; suites = 0; enabled = 1; out = ""
        for (i = 1; i <= NF; i++) {
          line = $i
          if (line ~ /^#/) continue
          if (line ~ /^Types:/ && line ~ /[ \t]deb([ \t]|$)/) { types = 1; line = "Types: deb-src" }
          if (line ~ /^Suites:/ && line ~ /[ \t]bookworm/) suites = 1
          if (line ~ /^Enabled:[ \t]*no/) enabled = 0
          out = out line "\n"
        }
        if (types && suites && enabled) printf "%s\n", out
      }' "$f")$'\n'
  done
  if [ -r /etc/apt/sources.list ]; then
    local line
    while read -r line; do
      # one-line format: deb [opts] URI bookworm* components
      [[ $line =~ ^deb[[:space:]]+(\[([^]]*)\][[:space:]]+)?([^[:space:]]+)[[:space:]]+(bookworm[^[:space:]]*)[[:space:]]+(.*)$ ]] ||
        continue
      body+="Types: deb-src"$'\n'"URIs: ${BASH_REMATCH[3]}"$'\n'"Suites: ${BASH_REMATCH[4]}"
      body+=$'\n'"Components: ${BASH_REMATCH[5]}"$'\n'
      if [[ ${BASH_REMATCH[2]} =~ signed-by=([^[:space:]]+) ]]; then
        body+="Signed-By: ${BASH_REMATCH[1]}"$'\n'
      fi
      body+=$'\n'
    done </etc/apt/sources.list
  fi
  if ! grep -q 'Suites:' <<<"$body"; then
    msg "no bookworm entries found in /etc/apt/sources.list*: using deb.debian.org"
    body="Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"
  fi
  msg "adding $DEB_SRC_FILE (Debian source packages, same mirror as the deb entries)"
  printf '# Added by MoonTail tools/win-deps.sh: the Debian source packages it builds for Windows.\n\n%s' \
    "$body" >"$DEB_SRC_FILE"
  return 0
}

APT_UPDATED=0
apt_update() {
  [ $APT_UPDATED = 1 ] && return 0
  [ "$(id -u)" = 0 ] || die "apt-get update needed (no source lists): run as root"
  msg "apt-get update"
  apt-get update -q >"$LOGS/apt-update.log" 2>&1 || die "apt-get update failed: see $LOGS/apt-update.log"
  APT_UPDATED=1
}

SOURCES_READY=0
ensure_sources() {
  [ $SOURCES_READY = 1 ] && return 0
  if ensure_deb_src; then apt_update; fi
  SOURCES_READY=1
}

# ---- fetching ----
upstream_of() { # 1:1.2-3+deb12u1 -> 1.2
  local v=${1#*:}
  printf '%s' "${v%-*}"
}
sort_versions_desc() { # Debian version order, newest first
  local -a v=()
  local x i j t
  while read -r x; do [ -n "$x" ] && v+=("$x"); done
  for ((i = 0; i < ${#v[@]}; i++)); do
    for ((j = i + 1; j < ${#v[@]}; j++)); do
      if dpkg --compare-versions "${v[j]}" gt "${v[i]}"; then
        t=${v[i]} v[i]=${v[j]} v[j]=$t
      fi
    done
  done
  [ ${#v[@]} -gt 0 ] && printf '%s\n' "${v[@]}"
  return 0
}
listed_versions() {
  apt-cache showsrc --only-source "$1" 2>/dev/null | awk '/^Version:/ { print $2 }' | sort -u
}
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# fetch NAME: downloads the source package into $WORK/dl, verifies the orig tarball and
# sets DEBVER to the Debian version used.
fetch() {
  local name=$1 up=${PIN_UP[$1]} tested=${PIN_DEB[$1]}
  ensure_sources
  local all
  all=$(listed_versions "$name")
  if ! grep -q . <<<"$all"; then
    apt_update
    all=$(listed_versions "$name")
  fi
  local -a cands=()
  local v
  while read -r v; do
    [ -n "$v" ] && [ "$(upstream_of "$v")" = "$up" ] && cands+=("$v")
  done < <(sort_versions_desc <<<"$all")
  if [ ${#cands[@]} -eq 0 ]; then
    die "$name $up (pinned) is no longer in bookworm's sources; they list: ${all//$'\n'/ }.
  Fix: in tools/win-deps.sh, change the 'pin $name' line to the new upstream version,
  its orig tarball and sha256 (apt-cache showsrc --only-source $name), rerun with --check,
  and commit."
  fi
  if [ "${WIN_DEPS_STRICT:-0}" = 1 ]; then
    printf '%s\n' "${cands[@]}" | grep -qxF "$tested" ||
      die "$name $tested (pinned, WIN_DEPS_STRICT=1) is no longer listed; listed: ${cands[*]}.
  Fix: pin one of those in tools/win-deps.sh (same orig tarball), or unset WIN_DEPS_STRICT."
    cands=("$tested")
  fi
  local -a sandbox=()
  [ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root) # as apt would, without the warning
  DEBVER=
  for v in "${cands[@]}"; do
    if (cd "$WORK/dl" && apt-get "${sandbox[@]}" source --download-only -q "$name=$v") \
      >>"$LOGS/$name.fetch.log" 2>&1; then
      DEBVER=$v
      break
    fi
    msg "WARNING: $name $v is listed but could not be downloaded (see $LOGS/$name.fetch.log)"
  done
  [ -n "$DEBVER" ] || die "$name: none of ${cands[*]} could be downloaded: see $LOGS/$name.fetch.log"
  if [ "$DEBVER" != "${cands[0]}" ]; then
    msg "WARNING: $name: building $DEBVER, which lacks the fixes of ${cands[0]} (not downloadable)"
  fi
  if [ "$DEBVER" != "$tested" ]; then
    msg "note: $name: using Debian revision $DEBVER; the pinned (tested) one is $tested"
  fi
  local orig=$WORK/dl/${PIN_ORIG[$name]} sum
  [ -f "$orig" ] || die "$name: ${PIN_ORIG[$name]} is not part of $name $DEBVER: re-pin it"
  sum=$(sha256_of "$orig")
  [ "$sum" = "${PIN_SHA[$name]}" ] || die "$name: ${PIN_ORIG[$name]} has sha256 $sum, pinned ${PIN_SHA[$name]}.
  The upstream tarball changed: check why before re-pinning it in tools/win-deps.sh."
}

# unpack NAME -> SRC: a fresh tree with Debian's patches applied (dpkg-source -x checks
# every file against the .dsc).
unpack() {
  local name=$1 dsc
  dsc=$WORK/dl/${name}_${DEBVER#*:}.dsc
  SRC=$WORK/src/$name
  rm -rf "$SRC"
  mkdir -p "$WORK/src"
  dpkg-source -x "$dsc" "$SRC" >>"$LOGS/$name.log" 2>&1 || die "$name: dpkg-source -x failed: see $LOGS/$name.log"
}

# ---- building ----
CROSS_ENV=(CC="$CC" AR="$HOST-ar" RANLIB="$HOST-ranlib" NM="$HOST-nm" STRIP="$HOST-strip"
  WINDRES="$HOST-windres" RC="$HOST-windres" DLLTOOL="$HOST-dlltool" OBJDUMP="$HOST-objdump"
  CFLAGS="-O2" PKG_CONFIG_LIBDIR="$PREFIX/lib/pkgconfig" PKG_CONFIG_PATH=)

# configure with the cross toolchain, into the prefix
xconfigure() {
  env "${CROSS_ENV[@]}" ./configure --host=$HOST --build="$(gcc -dumpmachine)" \
    --prefix="$PREFIX" --disable-dependency-tracking "$@"
}
xmake() { make -j"$JOBS" "$@"; }

# Make an installed .pc relocatable, fold Libs.private into Libs (the prefix is static),
# and add the defines a static library's users need.
fix_pc() {
  local pc=$PREFIX/lib/pkgconfig/$1 cflags=${2:-}
  [ -f "$pc" ] || die "$pc was not installed"
  awk -v P="$PREFIX" -v add="$cflags" '
    function rel(s) { while ((i = index(s, P)) > 0) s = substr(s, 1, i - 1) "${prefix}" substr(s, i + length(P)); return s }
    /^prefix=/ { lines[++n] = "prefix=${pcfiledir}/../.."; next }
    /^Libs\.private:/ { sub(/^Libs\.private:[ \t]*/, ""); priv = priv " " rel($0); next }
    { lines[++n] = rel($0) }
    END {
      for (k = 1; k <= n; k++) {
        l = lines[k]
        if (l ~ /^Libs:/) { # append the private libs it does not have yet
          sub(/[ \t]+$/, "", l)
          m = split(priv, w, /[ \t]+/)
          for (j = 1; j <= m; j++) if (w[j] != "" && index(" " l " ", " " w[j] " ") == 0) l = l " " w[j]
        }
        if (l ~ /^Cflags:/ && add != "" && index(l, add) == 0) l = l " " add
        print l
      }
    }' "$pc" >"$pc.tmp"
  mv "$pc.tmp" "$pc"
}

build_libsodium() {
  # The orig tarball is a git snapshot: generate configure as Debian does (dh --with
  # autoreconf); autogen.sh would download config.guess. Stack protector left out: it
  # would make every user link libssp.
  autoreconf -fi
  xconfigure --disable-shared --enable-static --disable-ssp --without-pthreads
  xmake -C src
  xmake -C src install
  make install-pkgconfigDATA
  fix_pc libsodium.pc -DSODIUM_STATIC
}

build_jansson() {
  autoreconf -fi
  xconfigure --disable-shared --enable-static
  xmake -C src
  xmake -C src install
  make install-pkgconfigDATA
  fix_pc jansson.pc
}

build_pcre2() {
  xconfigure --disable-shared --enable-static --enable-pcre2-8 --disable-pcre2-16 \
    --disable-pcre2-32 --enable-jit --disable-pcre2grep-jit --disable-pcre2grep-callout
  # only the 8-bit library: not pcre2grep, pcre2test or the POSIX wrapper
  xmake libpcre2-8.la
  make install-libLTLIBRARIES lib_LTLIBRARIES=libpcre2-8.la
  install -m 644 src/pcre2.h "$PREFIX/include/"
  make install-pkgconfigDATA pkgconfig_DATA=libpcre2-8.pc
  fix_pc libpcre2-8.pc -DPCRE2_STATIC
}

# Debian's semantic options (debian/rules), without its extensions (FTS, R*Tree, session,
# loadable extensions) that MoonTail does not use.
SQLITE_CFLAGS=(-O2 -DSQLITE_THREADSAFE=1 -DSQLITE_SECURE_DELETE -DSQLITE_ENABLE_COLUMN_METADATA
  -DSQLITE_LIKE_DOESNT_MATCH_BLOBS -DSQLITE_USE_URI=1 -DSQLITE_MAX_SCHEMA_RETRY=25
  -DSQLITE_MAX_VARIABLE_NUMBER=250000 -DSQLITE_ALLOW_ROWID_IN_VIEW -DSQLITE_OMIT_LOAD_EXTENSION)
build_sqlite3() {
  # The amalgamation is generated by the source tree's makefile with native tools
  # (lemon, mkkeywordhash, tclsh); then it is one cross-compiled file.
  mkdir native
  (cd native && ../configure --disable-tcl --disable-readline --disable-shared && make sqlite3.c sqlite3.h)
  mkdir win
  "$CC" "${SQLITE_CFLAGS[@]}" -c native/sqlite3.c -o win/sqlite3.o
  "$HOST-ar" rcs win/libsqlite3.a win/sqlite3.o
  install -d "$PREFIX/lib/pkgconfig" "$PREFIX/include"
  install -m 644 win/libsqlite3.a "$PREFIX/lib/"
  install -m 644 native/sqlite3.h src/sqlite3ext.h "$PREFIX/include/"
  cat >"$PREFIX/lib/pkgconfig/sqlite3.pc" <<EOF
prefix=$PREFIX
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: SQLite
Description: SQL database engine (static amalgamation, threadsafe; tools/win-deps.sh)
Version: ${PIN_UP[sqlite3]}
Libs: -L\${libdir} -lsqlite3
Cflags: -I\${includedir}
EOF
  fix_pc sqlite3.pc
}

build_curl() {
  # Debian's last two patches turn the tree into its GnuTLS and NSS flavours (a renamed
  # libcurl-gnutls/-nss); its rules pop them for the OpenSSL flavour, and so does this.
  patch -R -p1 <debian/patches/99_nss.patch
  patch -R -p1 <debian/patches/90_gnutls.patch
  # The tarball's configure is used: Debian's configure.ac patches only concern GSSAPI and
  # LDAP, both off here, and AM_MAINTAINER_MODE keeps make from regenerating it.
  xconfigure --disable-shared --enable-static --with-schannel --without-openssl \
    --enable-ipv6 --enable-threaded-resolver --disable-pthreads \
    --disable-ftp --disable-file --disable-ldap --disable-ldaps --disable-rtsp --disable-dict \
    --disable-telnet --disable-tftp --disable-pop3 --disable-imap --disable-smb --disable-smtp \
    --disable-gopher --disable-mqtt --disable-manual --disable-ntlm --disable-ntlm-wb \
    --disable-tls-srp --without-zlib --without-brotli --without-zstd --without-libpsl \
    --without-libidn2 --without-winidn --without-nghttp2 --without-ngtcp2 --without-nghttp3 \
    --without-quiche --without-msh3 --without-libssh2 --without-libssh --without-wolfssh \
    --without-librtmp --without-libgsasl --without-hyper --without-ca-bundle --without-ca-path \
    --without-ca-fallback --without-zsh-functions-dir --without-fish-functions-dir
  xmake -C lib
  xmake -C lib install
  xmake -C include install
  make install-pkgconfigDATA install-binSCRIPTS
  fix_pc libcurl.pc -DCURL_STATICLIB
}

build_libmicrohttpd() {
  # A DLL (LGPL), on W32 threads, so it needs no winpthreads DLL; libgcc is linked into it,
  # so it needs no libgcc_s DLL either. --with-threads=w32 cannot be used: 0.9.75's
  # configure tests for W32 threads only under "auto", and then errors out. "auto" picks
  # W32 threads on a native W32 host before pthreads; the check below makes sure it did.
  xconfigure --enable-shared --disable-static --disable-https --with-threads=auto \
    --disable-doc --disable-examples --disable-curl --disable-nls \
    LDFLAGS="-static-libgcc"
  grep -q '^#define MHD_USE_W32_THREADS 1' MHD_config.h
  xmake -C src/microhttpd
  xmake -C src/microhttpd install
  xmake -C src/include install
  make install-pkgconfigDATA
  rm -f "$PREFIX"/lib/libmicrohttpd.la
  fix_pc libmicrohttpd.pc
}

# the files a finished build leaves, checked beside the stamp
declare -A ARTIFACT=([libsodium]=lib/libsodium.a [jansson]=lib/libjansson.a
  [pcre2]=lib/libpcre2-8.a [sqlite3]=lib/libsqlite3.a [curl]=lib/libcurl.a
  [libmicrohttpd]=bin/libmicrohttpd-12.dll)

TOOLCHAIN_ID=
stamp_key() {
  local name=$1
  if [ -z "$TOOLCHAIN_ID" ]; then
    TOOLCHAIN_ID=$(dpkg-query -W -f='${Package}=${Version} ' gcc-mingw-w64-x86-64-posix \
      mingw-w64-x86-64-dev binutils-mingw-w64-x86-64 2>/dev/null || true)
  fi
  {
    printf '%s ' "$name" "${PIN_UP[$name]}" "${PIN_ORIG[$name]}" "${PIN_SHA[$name]}" "${PIN_DEB[$name]}"
    printf '\n%s\n' "$TOOLCHAIN_ID" "$PREFIX" "${CROSS_ENV[*]}" "${SQLITE_CFLAGS[*]}"
    declare -f "build_$name" xconfigure xmake fix_pc unpack
  } | sha256sum | cut -c1-32
}

is_cached() {
  local stamp=$STAMPS/$1.stamp
  [ $REBUILD = 0 ] && [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$(stamp_key "$1")" ] &&
    [ -e "$PREFIX/${ARTIFACT[$1]}" ]
}

build_one() {
  local name=$1 stamp=$STAMPS/$1.stamp key t0 secs cpu
  key=$(stamp_key "$name")
  t0=$(now)
  rm -f "$stamp"
  : >"$LOGS/$name.log"
  DEBVER=${DEBVER_OF[$name]}
  unpack "$name"
  msg "$name $DEBVER: building (log: $LOGS/$name.log)"
  # not under `if`, where bash would ignore set -e inside the build function; each traced
  # command carries the seconds since the build started
  local rc=0
  set +e
  (
    # shellcheck disable=SC2034 # read by PS4
    T0=${EPOCHREALTIME%[.,]*}
    PS4='+ [$((${EPOCHREALTIME%[.,]*} - T0))s] '
    set -ex
    cd "$SRC"
    "build_$name"
    times >"$WORK/src/$name.times" # the CPU time of the build's processes, on line 2
  ) >>"$LOGS/$name.log" 2>&1
  rc=$?
  set -e
  if [ $rc != 0 ]; then
    tail -n 30 "$LOGS/$name.log" >&2
    die "$name: build failed: see $LOGS/$name.log"
  fi
  [ -e "$PREFIX/${ARTIFACT[$name]}" ] || die "$name: ${ARTIFACT[$name]} missing after the build"
  rm -f "$PREFIX"/lib/*.la # libtool's, with absolute paths; nothing here reads them
  secs=$(elapsed "$t0")
  cpu=$(awk 'NR == 2 { n = split($0, t, /[ms ]+/); printf "%.0f", t[1] * 60 + t[2] + t[3] * 60 + t[4] }' \
    "$WORK/src/$name.times")
  {
    echo "$key"
    echo "debian=$DEBVER"
    echo "dsc_sha256=$(sha256_of "$WORK/dl/${name}_${DEBVER#*:}.dsc")"
    echo "orig_sha256=${PIN_SHA[$name]}"
    echo "seconds=$secs"
    echo "cpu_seconds=$cpu"
  } >"$stamp"
  msg "$name $DEBVER: built in $secs s ($cpu s of CPU)"
}

# Two lanes when there are two cores: configure scripts run on one core, and curl's alone
# takes about as long as the other five libraries' builds together. The weights are
# seconds of a cold build here, for a greedy split (curl + jansson | the rest).
declare -A DEBVER_OF
declare -A WEIGHT=([libsodium]=35 [jansson]=10 [pcre2]=15 [sqlite3]=30 [curl]=100
  [libmicrohttpd]=20)
build_all() {
  local -a need=() lane_a=() lane_b=()
  local lib wa=0 wb=0
  for lib in "${LIBS[@]}"; do is_cached "$lib" || need+=("$lib"); done
  [ ${#need[@]} -eq 0 ] && return 0
  # every download and pin check before any build, so a stale pin stops the run at once
  for lib in "${need[@]}"; do
    : >"$LOGS/$lib.fetch.log"
    fetch "$lib"
    DEBVER_OF[$lib]=$DEBVER
    msg "$lib: fetched $DEBVER"
  done
  if [ "$JOBS" -lt 2 ] || [ ${#need[@]} -lt 2 ]; then
    for lib in "${need[@]}"; do build_one "$lib"; done
    return 0
  fi
  while read -r lib; do
    if [ $wa -le $wb ]; then
      lane_a+=("$lib") wa=$((wa + WEIGHT[$lib]))
    else
      lane_b+=("$lib") wb=$((wb + WEIGHT[$lib]))
    fi
  done < <(for lib in "${need[@]}"; do echo "${WEIGHT[$lib]} $lib"; done | sort -rn | cut -d' ' -f2)
  msg "building in two lanes: ${lane_a[*]} | ${lane_b[*]}"
  local pa pb ra=0 rb=0
  (for lib in "${lane_a[@]}"; do build_one "$lib"; done) &
  pa=$!
  (for lib in "${lane_b[@]}"; do build_one "$lib"; done) &
  pb=$!
  wait $pa || ra=$?
  wait $pb || rb=$?
  if [ $ra != 0 ] || [ $rb != 0 ]; then die "a build failed (see above)"; fi
}

# ---- smoke check ----
SMOKE_DIR=$ROOT/tools/win-deps

# An HTTPS server on 127.0.0.1 (tools/win-deps/tls_server.py, which stops by itself after
# 60 s) with a fresh self-signed certificate; sets TLS_PORT, TLS_PIN, TLS_PID.
TLS_PID=
start_tls_server() {
  local dir=$1 i
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout "$dir/tls-key.pem" \
    -out "$dir/tls-cert.pem" >"$dir/tls-server.log" 2>&1 || return 1
  TLS_PIN=sha256//$(openssl x509 -in "$dir/tls-cert.pem" -pubkey -noout |
    openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64)
  python3 "$SMOKE_DIR/tls_server.py" "$dir/tls-cert.pem" "$dir/tls-key.pem" >"$dir/tls-port" \
    2>>"$dir/tls-server.log" &
  TLS_PID=$!
  for ((i = 0; i < 100; i++)); do
    TLS_PORT=$(head -n1 "$dir/tls-port")
    [ -n "$TLS_PORT" ] && return 0
    kill -0 "$TLS_PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
stop_tls_server() {
  if [ -n "$TLS_PID" ]; then
    kill "$TLS_PID" 2>/dev/null || true
    wait "$TLS_PID" 2>/dev/null || true
    TLS_PID=
  fi
}
trap stop_tls_server EXIT
run_check() {
  local out=$WORK/smoke pass=0 fail=0 name pcs src exe log expect
  mkdir -p "$out"
  export WINEDEBUG=-all
  # libmicrohttpd-12.dll is found through WINEPATH (z: is wine's view of /)
  export WINEPATH="Z:${PREFIX//\//\\}\\bin"
  expect=$(printf abc | sha256sum | cut -d' ' -f1)
  for name in sodium jansson pcre2 sqlite curl mhd tls; do
    case $name in
      sodium) pcs=libsodium ;;
      jansson) pcs=jansson ;;
      pcre2) pcs=libpcre2-8 ;;
      sqlite) pcs=sqlite3 ;;
      curl) pcs=libcurl ;;
      mhd) pcs="libmicrohttpd libcurl" ;;
      tls) pcs=libcurl ;;
    esac
    src=$SMOKE_DIR/smoke_$name.c exe=$out/smoke_$name.exe log=$out/smoke_$name.log
    local flags
    # shellcheck disable=SC2086 # pcs is a list of .pc names
    flags=$(PKG_CONFIG_LIBDIR=$PREFIX/lib/pkgconfig PKG_CONFIG_PATH='' pkg-config --cflags --libs $pcs)
    # -static makes ld look for libNAME.a only, so libmicrohttpd's import library (the DLL
    # is the one library not linked in) is named by its path, as CMake's find_library does
    flags=${flags//-lmicrohttpd/$PREFIX/lib/libmicrohttpd.dll.a}
    # shellcheck disable=SC2086 # flags is a list of words
    if ! "$CC" -std=c17 -O2 -Wall -Wextra -Werror -static -o "$exe" "$src" $flags >"$log" 2>&1; then
      echo "FAIL $name: compile/link: $(head -c 2000 "$log")"
      fail=$((fail + 1))
      continue
    fi
    local args=()
    [ $name = sodium ] && args=("$expect")
    if [ $name = tls ]; then
      start_tls_server "$out" || {
        echo "FAIL tls: the HTTPS server on 127.0.0.1 did not start: $(cat "$out/tls-server.log")"
        fail=$((fail + 1))
        continue
      }
      args=("https://127.0.0.1:$TLS_PORT/" "$TLS_PIN")
    fi
    if timeout 120 wine "$exe" "${args[@]}" 2>&1 </dev/null | tr -d '\r' >"$log" &&
      grep -q '^ok: ' "$log"; then
      sed 's/^/  /' "$log"
      pass=$((pass + 1))
    else
      echo "FAIL $name:"
      sed 's/^/  /' "$log"
      fail=$((fail + 1))
    fi
    stop_tls_server
  done
  # cmake/mingw-w64.cmake: pkg_check_modules, Threads and ctest's wine emulator
  local cb=$out/cmake-check
  rm -rf "$cb"
  if cmake -G Ninja -S "$SMOKE_DIR/cmake-check" -B "$cb" -DMT_WIN_PREFIX="$PREFIX" \
    -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/mingw-w64.cmake" >"$cb.log" 2>&1 &&
    cmake --build "$cb" >>"$cb.log" 2>&1 && (cd "$cb" && ctest -V) >>"$cb.log" 2>&1; then
    sed -n 's/^1: ok: /  ok: /p' "$cb.log"
    pass=$((pass + 1))
  else
    echo "FAIL cmake toolchain check: $cb.log"
    tail -n 20 "$cb.log" | sed 's/^/  /'
    fail=$((fail + 1))
  fi
  # what the DLL and the exe that uses it need from Windows (no MinGW runtime DLLs)
  local dll
  for dll in "$PREFIX/bin/libmicrohttpd-12.dll" "$out/smoke_mhd.exe"; do
    [ -f "$dll" ] || continue
    echo "  ${dll##*/} imports: $("$HOST-objdump" -p "$dll" | awk '/DLL Name:/ { printf "%s ", $3 }')"
    if "$HOST-objdump" -p "$dll" | grep -qiE 'DLL Name: (libwinpthread|libgcc_s|libssp)'; then
      echo "FAIL ${dll##*/} needs a MinGW runtime DLL"
      fail=$((fail + 1))
    fi
    stop_tls_server
  done
  echo "win-deps smoke: $pass passed, $fail failed"
  [ $fail = 0 ]
}

# ---- main ----
T_START=$(now)
ensure_host_tools
command -v "$CC" >/dev/null || die "$CC not found (package gcc-mingw-w64-x86-64-posix)"
declare -A WAS_CACHED
for lib in "${LIBS[@]}"; do is_cached "$lib" && WAS_CACHED[$lib]=1; done
build_all
for lib in "${LIBS[@]}"; do
  if [ -n "${WAS_CACHED[$lib]:-}" ]; then
    printf '  %-14s cached\n' "$lib"
  else
    printf '  %-14s %-20s %6s s, %4s s of CPU\n' "$lib" \
      "$(sed -n 's/^debian=//p' "$STAMPS/$lib.stamp")" \
      "$(sed -n 's/^seconds=//p' "$STAMPS/$lib.stamp")" \
      "$(sed -n 's/^cpu_seconds=//p' "$STAMPS/$lib.stamp")"
  fi
done
msg "prefix $PREFIX ready in $(elapsed "$T_START") s"
if [ $CHECK = 1 ]; then
  run_check
  msg "total $(elapsed "$T_START") s"
fi
