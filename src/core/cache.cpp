// The layout-independent undo verbs of CacheControl, written over its virtual verbs.
#include "core/cache.h"

#include "core/str_cat.h"

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

Status CacheControl::rewind_many(std::span<const int32_t> seqs,
                                 std::span<const int64_t> positions) {
  if (seqs.size() != positions.size())
    return invalid_argument(str_cat("rewind: ", static_cast<int64_t>(seqs.size()),
                                    " sequences and ", static_cast<int64_t>(positions.size()),
                                    " positions, expected one position per sequence"));
  if (seqs.size() > 1)
    return unimplemented(str_cat("rewind: ", static_cast<int64_t>(seqs.size()),
                                 " sequences at once; this layout rewinds one sequence"));
  return seqs.empty() ? ok_status() : rewind(seqs[0], positions[0]);
}

void CacheControl::release(UndoPoint& point) {
  if (point.fork >= 0) (void)seq_rm(point.fork);  // NotFound when already gone: nothing held
  point.fork = -1;
  point.checkpoint.reset();
}

}  // namespace kvcache
