// The request parser: framing (Content-Length, chunked, none), the limits it enforces as soon as
// they are passed (413 / 431 with the status the listener sends), malformed input, keep-alive
// rules, 100-continue and pipelining. Bytes are fed one at a time where a split could matter.
#include "server/http_message.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace kvcache::server::http {
namespace {

Limits small_limits() {
  Limits l;
  l.max_header_bytes = 256;
  l.max_headers = 4;
  l.max_body_bytes = 10;
  return l;
}

RequestParser fed(const std::string& bytes, Limits l = small_limits(), bool one_by_one = false) {
  RequestParser p(l);
  if (!one_by_one) {
    p.feed(bytes.data(), bytes.size());
    return p;
  }
  for (char c : bytes) p.feed(&c, 1);
  return p;
}

TEST(HttpParser, RequestFedByteByByteHasItsPartsAndBody) {
  RequestParser p = fed(
      "\r\nPOST /v1/completions?x=1 HTTP/1.1\r\nHost: h\r\ncontent-LENGTH:  5 \r\n\r\nhello",
      small_limits(), true);
  ASSERT_TRUE(p.complete()) << p.error_message();
  Request r = p.take();
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.target, "/v1/completions?x=1");
  EXPECT_EQ(r.path, "/v1/completions");
  EXPECT_EQ(r.get_header_value("Content-Length"), "5");
  EXPECT_EQ(r.get_header_value("host"), "h");
  EXPECT_EQ(r.get_header_value("Missing"), "");
  EXPECT_EQ(r.body, "hello");
  EXPECT_TRUE(r.keep_alive);
}

TEST(HttpParser, ChunkedBodyIsDecodedWithExtensionsAndTrailer) {
  RequestParser p = fed(
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n",
      small_limits(), true);
  ASSERT_TRUE(p.complete()) << p.error_message();
  EXPECT_EQ(p.take().body, "abcde");
}

TEST(HttpParser, ChunkedBodyIsRefusedAtTheSizeLineThatPassesTheLimit) {
  // 6 + 5 bytes > 10: refused when the second size line arrives, before its data.
  RequestParser p = fed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n5\r\n");
  ASSERT_TRUE(p.failed());
  EXPECT_EQ(p.error_status(), 413);
  EXPECT_NE(p.error_message().find("limit of 10 bytes"), std::string::npos) << p.error_message();
  EXPECT_EQ(p.partial().path, "/");
  // A size beyond 64 bits is over any limit too.
  RequestParser q = fed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\n");
  EXPECT_EQ(q.error_status(), 413);
}

TEST(HttpParser, ChunkedBodyExactlyAtTheLimitIsAccepted) {
  RequestParser p = fed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "6\r\nabcdef\r\n4\r\nghij\r\n0\r\n\r\n");
  ASSERT_TRUE(p.complete()) << p.error_message();
  EXPECT_EQ(p.take().body, "abcdefghij");
}

TEST(HttpParser, ContentLengthOverTheLimitIsRefusedOnTheHeaders) {
  RequestParser p = fed("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n");
  ASSERT_TRUE(p.failed());
  EXPECT_EQ(p.error_status(), 413);
  EXPECT_EQ(fed("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n").error_status(), 413);
}

TEST(HttpParser, NeitherLengthNorChunkedMeansAnEmptyBody) {
  RequestParser p = fed("POST /v1/cache/clear HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_TRUE(p.complete());
  EXPECT_EQ(p.take().body, "");
}

TEST(HttpParser, HeadersOverTheByteOrCountLimitGet431) {
  const std::string big(300, 'a');
  EXPECT_EQ(fed("GET / HTTP/1.1\r\nX: " + big + "\r\n\r\n").error_status(), 431);
  // A line that never ends is refused once it passes the limit.
  RequestParser p = fed("GET / HTTP/1.1\r\nX: " + big);
  EXPECT_EQ(p.error_status(), 431);
  EXPECT_EQ(fed("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n").error_status(), 431);
  EXPECT_TRUE(fed("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n").complete());
}

TEST(HttpParser, MalformedRequestsGetTheirStatus) {
  EXPECT_EQ(fed("GARBAGE\r\n\r\n").error_status(), 400);
  EXPECT_EQ(fed("GET / HTTP/2.0\r\n\r\n").error_status(), 505);
  EXPECT_EQ(fed("GET / SPDY\r\n\r\n").error_status(), 400);
  EXPECT_EQ(fed("GET / HTTP/1.1\r\nNoColon\r\n\r\n").error_status(), 400);
  EXPECT_EQ(fed("GET / HTTP/1.1\r\nA: 1\r\n folded\r\n\r\n").error_status(), 400);
  EXPECT_EQ(fed("POST / HTTP/1.1\r\nContent-Length: 4x\r\n\r\n").error_status(), 400);
  EXPECT_EQ(fed("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").error_status(), 400);
  EXPECT_EQ(fed("POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n").error_status(), 400);
  EXPECT_EQ(fed("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n").error_status(), 501);
  EXPECT_EQ(fed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").error_status(), 400);
  EXPECT_EQ(fed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY").error_status(), 400);
}

TEST(HttpParser, KeepAliveFollowsVersionAndConnection) {
  EXPECT_TRUE(fed("GET / HTTP/1.1\r\n\r\n").take().keep_alive);
  EXPECT_FALSE(fed("GET / HTTP/1.1\r\nConnection: upgrade, Close\r\n\r\n").take().keep_alive);
  EXPECT_FALSE(fed("GET / HTTP/1.0\r\n\r\n").take().keep_alive);
  EXPECT_TRUE(fed("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").take().keep_alive);
}

TEST(HttpParser, ExpectContinueIsWantedUntilTheBodyArrives) {
  RequestParser p = fed("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
  EXPECT_TRUE(p.wants_continue());
  EXPECT_FALSE(p.complete());
  p.feed("ok", 2);
  ASSERT_TRUE(p.complete());
  EXPECT_EQ(p.take().body, "ok");
}

TEST(HttpParser, PipelinedRequestsComeOutInOrder) {
  RequestParser p = fed("POST /a HTTP/1.1\r\nContent-Length: 1\r\n\r\nxGET /b HTTP/1.1\r\n\r\nGET /c");
  ASSERT_TRUE(p.complete());
  EXPECT_EQ(p.take().path, "/a");
  ASSERT_TRUE(p.complete());
  EXPECT_EQ(p.take().path, "/b");
  EXPECT_FALSE(p.complete());
  EXPECT_TRUE(p.started());
  p.feed(" HTTP/1.1\r\n\r\n", 13);
  ASSERT_TRUE(p.complete());
  EXPECT_EQ(p.take().path, "/c");
}

TEST(HttpParser, AnySplitOfAStreamGivesTheSameRequests) {
  const std::string stream =
      "POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz"
      "POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1;e\r\nc\r\n0\r\n\r\n"
      "GET /c?q HTTP/1.0\nConnection: keep-alive\n\n";
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    RequestParser p(small_limits());
    std::vector<Request> got;
    for (size_t at = 0; at < stream.size();) {
      const size_t n = std::min(stream.size() - at, size_t{1} + rng() % 24);
      p.feed(stream.data() + at, n);
      at += n;
      while (p.complete()) got.push_back(p.take());
      ASSERT_FALSE(p.failed()) << p.error_message();
    }
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].body, "xyz");
    EXPECT_EQ(got[1].body, "abc");
    EXPECT_EQ(got[2].path, "/c");
    EXPECT_TRUE(got[2].keep_alive);
  }
}

TEST(HttpParser, RandomBytesEndInARefusalOrWaitNeverACrash) {
  std::mt19937 rng(11);
  const std::string alphabet = "GET POST / HTTP/1.1\r\n:Content-Length: 0123456789abcdef;chunked\t ";
  for (int trial = 0; trial < 2000; ++trial) {
    RequestParser p(small_limits());
    std::string bytes;
    for (int i = 0; i < 400; ++i)
      bytes += (rng() % 4 == 0) ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
    for (size_t at = 0; at < bytes.size() && !p.failed(); at += 7) {
      p.feed(bytes.data() + at, std::min<size_t>(7, bytes.size() - at));
      while (p.complete()) p.take();
    }
    if (p.failed()) {
      const int s = p.error_status();
      EXPECT_TRUE(s == 400 || s == 413 || s == 431 || s == 501 || s == 505) << s;
      EXPECT_FALSE(p.error_message().empty());
    }
  }
}

TEST(HttpParser, BlankLinesAloneDoNotStartARequest) {
  RequestParser p = fed("\r\n\r\n");
  EXPECT_FALSE(p.started());
  EXPECT_FALSE(p.complete());
  EXPECT_FALSE(p.failed());
}

}  // namespace
}  // namespace kvcache::server::http
