// The decode tile kernels (decode-inl.h: scores_tile_pairs, pv_tile_pairs) for bf16 K/V (and fp8
// staged as bf16), read as even/odd pairs, compiled once per Highway target in a translation unit
// of their own (decode-inl.h says why).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/fast/tile_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "cpu/fast/decode-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashback::cpu_fast::HWY_NAMESPACE {

void scores_tile_bf16(const float* q, int64_t qs, int64_t head_rows, int64_t heads, Rows k,
                      int64_t k_head_bytes, int64_t len, int64_t j0, int64_t j1, float* s,
                      int64_t skey, NextRows& next) {
  scores_tile_pairs<Bf16Pairs>(q, qs, head_rows, heads, k, k_head_bytes, len, j0, j1, s, skey,
                               next);
}

void pv_tile_bf16(const float* p, int64_t ra, int64_t head_rows, int64_t heads, Rows v,
                  int64_t v_head_bytes, int64_t j0, int64_t j1, float* o, int64_t os, int64_t len,
                  NextRows& next) {
  pv_tile_pairs<Bf16Pairs>(p, ra, head_rows, heads, v, v_head_bytes, j0, j1, o, os, len, next);
}

}  // namespace flashback::cpu_fast::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
