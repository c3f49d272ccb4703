// The layout-independent undo verbs of CacheControl, written over its virtual verbs.
#include "core/cache.h"

namespace kvcache {

Result<int32_t> CacheControl::return_to(int32_t seq, UndoPoint& point) {
  if (point.pos == 0 || !point.saved()) {
    KVCACHE_RETURN_IF_ERROR(rewind(seq, point.pos));
    return seq;
  }
  if (point.checkpoint != nullptr) {
    KVCACHE_RETURN_IF_ERROR(restore(seq, *point.checkpoint));
    return seq;
  }
  KVCACHE_RETURN_IF_ERROR(seq_rm(seq));  // the fork holds the point's position
  const int32_t fork = point.fork;
  point.fork = -1;
  return fork;
}

void CacheControl::release(UndoPoint& point) {
  if (point.fork >= 0) (void)seq_rm(point.fork);  // NotFound when already gone: nothing held
  point.fork = -1;
  point.checkpoint.reset();
}

}  // namespace kvcache
