"""Checks that the Python tests can fail: applies one deliberate bug at a time to a copy of the
package's flash_attn.py and runs the NumPy tests, which must catch every one.

    python tests/python/check_mutations.py PACKAGE_PARENT_DIR   (e.g. build/py/python)

PACKAGE_PARENT_DIR holds an importable `flashback` (with its built _C module); it is copied to a
temporary directory, never modified. Exits non-zero if a mutation survives."""

import os
import shutil
import subprocess
import sys
import tempfile

MUTATIONS = [
    ("window sides swapped",
     "window_left=int(window_size[0]),\n        window_right=int(window_size[1]),",
     "window_left=int(window_size[1]),\n        window_right=int(window_size[0]),"),
    ("new k/v not stored", "        _C.kv_store(k, v, loc, k_cache, v_cache, **common)\n", ""),
    ("cache_seqlens not grown by the new k/v",
     "        cache_seqlens = cache_seqlens + (cu_new[1:] - cu_new[:-1])\n", ""),
    ("varlen LSE not transposed",
     "lse_arg = fw.transpose(lse, 0, 1)  # the C++ API takes [total_q, H], any strides",
     "lse_arg = fw.reshape(lse, (total_q, heads))"),
    ("batch-form LSE not transposed",
     "fw.transpose(fw.reshape(lse_arg, (batch, seqlen_q, heads)), 1, 2)",
     "fw.reshape(lse_arg, (batch, heads, seqlen_q))"),
    ("k_descale dropped",
     "    k_descale = _per_batch_descale(fw, k_descale, batch, heads_kv) if fp8_cache else None",
     "    k_descale = None"),
    ("softcap dropped", "softcap=float(softcap or 0.0),\n        max_seqlen_q",
     "softcap=0.0,\n        max_seqlen_q"),
    ("appended slot off by one",
     "(t - fw.astype(cu_new[b], \"int64\"))", "(t - fw.astype(cu_new[b], \"int64\")) + 1"),
    ("causal forced on", "causal=bool(causal),\n        window_left", "causal=True,\n        window_left"),
    ("cache_batch_idx ignored",
     "page_table = fw.reshape(fw.astype(cache_batch_idx, \"int32\"), (batch, 1))",
     "page_table = fw.reshape(fw.arange(0, batch, 1, \"int32\", q), (batch, 1))"),
]


def main():
    src = os.path.abspath(sys.argv[1])
    tests = os.path.dirname(os.path.abspath(__file__))
    survived = 0
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.join(src, "flashback"), os.path.join(tmp, "flashback"))
        target = os.path.join(tmp, "flashback", "flash_attn.py")
        original = open(target).read()
        env = dict(os.environ, PYTHONPATH=tmp)
        for name, old, new in MUTATIONS:
            assert old in original, f"mutation no longer applies: {name}"
            open(target, "w").write(original.replace(old, new))
            r = subprocess.run([sys.executable, "-m", "pytest", tests, "-q", "-x", "-p",
                                "no:cacheprovider", "-k", "not torch"],
                               capture_output=True, text=True, env=env, cwd=tmp)
            caught = r.returncode != 0
            survived += not caught
            print(f"{'caught  ' if caught else 'SURVIVED'} {name}")
        open(target, "w").write(original)
    print(f"{len(MUTATIONS) - survived} passed, {survived} failed")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
