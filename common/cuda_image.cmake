# rgpu_cuda_image: CUDA module image reader (common/cuda_image.h), its unit test and its fuzz
# target. common/CMakeLists.txt includes this file: include(${CMAKE_CURRENT_LIST_DIR}/cuda_image.cmake)
find_library(RGPU_LZ4_LIB lz4 REQUIRED)
find_library(RGPU_ZSTD_LIB zstd REQUIRED)
find_path(RGPU_LZ4_INCLUDE lz4.h REQUIRED)
find_path(RGPU_ZSTD_INCLUDE zstd.h REQUIRED)

add_library(rgpu_cuda_image STATIC ${CMAKE_CURRENT_LIST_DIR}/cuda_image.cpp)
target_include_directories(rgpu_cuda_image PUBLIC ${CMAKE_CURRENT_LIST_DIR}/.. PRIVATE ${RGPU_LZ4_INCLUDE} ${RGPU_ZSTD_INCLUDE})
target_link_libraries(rgpu_cuda_image PRIVATE ${RGPU_LZ4_LIB} ${RGPU_ZSTD_LIB})

if(RGPU_BUILD_TESTS)
  include(${CMAKE_CURRENT_LIST_DIR}/../tests/kernels/test_kernels.cmake)

  add_executable(cuda_image_test ${CMAKE_CURRENT_LIST_DIR}/cuda_image_test.cpp)
  target_include_directories(cuda_image_test PRIVATE ${RGPU_TEST_KERNELS_DIR})
  target_link_libraries(cuda_image_test PRIVATE rgpu_cuda_image GTest::gtest_main)
  add_dependencies(cuda_image_test rgpu_test_kernels)
  add_test(NAME cuda_image_test COMMAND cuda_image_test)

  # The fuzz target: with RGPU_FUZZ (clang) a libFuzzer binary; always also a standalone build
  # with ASan/UBSan that mutates the real images for a couple of seconds as a ctest.
  add_executable(cuda_image_fuzz_standalone ${CMAKE_CURRENT_LIST_DIR}/cuda_image_fuzz.cpp
                                            ${CMAKE_CURRENT_LIST_DIR}/cuda_image.cpp)
  target_compile_definitions(cuda_image_fuzz_standalone PRIVATE RGPU_FUZZ_STANDALONE)
  target_compile_options(cuda_image_fuzz_standalone PRIVATE -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_link_options(cuda_image_fuzz_standalone PRIVATE -fsanitize=address,undefined)
  target_include_directories(cuda_image_fuzz_standalone PRIVATE ${CMAKE_CURRENT_LIST_DIR}/.. ${RGPU_LZ4_INCLUDE} ${RGPU_ZSTD_INCLUDE})
  target_link_libraries(cuda_image_fuzz_standalone PRIVATE ${RGPU_LZ4_LIB} ${RGPU_ZSTD_LIB})
  add_dependencies(cuda_image_fuzz_standalone rgpu_test_kernels)
  if(RGPU_HAVE_TEST_KERNELS)
    add_test(NAME cuda_image_fuzz_smoke
      COMMAND cuda_image_fuzz_standalone --seconds 2
        ${RGPU_TEST_KERNEL_CUBIN} ${RGPU_TEST_KERNEL_PTX} ${RGPU_TEST_KERNEL_FATBIN}
        ${RGPU_TEST_KERNEL_FATBIN_LZ4} ${RGPU_TEST_KERNEL_FATBIN_ZSTD} ${RGPU_TEST_KERNEL_FATBIN_NONE}
        ${RGPU_TEST_KERNEL_FATBIN_PTX})
  endif()
endif()

if(RGPU_FUZZ)
  add_executable(cuda_image_fuzz ${CMAKE_CURRENT_LIST_DIR}/cuda_image_fuzz.cpp ${CMAKE_CURRENT_LIST_DIR}/cuda_image.cpp)
  target_compile_options(cuda_image_fuzz PRIVATE -fsanitize=fuzzer,address,undefined ${RGPU_FUZZ_STD_IGNORE})
  target_link_options(cuda_image_fuzz PRIVATE -fsanitize=fuzzer,address,undefined)
  target_include_directories(cuda_image_fuzz PRIVATE ${CMAKE_CURRENT_LIST_DIR}/.. ${RGPU_LZ4_INCLUDE} ${RGPU_ZSTD_INCLUDE})
  target_link_libraries(cuda_image_fuzz PRIVATE ${RGPU_LZ4_LIB} ${RGPU_ZSTD_LIB})
endif()
