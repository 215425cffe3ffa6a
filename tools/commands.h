// Subcommands of the `flashback` command-line tool. Each returns the process exit code.
#pragma once

namespace flashback::tools {

int run_check(int argc, char** argv);  // tools/check.cc
int run_bench(int argc, char** argv);  // tools/bench.cc

}  // namespace flashback::tools
