// The `flashback` command line: `flashback check` (randomized self-check, the README's main job)
// and `flashback bench` (the standard workloads with roofline fractions).
#include <cstdio>
#include <cstring>
#include <exception>

#include "commands.h"
#include "flashback/error.h"

namespace {
void usage() {
  std::printf(
      "usage: flashback <command> [options]\n"
      "  check   randomized self-check against the reference (run `flashback check --help`)\n"
      "  bench   standard workloads with roofline fractions (run `flashback bench --help`)\n");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  try {
    if (!std::strcmp(argv[1], "check")) return flashback::tools::run_check(argc - 1, argv + 1);
    if (!std::strcmp(argv[1], "bench")) return flashback::tools::run_bench(argc - 1, argv + 1);
  } catch (const flashback::Error& e) {
    std::fprintf(stderr, "flashback: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashback: internal error: %s\n", e.what());
    return 3;
  }
  std::fprintf(stderr, "flashback: unknown command '%s'\n", argv[1]);
  usage();
  return 2;
}
