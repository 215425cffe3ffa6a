"""Unpacks a staged GPU package on the GPU machine: build/gpupkg/pkg.tar.xz into DIR, and each
build/gpupkg/NAME.tar.xz named after it (a baseline or variant flashback binary) into DIR/NAME.
Usage: python3 scripts/gpu_unpack.py DIR [NAME ...]"""
import sys
import tarfile

out = sys.argv[1]
tarfile.open("build/gpupkg/pkg.tar.xz").extractall(out)
for name in sys.argv[2:]:
    tarfile.open(f"build/gpupkg/{name}.tar.xz").extractall(f"{out}/{name}")
