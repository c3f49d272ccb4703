// The one spelling of "compile the functions that follow for these instruction sets", for
// the SIMD kernel files of cpu and engine. Layer: cpu (macros only). GCC takes a target
// pragma; clang ignores it (the fuzz build uses clang) and needs an attribute pushed onto
// every function. Include every other header before KVCACHE_SIMD_BEGIN so nothing shared with
// other translation units is compiled for the wider set. It does not probe the CPU (isa.h).
#pragma once

#define KVCACHE_SIMD_PRAGMA_(...) _Pragma(#__VA_ARGS__)

#if defined(__clang__)
// KVCACHE_SIMD_BEGIN("avx2,fma,f16c") ... KVCACHE_SIMD_END()
#define KVCACHE_SIMD_BEGIN(features) \
  KVCACHE_SIMD_PRAGMA_(clang attribute push(__attribute__((target(features))), apply_to = function))
#define KVCACHE_SIMD_END() KVCACHE_SIMD_PRAGMA_(clang attribute pop)
#else
#define KVCACHE_SIMD_BEGIN(features) \
  KVCACHE_SIMD_PRAGMA_(GCC push_options) KVCACHE_SIMD_PRAGMA_(GCC target(features))
#define KVCACHE_SIMD_END() KVCACHE_SIMD_PRAGMA_(GCC pop_options)
#endif
