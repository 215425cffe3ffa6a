// Placeholder linked only while src/bench (the benchmark library) is absent from the tree.
#include <cstdio>

#include "commands.h"

namespace flashback::tools {
int run_bench(int, char**) {
  std::fprintf(stderr, "flashback bench: this build has no benchmark library (src/bench)\n");
  return 2;
}
}  // namespace flashback::tools
