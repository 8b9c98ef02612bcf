// protocol/wire/texture.h: resource descriptors and texture descriptors survive the trip.
#include "protocol/wire/texture.h"

#include <gtest/gtest.h>

namespace rgpu::proto::wire {
namespace {

TEST(WireTexture, CreatesCarryTheirOptionalDescriptors) {
  CUDA_RESOURCE_DESC res{};
  res.resType = CU_RESOURCE_TYPE_ARRAY;
  res.res.array.hArray = reinterpret_cast<CUarray>(42);  // a client id
  CUDA_TEXTURE_DESC tex{};
  tex.filterMode = CU_TR_FILTER_MODE_LINEAR;
  for (bool with_view : {false, true}) {
    CUDA_RESOURCE_VIEW_DESC view{};
    view.width = 64;
    Writer w;
    put_texture_create(w, res, &tex, with_view ? &view : nullptr);
    put_surface_create(w, res);
    put_resource_desc(w, res);
    Reader r(w.buf().data(), w.buf().size());
    TextureCreate got;
    CUDA_RESOURCE_DESC surf, back;
    ASSERT_TRUE(read_texture_create(r, &got));
    ASSERT_TRUE(read_surface_create(r, &surf));
    ASSERT_TRUE(read_resource_desc(r, &back));
    EXPECT_EQ(r.left(), 0u);
    EXPECT_EQ(got.res.res.array.hArray, reinterpret_cast<CUarray>(42));
    EXPECT_TRUE(got.has_tex);
    EXPECT_EQ(got.tex.filterMode, CU_TR_FILTER_MODE_LINEAR);
    EXPECT_EQ(got.has_view, with_view);
    if (with_view) EXPECT_EQ(got.view.width, 64u);
    EXPECT_EQ(surf.resType, CU_RESOURCE_TYPE_ARRAY);
    EXPECT_EQ(back.res.array.hArray, reinterpret_cast<CUarray>(42));
  }
}

TEST(WireTexture, AStructOfAnotherSizeIsRefused) {
  Writer w;
  w.put_u64(sizeof(CUDA_RESOURCE_DESC) - 1);
  w.buf().resize(w.buf().size() + sizeof(CUDA_RESOURCE_DESC) - 1);
  Reader r(w.buf().data(), w.buf().size());
  CUDA_RESOURCE_DESC res;
  EXPECT_FALSE(read_surface_create(r, &res));
}

}  // namespace
}  // namespace rgpu::proto::wire
