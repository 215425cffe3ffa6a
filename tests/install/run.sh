#!/usr/bin/env bash
# run.sh BUILD_DIR WORK_DIR CONSUMER_SRC: install BUILD_DIR to WORK_DIR/prefix, build the consumer.
set -euo pipefail
build=$1 work=$2 src=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/consumer" -j 2 >/dev/null
"$work/consumer/consumer"
