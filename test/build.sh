#!/usr/bin/env bash
# build.sh — the build's own contract (issue 17, item 10), on a copy of the source tree:
# `make DEBUG=1` after a release build builds the sanitizer binary into build/debug and
# leaves ./pptrain the release binary; both builds are up to date afterwards; `make test
# DEBUG=1` runs the scripts against build/debug/pptrain.
set -u
# the builds below choose their own variables: none from a `make test DEBUG=1` around us
unset MAKEFLAGS MFLAGS MAKELEVEL DEBUG V
# and no CUDA: the contract here is the CPU builds' (build/cpu, build/debug); the CUDA
# library is the same for both (build/cuda) and make test's own build has just built it
# (test/cuda.sh checks it). nvcc would add ~40 s to each run of this script.
export NVCC=
tmp=$(mktemp -d /tmp/pptrain-build.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish

# the sources only: no build outputs, no runs, no git metadata
tar --exclude=./build --exclude=./pptrain --exclude=./runs --exclude=./carry --exclude=./.git -cf - . |
  tar -xf - -C "$tmp"
cd "$tmp" || exit 1
links() { grep -c '^  LD ' "$1"; } # link lines in a build log

make -j2 all >release.log 2>&1
check "release build" "[ $? -eq 0 ] && [ -x pptrain ]"
release=$(cksum <pptrain)
# [Note: plot module loading] in src/plot/plot_load.c
check "make all builds the plot module, and pptrain links no cairo" \
  "[ -f build/cpu/libpptrain_plot.so ] && ! ldd pptrain | grep -qE 'libcairo|libfontconfig'"

make -j2 DEBUG=1 all >debug.log 2>&1
check "make DEBUG=1 after a release build builds build/debug/pptrain" "[ $? -eq 0 ] && [ -x build/debug/pptrain ]"
check "./pptrain stays the release binary" "[ \"\$(cksum <pptrain)\" = \"$release\" ]"
check "the debug binary has the sanitizers" "nm build/debug/pptrain 2>/dev/null | grep -q __asan_init || ldd build/debug/pptrain | grep -q libasan"
check "the debug binary runs" "build/debug/pptrain --help >/dev/null 2>&1"
check "the debug build has its own plot module, with the sanitizers" \
  "ldd build/debug/libpptrain_plot.so | grep -q libasan"

make DEBUG=1 all >debug2.log 2>&1
check "a second make DEBUG=1 links nothing" "[ \$(links debug2.log) -eq 0 ]"
make all >release2.log 2>&1
check "a make after the debug build links nothing" "[ \$(links release2.log) -eq 0 ] && [ \"\$(cksum <pptrain)\" = \"$release\" ]"

rm -rf data/tiny
make data >data.log 2>&1
check "make data runs the release binary" "[ $? -eq 0 ] && [ -s data/tiny/train.bin ]"

make -n test DEBUG=1 >dry.log 2>&1
check "make test DEBUG=1 runs the scripts against build/debug/pptrain" "grep -q 'PPTRAIN=./build/debug/pptrain ' dry.log"
make -n test >dry-release.log 2>&1
check "make test runs the scripts against ./pptrain" "grep -q 'PPTRAIN=./pptrain ' dry-release.log"
check "make test DEBUG=1 builds the test binaries in build/debug" "grep -q 'build/debug/test/test_model' dry.log && ! grep -q 'build/cpu/' dry.log"

finish
