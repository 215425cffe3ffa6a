#!/usr/bin/env python3
"""Breaks each SPEC.md §2 rule in the oracle once and checks that the oracle tests catch it.

Copies the sources to a scratch directory, applies one textual mutation at a time to the oracle
(src/cpu/reference.*, or the validator for the default scale), rebuilds test_reference and expects
it to FAIL. Prints one line per mutation; exits non-zero if any mutation survives.
Usage: python3 tests/oracle_mutations.py [--keep]  (takes a few minutes on 2 cores)
"""
import os, shutil, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REF, HDR, VAL = "src/cpu/reference.cc", "src/cpu/reference.h", "src/common/validate.cc"
MUTATIONS = [  # (rule, file, original text, mutated text)
    ("causal mask", HDR, "if (causal && pos < hi) hi = pos;", ""),
    ("bottom-right alignment", HDR, "const int64_t pos = kv_len - q_len + i;", "const int64_t pos = i;"),
    ("window left bound", HDR, "pos - window_left > lo) lo = pos - window_left;", "pos - window_left - 1 > lo) lo = pos - window_left - 1;"),
    ("window right bound", HDR, "if (window_right >= 0 && pos + window_right < hi) hi = pos + window_right;", ""),
    ("softcap", REF, "return softcap > 0 ? softcap * std::tanh(logit / softcap) : logit;", "return logit;"),
    ("GQA head mapping", REF, "const int64_t g = h / group;\n        const double kd", "const int64_t g = h % s.heads_kv;\n        const double kd"),
    ("fp8 k descale", REF, "load_as_double(p.k_cache, cache_offset(p.k_cache, P, slot, g, d)) * kd;", "load_as_double(p.k_cache, cache_offset(p.k_cache, P, slot, g, d));"),
    ("fp8 v descale", REF, "return load_as_double(p.v_cache, cache_offset(p.v_cache, P, slots[t], g, d)) * vd;", "return load_as_double(p.v_cache, cache_offset(p.v_cache, P, slots[t], g, d));"),
    ("MLA qv term", REF, "for (int64_t d = 0; d < s.head_dim_qv; ++d)", "for (int64_t d = 0; d < 0; ++d)"),
    ("LSE value", REF, "denom > 0 ? m + std::log(denom) : kNegInf", "denom > 0 ? std::log(denom) : kNegInf"),
    ("empty row LSE -inf", REF, "denom > 0 ? m + std::log(denom) : kNegInf", "denom > 0 ? m + std::log(denom) : 0.0"),
    ("empty row zeros", REF, "denom > 0 ? acc[d] / denom : 0.0", "denom > 0 ? acc[d] / denom : 1.0"),
    ("default softmax scale", VAL, "double(s.head_dim + s.head_dim_qv)", "double(s.head_dim)"),
    ("page-id addressing", REF, "* P + pos % P;", "* P;"),
    ("kv_start offset", REF, "const int64_t pos = start + t;", "const int64_t pos = t;"),
    ("merge: +inf is empty", REF, "if (std::isinf(b)) b = kNegInf;", ""),
    ("kv store fp8 scale", REF, "is_fp8(cache.dtype) ? scale : 1.0f", "1.0f"),
]

def run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

def main():
    scratch = tempfile.mkdtemp(prefix="fb-mut-")
    src = os.path.join(scratch, "src")
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns("build*", ".git", ".venv", "python", "src/cuda"))
    build = os.path.join(scratch, "build")
    r = run(["cmake", "-S", src, "-B", build, "-DFLASHBACK_CUDA=OFF", "-DFLASHBACK_TOOLS=OFF"], scratch)
    if r.returncode: sys.exit(r.stdout)
    survived = 0
    for rule, rel, old, new in MUTATIONS:
        path = os.path.join(src, rel)
        text = open(path).read()
        if text.count(old) != 1:
            print(f"{rule:28s} ERROR: pattern not found once in {rel}"); survived += 1; continue
        open(path, "w").write(text.replace(old, new))
        try:
            b = run(["cmake", "--build", build, "--target", "test_reference", "-j2"], scratch)
            if b.returncode:
                print(f"{rule:28s} ERROR: mutant does not compile"); survived += 1; continue
            t = run([os.path.join(build, "tests", "cpu", "test_reference")], scratch)
            failing = [l.split("]", 1)[1].split()[0] for l in t.stdout.splitlines() if l.startswith("[  FAILED  ]") and "." in l]
            if t.returncode:
                print(f"{rule:28s} caught by {', '.join(sorted(set(failing)))}")
            else:
                print(f"{rule:28s} SURVIVED"); survived += 1
        finally:
            open(path, "w").write(text)
    if "--keep" not in sys.argv: shutil.rmtree(scratch)
    print(f"{len(MUTATIONS) - survived} of {len(MUTATIONS)} mutations caught")
    sys.exit(1 if survived else 0)

if __name__ == "__main__":
    main()
