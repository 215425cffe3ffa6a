#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <cmath>

#include "flashback/dlpack.h"
#include "flashback/tensor.h"

namespace flashback {
namespace {

TEST(Tensor, ViewsSliceAndTranspose) {
  Tensor t(DType::kF32, {2, 3, 4});
  for (int i = 0; i < 24; ++i) t.set(i, i);
  const TensorView s = t.view().slice(2, 1, 3);
  EXPECT_EQ(s.shape_str(), "[2, 3, 2]");
  EXPECT_EQ(load_as_double(s, s.offset(1, 2, 1)), 1 * 12 + 2 * 4 + 2);
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_TRUE(s.last_dim_contiguous());
  const TensorView tr = t.view().transposed(0, 2);
  EXPECT_EQ(load_as_double(tr, tr.offset(3, 1, 0)), 0 * 12 + 1 * 4 + 3);
  EXPECT_THROW(t.view().slice(1, 2, 5), Error);
}

TEST(Tensor, PoisonIsNaN) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2}) {
    Tensor t(d, {3});
    t.poison();
    EXPECT_TRUE(std::isnan(t.get(1))) << dtype_name(d);
  }
}

TEST(DLPack, RoundTripAndFp8AsUint8) {
  Tensor t(DType::kF8E4M3, {4, 2});
  for (int i = 0; i < 8; ++i) t.set(i, i);
  DLManagedTensor* m = to_dlpack(t);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLUInt);
  EXPECT_EQ(m->dl_tensor.dtype.bits, 8);
  const TensorView v = from_dlpack(m->dl_tensor, DType::kF8E4M3);
  EXPECT_EQ(v.dtype, DType::kF8E4M3);
  EXPECT_EQ(v.shape_str(), "[4, 2]");
  EXPECT_EQ(load_as_double(v, 5), 5.0);
  EXPECT_THROW(from_dlpack(m->dl_tensor, DType::kBF16), Error);
  m->deleter(m);

  // Strided bf16 tensor with a byte offset.
  Tensor b(DType::kBF16, {6});
  for (int i = 0; i < 6; ++i) b.set(i, i);
  int64_t shape[1] = {3}, strides[1] = {2};
  DLTensor dl{};
  dl.data = b.data();
  dl.device = {kDLCPU, 0};
  dl.ndim = 1;
  dl.dtype = {kDLBfloat, 16, 1};
  dl.shape = shape;
  dl.strides = strides;
  dl.byte_offset = 2;
  const TensorView w = from_dlpack(dl);
  EXPECT_EQ(load_as_double(w, w.offset(2)), 5.0);
  dl.dtype = {kDLFloat, 64, 1};
  try {
    from_dlpack(dl);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "dltensor.dtype");
  }
  dl.dtype = {kDLBfloat, 16, 1};
  dl.device = {kDLVulkan, 0};
  EXPECT_THROW(from_dlpack(dl), Error);
}

}  // namespace
}  // namespace flashback
