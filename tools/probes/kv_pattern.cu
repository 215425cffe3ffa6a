// Read-only probes of decode_b64_L8k's K/V access pattern, to tell whether the gap between the
// decode kernel (~91 % of the read ceiling on the H200) and FlashInfer (~95 %) lies in the
// pattern or in how the kernel issues its copies. Nothing here computes attention: each kernel
// reads exactly the bytes decode reads (64 requests x 8192 keys x 8 KV heads x 256-byte bf16 rows,
// K and V, pages of 16 keys placed at random as in the benchmark) and folds them into a
// never-taken store. Standalone (not part of the library's build):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a tools/probes/kv_pattern.cu -o kvp
//   ./kvp            (prints one line per variant: best-of-N time and TB/s)
// Variants:
//   contig        every byte of both caches in address order (the read ceiling on these buffers)
//   ld_head U     one CTA per (request, KV head, split) as decode's grid; each warp loads its 16
//                 keys of a 64-key tile straight into registers, U tiles in flight
//   cp_head S,L   the same grid through a cp.async pipeline of S stages (32 KB each), L lanes per
//                 key row per instruction (decode: S = 3, L = 8, two CTAs per SM)
//   cp_token S,L  the same, but each CTA reads every head of a token range (whole 2 KB rows)
//   ...pad272     stage rows padded to 272 bytes as decode's; ...swizzle: 256-byte rows, chunks
//                 XOR-swizzled by key
//   ...zfill/pred the copy with a src-size operand / predicated (paged.cuh's two forms)
//   ...seq        pages in order instead of at random; ...bfirst: CTAs of one head and split for
//                 every request launched first (decode launches a request's heads together)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kB = 64, kL = 8192, kHk = 8, kRow = 256, kP = 16;
constexpr int kPages = kB * kL / kP;
constexpr size_t kPageBytes = size_t{kP} * kHk * kRow;  // 32 KB
constexpr size_t kCacheBytes = kPages * kPageBytes;     // 1 GiB per cache

__device__ unsigned g_sink;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__device__ __forceinline__ unsigned fold(uint4 a) { return a.x ^ a.y ^ a.z ^ a.w; }

__global__ void contig(const uint4* k, const uint4* v, size_t n) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    acc ^= fold(__ldcs(k + i)) ^ fold(__ldcs(v + i));
  if (acc == 0x9e3779b9u) g_sink = acc;
}

// Which (request, KV head or head group, split) this CTA reads. bfirst: requests vary fastest.
struct Cta {
  int b, h, s;
};
__device__ __forceinline__ Cta cta_of(int splits, bool bfirst) {
  int i = static_cast<int>(blockIdx.x);
  Cta c;
  if (!bfirst) {
    c.s = i % splits, i /= splits;
    c.h = i % kHk, c.b = i / kHk;
  } else {
    c.b = i % kB, i /= kB;
    c.h = i % kHk, c.s = i / kHk;
  }
  return c;
}

// Byte offset of key k (0 .. keys per CTA) of a CTA: head mode, key t of head h; token mode,
// head k % 8 of token k / 8 (a CTA's keys are then whole 2 KB token rows, in address order).
template <bool TOKEN>
__device__ __forceinline__ size_t key_off(const int* row, int h, int t0, int k) {
  const int t = TOKEN ? t0 + (k >> 3) : t0 + k, hh = TOKEN ? (k & 7) : h;
  const int pg = __ldg(row + t / kP);
  return ((size_t(pg) * kP + (t % kP)) * kHk + hh) * kRow;
}

template <int U>
__global__ void __launch_bounds__(128)
    ld_head(const char* K, const char* V, const int* table, int splits, bool bfirst) {
  const Cta c = cta_of(splits, bfirst);
  const int per = kL / splits, t0 = c.s * per;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane >> 4, ch = lane & 15;
  const int* row = table + c.b * (kL / kP);
  unsigned acc = 0;
  for (int k0 = warp * 16; k0 < per; k0 += 64 * U) {
    uint4 r[U][16];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const size_t off = key_off<false>(row, c.h, t0, k0 + u * 64 + 2 * i + sub) + ch * 16;
        r[u][i] = __ldcs(reinterpret_cast<const uint4*>(K + off));
        r[u][8 + i] = __ldcs(reinterpret_cast<const uint4*>(V + off));
      }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int i = 0; i < 16; ++i) acc ^= fold(r[u][i]);
  }
  if (acc == 0x9e3779b9u) g_sink = acc;
}

// The three forms of a 16-byte async copy: 0, plain; 1, with a src-size operand (zero-fills
// past it: SASS LDGSTS...ZFILL); 2, predicated, zeros stored directly when `bytes` is 0.
template <int FORM>
__device__ __forceinline__ void cp16(uint32_t dst, const void* src, int bytes) {
  if constexpr (FORM == 0)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
  else if constexpr (FORM == 1)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes));
  else
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n"
        " @p cp.async.cg.shared.global [%0], [%1], 16;\n"
        " @!p st.shared.v4.u32 [%0], {0, 0, 0, 0};\n}\n" ::"r"(dst),
        "l"(src), "r"(bytes));
}

// Each warp streams its own 16 keys of every 64-key tile through S stages (decode's per-warp
// pipeline): wait for the oldest stage, touch it, issue the stage S - 1 tiles ahead. The page
// table is read one tile before its copies are issued.
// Stage layouts: 0, key rows of 256 bytes back to back; 1, rows padded to 272 bytes (decode's
// KRAW / VRAW, which keep ldmatrix's 8-row phases off one bank group); 2, 256-byte rows with the
// 16-byte chunks XOR-swizzled by key % 8 (the usual alternative to the padding).
template <int LAYOUT>
constexpr int kPitch = LAYOUT == 1 ? 272 : 256;
template <int LAYOUT>
__device__ __forceinline__ uint32_t stage_at(int key, int chunk) {
  return key * kPitch<LAYOUT> + (LAYOUT == 2 ? (chunk ^ (key & 7)) : chunk) * 16;
}

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr, bool trans) {
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// READ: each warp also reads its stage as decode's narrow form does (8 ldmatrix.x4 over its 16
// K rows, 8 ldmatrix.x4.trans over its 16 V rows per tile), so the copies meet shared-memory reads.
template <int S, int LPK, bool TOKEN, int FORM = 0, int LAYOUT = 0, bool READ = false>
__global__ void __launch_bounds__(128)
    cp_kernel(const char* K, const char* V, const int* table, int splits, bool bfirst, int bytes) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int KPI = 32 / LPK, KEYS = 16 / KPI, CH = 16 / LPK;  // per lane: keys, chunks per row
  const Cta c = cta_of(splits, bfirst);
  const int per = kL / splits, ntiles = per / 64;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Token mode: CTA h of a request's kHk x splits reads tokens [t0, t0 + per / kHk), all heads.
  const int t0 = TOKEN ? (c.h * splits + c.s) * (per / kHk) : c.s * per;
  const int* row = table + c.b * (kL / kP);
  constexpr int WB = 32 * kPitch<LAYOUT>, SB = 4 * WB;  // bytes per warp, per stage
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + warp * WB;
  size_t off[KEYS];
  auto locate = [&](int j) {
#pragma unroll
    for (int i = 0; i < KEYS; ++i)
      off[i] = key_off<TOKEN>(row, c.h, t0, j * 64 + warp * 16 + lane / LPK + KPI * i);
  };
  auto issue = [&](int j) {
    const uint32_t dst = base + (j % S) * SB;
#pragma unroll
    for (int i = 0; i < KEYS; ++i) {
      const int key = lane / LPK + KPI * i;
#pragma unroll
      for (int q = 0; q < CH; ++q) {
        const int chunk = lane % LPK + LPK * q;
        const uint32_t at = stage_at<LAYOUT>(key, chunk);
        cp16<FORM>(dst + at, K + off[i] + chunk * 16, bytes);
        cp16<FORM>(dst + WB / 2 + at, V + off[i] + chunk * 16, bytes);
      }
    }
  };
  unsigned acc = 0;
  for (int j = 0; j < S - 1; ++j) {
    if (j < ntiles) locate(j), issue(j);
    asm volatile("cp.async.commit_group;\n");
  }
  for (int j = 0; j < ntiles; ++j) {
    if (j + S - 1 < ntiles) locate(j + S - 1);  // table reads before the wait
    asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 2));
    __syncwarp();
    acc ^= reinterpret_cast<const unsigned*>(smem + warp * WB + (j % S) * SB)[lane];
    if constexpr (READ) {
      const uint32_t st = base + (j % S) * SB;
      const int kr = (lane & 7) + ((lane >> 3) & 1) * 8, kh = lane >> 4;
      const int vr = (lane & 7) + (lane >> 4) * 8, vh = (lane >> 3) & 1;
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) {
        uint32_t r[4], v[4];
        ldsm4(r, st + stage_at<LAYOUT>(kr, ks * 2 + kh), false);
        ldsm4(v, st + WB / 2 + stage_at<LAYOUT>(vr, ks * 2 + vh), true);
        acc ^= r[0] ^ r[1] ^ r[2] ^ r[3] ^ v[0] ^ v[1] ^ v[2] ^ v[3];
      }
    }
    __syncwarp();
    if (j + S - 1 < ntiles) issue(j + S - 1);
    asm volatile("cp.async.commit_group;\n");
  }
  asm volatile("cp.async.wait_group 0;\n");
  if (acc == 0x9e3779b9u) g_sink = acc;
}

struct Result {
  std::string name;
  float best_ms;
};

template <typename F>
float time_best(F&& launch, int reps) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  for (int i = 0; i < 3; ++i) launch();
  float best = 1e30f;
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(a), "record");
    launch();
    check(cudaEventRecord(b), "record");
    check(cudaEventSynchronize(b), "sync");
    float ms = 0.f;
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    best = std::min(best, ms);
  }
  check(cudaGetLastError(), "launch");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device");
  const int sms = prop.multiProcessorCount;
  char *K = nullptr, *V = nullptr;
  int *table = nullptr, *table_seq = nullptr;
  check(cudaMalloc(&K, kCacheBytes), "malloc K");
  check(cudaMalloc(&V, kCacheBytes), "malloc V");
  check(cudaMemset(K, 1, kCacheBytes), "memset");
  check(cudaMemset(V, 2, kCacheBytes), "memset");
  std::vector<int> pages(kPages);
  std::iota(pages.begin(), pages.end(), 0);
  check(cudaMalloc(&table_seq, pages.size() * sizeof(int)), "malloc");
  check(cudaMemcpy(table_seq, pages.data(), pages.size() * 4, cudaMemcpyHostToDevice), "copy");
  std::mt19937 rng(7);
  std::shuffle(pages.begin(), pages.end(), rng);
  check(cudaMalloc(&table, pages.size() * sizeof(int)), "malloc");
  check(cudaMemcpy(table, pages.data(), pages.size() * 4, cudaMemcpyHostToDevice), "copy");
  const double bytes = 2.0 * kCacheBytes;
  std::vector<Result> out;
  auto add = [&](const std::string& n, float ms) {
    out.push_back({n, ms});
    std::printf("%-28s %8.4f ms %6.3f TB/s\n", n.c_str(), ms, bytes / (ms * 1e-3) / 1e12);
    std::fflush(stdout);
  };

  add("contig", time_best(
                    [&] {
                      contig<<<sms * 8, 512>>>(reinterpret_cast<const uint4*>(K),
                                               reinterpret_cast<const uint4*>(V), kCacheBytes / 16);
                    },
                    reps));
  const int ctas = kB * kHk;  // splits = 1, as decode's heuristic picks for this batch
  add("ld_head U1", time_best([&] { ld_head<1><<<ctas, 128>>>(K, V, table, 1, false); }, reps));
  add("ld_head U2", time_best([&] { ld_head<2><<<ctas, 128>>>(K, V, table, 1, false); }, reps));

  auto cp = [&](auto kern, const char* name, int stages, int ctas_per_sm, const int* tab,
                bool bfirst, int splits) {
    // Shared memory sized so that exactly ctas_per_sm CTAs fit (228 KB per SM, 1 KB reserved
    // per CTA): the stages, padded.
    const int smem = std::max(stages * 34816, 233472 / ctas_per_sm - 1024 - 64);
    check(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "attr");
    int occ = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, 128, smem), "occ");
    char label[96];
    std::snprintf(label, sizeof label, "%s x%d", name, occ);
    add(label,
        time_best([&] { kern<<<kB * kHk * splits, 128, smem>>>(K, V, tab, splits, bfirst, 16); },
                  reps));
  };
  cp(cp_kernel<3, 8, false>, "cp_head S3 L8", 3, 2, table, false, 1);
  cp(cp_kernel<3, 8, false, 1>, "cp_head S3 L8 zfill", 3, 2, table, false, 1);
  cp(cp_kernel<3, 8, false, 2>, "cp_head S3 L8 pred", 3, 2, table, false, 1);
  cp(cp_kernel<3, 8, false, 1, 1, true>, "cp_head zfill pad272 read", 3, 2, table, false, 1);
  cp(cp_kernel<3, 8, false, 1, 2, true>, "cp_head zfill swizzle read", 3, 2, table, false, 1);
  cp(cp_kernel<3, 8, false, 1, 2>, "cp_head zfill swizzle", 3, 2, table, false, 1);
  cp(cp_kernel<3, 8, false, 0, 0, true>, "cp_head plain256 read", 3, 2, table, false, 1);
  cp(cp_kernel<3, 8, false, 1, 1>, "cp_head S3 L8 zfill pad272", 3, 2, table, false, 1);
  cp(cp_kernel<3, 8, false, 0, 1>, "cp_head S3 L8 pad272", 3, 2, table, false, 1);
  cp(cp_kernel<3, 8, false, 0, 2>, "cp_head S3 L8 swizzle", 3, 2, table, false, 1);
  cp(cp_kernel<3, 16, false, 0, 1>, "cp_head S3 L16 pad272", 3, 2, table, false, 1);
  cp(cp_kernel<3, 8, false>, "cp_head S3 L8 bfirst", 3, 2, table, true, 1);
  cp(cp_kernel<3, 8, false>, "cp_head S3 L8 seq", 3, 2, table_seq, false, 1);
  cp(cp_kernel<3, 16, false>, "cp_head S3 L16", 3, 2, table, false, 1);
  cp(cp_kernel<2, 8, false>, "cp_head S2 L8", 2, 3, table, false, 1);
  cp(cp_kernel<2, 8, false>, "cp_head S2 L8", 2, 2, table, false, 1);
  cp(cp_kernel<4, 8, false>, "cp_head S4 L8", 4, 1, table, false, 1);
  cp(cp_kernel<3, 8, false>, "cp_head S3 L8 split2", 3, 2, table, false, 2);
  cp(cp_kernel<3, 8, true>, "cp_token S3 L8", 3, 2, table, false, 1);
  cp(cp_kernel<3, 16, true>, "cp_token S3 L16", 3, 2, table, false, 1);
  cp(cp_kernel<3, 8, true>, "cp_token S3 L8 seq", 3, 2, table_seq, false, 1);
  std::printf("device %s, %d SMs, %.2f GB read per run, best of %d\n", prop.name, sms, bytes / 1e9,
              reps);
  return 0;
}
