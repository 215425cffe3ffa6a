// The library's environment switches (FLASHBACK_PREFILL_KERNEL, FLASHBACK_PREFILL_PAIRS,
// FLASHBACK_PREFILL_TMA, FLASHBACK_PREFILL_PINGPONG, FLASHBACK_PREFILL_STAGED_OUT,
// FLASHBACK_DECODE_KERNEL, FLASHBACK_DECODE_SMEM_BLOCK, FLASHBACK_DECODE_ORDER,
// FLASHBACK_DECODE_NARROW, FLASHBACK_DECODE_SPLITS, FLASHBACK_MLA_NARROW, FLASHBACK_COMBINE_PDL:
// kernel choices for tests and A/B timing, README "The two commands"). Callers read each once per
// process (a function-local static).
#pragma once

#include <cstdlib>
#include <string>

namespace flashback::cuda {

/// The variable's value, or "" when it is not set.
inline std::string env_value(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace flashback::cuda
