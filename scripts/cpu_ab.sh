#!/usr/bin/env bash
# CPU A/B between two commits in one process (tools/probes/cpu_ab_libs.cc): builds libflashback
# as a shared library at each revision (git worktrees under $WORK), the harness against this
# tree's bench library (target cpu_ab_libs of build/cpu), and times the two call by call. On a shared host whose speed moves
# within minutes this resolves a few percent where separate processes cannot.
#   bash scripts/cpu_ab.sh OLD_REV [NEW_REV]      (NEW_REV: the working tree when left out)
#   NAMES=cpu_decode_b4_L4k ROUNDS=40 THREADS=2 WORKLOADS=file.json AB_IN_CACHE=1 ...
# Needs the CPU build (build/cpu) for the harness's inputs; the public structs
# (PagedAttentionParams, Exec) must have the same layout at both revisions.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: cpu_ab.sh OLD_REV [NEW_REV]}
NEW=${2:-}
WORK=${WORK:-/tmp/flashback_ab}
mkdir -p "$WORK"

# Shared libflashback of a source tree into $WORK/$2.
build_so() {
  cmake --preset cpu -S "$1" -B "$WORK/$2" -DBUILD_SHARED_LIBS=ON \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON >"$WORK/$2.cmake.log"
  cmake --build "$WORK/$2" --target flashback -j"$(nproc)" >"$WORK/$2.build.log"
}
# A worktree of revision $1 at $WORK/src_$2 (recreated).
tree_at() {
  git worktree remove --force "$WORK/src_$2" 2>/dev/null || true
  git worktree add --detach "$WORK/src_$2" "$1" >/dev/null 2>&1
  echo "$WORK/src_$2"
}

build_so "$(tree_at "$OLD" a)" so_a
# B's build folder differs for a revision and for the working tree (a CMake cache keeps its source).
B=so_wt
if [[ -n "$NEW" ]]; then B=so_b; build_so "$(tree_at "$NEW" b)" so_b; else build_so "$PWD" so_wt; fi
for t in a b; do git worktree remove --force "$WORK/src_$t" 2>/dev/null || true; done
cmake --build build/cpu --target cpu_ab_libs -j"$(nproc)" >/dev/null
echo "A = $OLD, B = ${NEW:-working tree}"
build/cpu/tools/cpu_ab_libs "$WORK/so_a/libflashback.so" "$WORK/$B/libflashback.so" \
  "${NAMES:-cpu_decode_b4_L4k,cpu_decode_b1_L32k}" "${ROUNDS:-30}" "${THREADS:-0}" \
  ${WORKLOADS:+"$WORKLOADS"}
