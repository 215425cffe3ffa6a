// Decode (groups of 4 q rows per KV head, bf16 q and K/V) on AVX512-BF16's VDPBF16PS, for the
// hosts that have it without AMX (Zen 4 and later; Cooper Lake): each instruction multiplies 16
// pairs of bf16 and adds both products to 16 fp32 lanes, twice the multiply-adds of an fp32 FMA
// and no bf16 -> fp32 widening. Not a Highway target (Highway 1.0's bf16 dot products widen):
// one translation unit built with the AVX512-BF16 target attribute, called by the decode path
// of attention_kernel.cc from its AVX-512 target when dpbf16::usable() says so; everywhere else
// (no AVX512-BF16, a Highway target below AVX-512, FLASHBACK_CPU_DPBF16=0) the fp32 paths run.
//
// Scores: raw bf16 q against K's rows in place (products exact in fp32), the scale applied per
// row after the lane sums. P·V: P rounded to bf16 (as the AMX path and the GPU kernels have it),
// two keys' V rows interleaved element by element (an unpack per 32 columns and key pair), so O
// comes out in a column order of its own (unsplit_columns makes it natural).
//
// Why: on a Zen 4 host the fp32 path ran decode at ~60 % of the fp32 FMA peak with K/V in L3;
// this path takes 0.78x its time there and 0.97x from DRAM, where moving K and V through the
// core, not arithmetic, holds decode (PERFORMANCE_CPU.md, session 43).
#pragma once

#include <cstdint>

#include "cpu/fast/next_rows.h"

namespace flashback::cpu_fast::dpbf16 {

/// The CPU has AVX512-F, -BW and -BF16, the OS saves the ZMM state, and FLASHBACK_CPU_DPBF16 is
/// not "0".
bool usable();

/// Key pairs per P·V block (8 keys: pv_tile_pairs' blocks).
inline constexpr int64_t kBlockPairs = 4;

/// 32-bit weight pairs of pv_tile's P stage for `ra` rows and a tile of `keys` keys.
inline int64_t pstage_words(int64_t keys, int64_t ra) {
  return (keys + 2 * kBlockPairs - 1) / (2 * kBlockPairs) * kBlockPairs * ra;
}

/// Raw q.k (times row_scale[r]) of tile keys [j0, j1) for `heads` KV heads of `head_rows` q rows
/// each (a multiple of 4): row r = g * head_rows + i's raw bf16 q at q + r * dims (`dims` a
/// multiple of 32), key j's row of head g at k[j] + g * k_head_bytes. Score of row r, key j goes
/// to st[j * ra + r]. Keys are paired as in scores_tile_pairs (key w of the tile's first half
/// with key w of its second half: K read as two address-ordered runs), each pair against every
/// group; each score's bits do not depend on its partner. Group by group over the whole tile
/// instead (a group's q held in registers) took ~10 % less time in isolation but ~7 % more from
/// DRAM (PERFORMANCE_CPU.md, session 43). `next` takes `heads` rows per key: with rows of 2 *
/// dims bytes for K and V, a pair's rows a line per 32 dims inside its dot products, else a
/// step before each group.
void scores_tile(const uint16_t* q, int64_t dims, int64_t head_rows, int64_t heads,
                 const void* const* k, int64_t k_head_bytes, int64_t j0, int64_t j1, float* st,
                 int64_t ra, const float* row_scale, NextRows& next);

/// O += P V over tile keys [j0, j1) for `heads` KV heads of `head_rows` rows each (a multiple of
/// 4): the weight of row r, key j at st[j * ra + r] (rounded to bf16 into `pstage`,
/// pstage_words(j1 - j0, ra) words), key j's V row of head g at v[j] + g * v_head_bytes (bf16,
/// `dv` elements, a multiple of 64, 2 dv bytes at most NextRows::kSpareBytes), O's row r at o +
/// r * os in this path's column order (unsplit_columns). Keys go in pv_tile_pairs' blocks (S =
/// ceil(n / 8) blocks, block w holding keys j0 + w, j0 + w + S, ...: with the heads of a slot
/// adjacent in memory each 4 KB page of V is read by one ascending run), a block's keys in pairs
/// of consecutive members whose V rows are interleaved by an unpack per 32 columns; a pair's
/// missing second key weighs 0 against a row of zeros. Within a block, head by head, 4 rows and
/// 64 columns of O in registers. Head by head over the whole tile instead (O through L1 once per
/// head, not once per block) took ~25 % less time in cache but ~15 % more from DRAM
/// (PERFORMANCE_CPU.md, session 43). Each O element's operation sequence depends only on n.
/// `next` takes an even share of its remaining slots before each (block, head).
void pv_tile(const float* st, int64_t ra, int64_t head_rows, int64_t heads, const void* const* v,
             int64_t v_head_bytes, int64_t j0, int64_t j1, float* o, int64_t os, int64_t dv,
             uint32_t* pstage, NextRows& next);

/// One O row of pv_tile's column order back to natural order, in place. Within each 32 columns,
/// columns 8 L + i and 8 L + 4 + i (L, i < 4) sit at 4 L + i and 16 + 4 L + i.
void unsplit_columns(float* o, int64_t dv);

}  // namespace flashback::cpu_fast::dpbf16
