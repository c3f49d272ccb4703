// BlockStore over Redis (hiredis, blocking, with connect and command timeouts): MGET for a run
// of blocks, SET key value NX for a write, DEL for a damaged value. A broken connection is
// dropped and re-made lazily, at most once per retry interval, so an absent Redis costs a fast
// error, not a timeout each time. See kv_store.h.
#include <hiredis.h>

#include <string>

#include "core/str_cat.h"
#include "serve/kv_store.h"

namespace kvcache::serve {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

class RedisStore final : public BlockStore {
 public:
  RedisStore(StoreAddress a, RedisTimeouts t) : addr_(std::move(a)), t_(t) {}
  ~RedisStore() override { drop(); }

  Result<std::vector<std::optional<std::string>>> get(
      std::span<const std::string> keys) override {
    std::vector<const char*> argv{"MGET"};  // hiredis takes a non-const array
    std::vector<size_t> lens{4};
    for (const std::string& k : keys) {
      argv.push_back(k.data());
      lens.push_back(k.size());
    }
    Result<redisReply*> r = command(argv, lens);
    if (!r.ok()) return r.status();
    Reply reply(*r);
    if ((*r)->type != REDIS_REPLY_ARRAY || (*r)->elements != keys.size())
      return internal_error("redis MGET: unexpected reply");
    std::vector<std::optional<std::string>> out(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const redisReply* e = (*r)->element[i];
      if (e->type == REDIS_REPLY_STRING) out[i] = std::string(e->str, e->len);
    }
    return out;
  }

  Result<bool> put_if_absent(const std::string& key, std::string_view value) override {
    std::vector<const char*> argv{"SET", key.data(), value.data(), "NX"};
    std::vector<size_t> lens{3, key.size(), value.size(), 2};
    Result<redisReply*> r = command(argv, lens);
    if (!r.ok()) return r.status();
    Reply reply(*r);
    if ((*r)->type == REDIS_REPLY_STATUS) return true;
    if ((*r)->type == REDIS_REPLY_NIL) return false;
    return internal_error("redis SET NX: unexpected reply");
  }

  Status remove(const std::string& key) override {
    std::vector<const char*> argv{"DEL", key.data()};
    std::vector<size_t> lens{3, key.size()};
    Result<redisReply*> r = command(argv, lens);
    if (!r.ok()) return r.status();
    freeReplyObject(*r);
    return ok_status();
  }

 private:
  struct Reply {  // frees a reply on scope exit
    explicit Reply(redisReply* r) : r_(r) {}
    ~Reply() { freeReplyObject(r_); }
    redisReply* r_;
  };

  void drop() {
    if (c_ != nullptr) redisFree(c_);
    c_ = nullptr;
  }

  Status fail(const std::string& what) {
    drop();
    next_try_ = std::chrono::steady_clock::now() + t_.retry;
    return internal_error(str_cat("redis ", addr_.host, ":", addr_.port, ": ", what));
  }

  Status connect() {
    if (c_ != nullptr) return ok_status();
    if (std::chrono::steady_clock::now() < next_try_)
      return internal_error("redis: unreachable, retrying later");
    c_ = redisConnectWithTimeout(addr_.host.c_str(), addr_.port, to_timeval(t_.connect));
    if (c_ == nullptr) return fail("cannot allocate a connection");
    if (c_->err != 0) return fail(c_->errstr);
    if (redisSetTimeout(c_, to_timeval(t_.command)) != REDIS_OK) return fail("cannot set timeout");
    if (addr_.db != 0) {
      auto* r = static_cast<redisReply*>(redisCommand(c_, "SELECT %d", addr_.db));
      if (r == nullptr) return fail(c_->errstr);
      const bool ok = r->type == REDIS_REPLY_STATUS;
      freeReplyObject(r);
      if (!ok) return fail(str_cat("SELECT ", addr_.db, " refused"));
    }
    return ok_status();
  }

  Result<redisReply*> command(std::vector<const char*>& argv, const std::vector<size_t>& lens) {
    KVCACHE_RETURN_IF_ERROR(connect());
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (r == nullptr) return fail(c_->errstr);  // I/O error or timeout: the connection is lost
    if (r->type == REDIS_REPLY_ERROR) {
      std::string msg(r->str, r->len);
      freeReplyObject(r);
      return internal_error("redis: " + msg);  // e.g. OOM under maxmemory noeviction
    }
    return r;
  }

  StoreAddress addr_;
  RedisTimeouts t_;
  redisContext* c_ = nullptr;
  std::chrono::steady_clock::time_point next_try_{};
};

}  // namespace

std::unique_ptr<BlockStore> make_redis_store(const StoreAddress& address,
                                             const RedisTimeouts& timeouts) {
  return std::make_unique<RedisStore>(address, timeouts);
}

}  // namespace kvcache::serve
