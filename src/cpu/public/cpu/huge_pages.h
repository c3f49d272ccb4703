// One home for placing big buffers on transparent huge pages. Layer: cpu (program, above it,
// reads model files with it). A stream over a buffer on 2 MiB pages walks one page-table
// entry per 2 MiB instead of per 4 KiB: K/V pools (kv_pool.h) and model files read into
// memory (program/file_bytes.h) use it, and decode reads both once a token. Only advice:
// where the kernel offers no huge pages nothing changes.
#pragma once

#include <cstdint>

namespace kvcache::cpu {

inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;

// Asks the kernel to back the whole 2 MiB pages inside [p, p + n) with huge pages (Linux
// madvise MADV_HUGEPAGE; a no-op elsewhere). The partial pages at either end are advised
// nothing, so memory that is never touched stays unbacked and resident memory stays what the
// caller touches. Call it before the bytes are first written. Failure is harmless and ignored.
void advise_huge_pages(void* p, int64_t n);

// Whether the kernel offers transparent huge pages to advised memory (Linux: the mode in
// /sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise"). Read once.
bool huge_pages_available();

}  // namespace kvcache::cpu
