// See huge_pages.h.
#include "cpu/huge_pages.h"

#include <fstream>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace kvcache::cpu {

void advise_huge_pages(void* p, int64_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const auto at = reinterpret_cast<uintptr_t>(p);
  const auto page = static_cast<uintptr_t>(kHugePageBytes);
  const uintptr_t begin = (at + page - 1) & ~(page - 1);
  const uintptr_t end = (at + static_cast<uintptr_t>(n)) & ~(page - 1);
  if (n > 0 && end > begin)
    (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // advice only
#else
  (void)p, (void)n;
#endif
}

bool huge_pages_available() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  static const bool available = [] {  // one line: "always [madvise] never"
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string mode;
    return std::getline(in, mode) && mode.find('[') != std::string::npos &&
           mode.find("[never]") == std::string::npos;
  }();
  return available;
#else
  return false;
#endif
}

}  // namespace kvcache::cpu
