// Decode (few q rows per KV head, bf16 q and K/V) on Intel AMX tiles, for the hosts that have
// them (Sapphire Rapids and later): the scores (TDPBF16PS on K rows in place and the packed q)
// and P·V (P rounded to bf16 as the A operand, V's rows in place as B). Not a Highway target: one
// translation unit built with AMX target attributes, called by the decode path of
// attention_kernel.cc where amx::usable() says so; everywhere else (no AMX, no kernel
// permission, not x86-64, FLASHBACK_CPU_AMX=0) the Highway score and P·V paths run.
//
// Why: on AVX-512 the score loop shares the core's two 512-bit ports between its FMAs, the
// bf16 -> fp32 widening and the lane sums, and ran near 40 % of the FMA peak. On the tile unit
// decode's compute takes ~70 % of the AVX-512 path's time in L2 and ~85 % in L3; from DRAM,
// where the misses a core keeps in flight set the pace, it gained 2-6 % (PERFORMANCE_CPU.md,
// session 29). P·V reads V's rows in place (session 36: each q row as two A rows, one per
// element of V's column pairs) instead of staging V as interleaved key pairs: decode in L3
// 2.11 -> 1.81 ms (cpu_decode_b4_L4k --in-cache), from DRAM equal.
#pragma once

#include <cstdint>

#include "cpu/fast/next_rows.h"

namespace flashback::cpu_fast::amx {

/// The CPU has AMX-TILE and AMX-BF16, the kernel granted this process the tile state
/// (arch_prctl, asked once), and FLASHBACK_CPU_AMX is not "0".
bool usable();

/// Keys scored per tile row block (the A tile's rows).
inline constexpr int64_t kKeys = 16;
/// Most q rows per KV head (the columns of a scores tile; two rows each of P·V's A and C tiles).
inline constexpr int64_t kMaxRows = 8;
/// bf16 elements of pv_tile's P stage.
inline constexpr int64_t kPStage = 2 * 2 * kMaxRows * 32;
/// Most value columns (unsplit_columns).
inline constexpr int64_t kMaxDv = 1024;

/// Configures this thread's tiles for `head_rows` q rows per KV head (1-8); `end` releases them.
void begin(int64_t head_rows);
void end();

/// Packs one KV head's q rows (raw bf16, row r at q[r], `dims` a multiple of 32) as the B
/// operand: [dims / 32][16 pairs][head_rows][2].
void pack_q(const uint16_t* const* q, int64_t head_rows, int64_t dims, uint16_t* qb);

/// Raw q.k (times `row_scale[r]`) of tile keys [j0, j1) (tile-local, within [0, 32)) for
/// `heads` KV heads: key j's row of head g at k[j] + g * k_head_bytes (bf16, `dims` elements);
/// head g's packed q at qb + g * dims * head_rows. Score of row r = g * head_rows + i, key j
/// goes to st[j * ra + r]. Keys come 16 at a time in place when their rows are evenly spaced,
/// else through `stage` (16 * heads * dims bf16, zero-filled past the range).
void scores_tile(const uint16_t* qb, int64_t heads, int64_t head_rows, int64_t dims,
                 const void* const* k, int64_t k_head_bytes, int64_t j0, int64_t j1, float* st,
                 int64_t ra, const float* row_scale, uint16_t* stage, NextRows* next);

/// O += P V over tile keys [j0, j1) (within [0, 32)) for one KV head's `head_rows` rows (4 or 8):
/// the weight of row i, key j at st[j * ra + i] (rounded to bf16), key j's V row at v[j] + v_off
/// bytes (bf16, `dv` elements, a multiple of 64), O's row i at o + i * os (fp32; os even and at
/// least dv) in split column order: column 2n at o[n], column 2n + 1 at o[os / 2 + n] (made
/// natural by unsplit_columns). V's rows are the B operand as they are (a row's adjacent column
/// pairs), in place when a half tile's 16 keys are evenly spaced and all in range, else copied
/// through `vstage` (32 * dv bf16); P goes through `pstage` (kPStage bf16) as two A rows per q
/// row, its weights in the pairs' even and in their odd elements.
void pv_tile(const float* st, int64_t ra, int64_t head_rows, const void* const* v, int64_t v_off,
             int64_t j0, int64_t j1, float* o, int64_t os, int64_t dv, uint16_t* vstage,
             uint16_t* pstage, NextRows* next);

/// One O row of pv_tile's split column order back to natural order, in place (zeros past dv).
void unsplit_columns(float* o, int64_t os, int64_t dv);

}  // namespace flashback::cpu_fast::amx
