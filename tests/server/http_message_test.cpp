// The request-head checks (RFC 9112 framing, Host, field syntax, line limits), response framing
// and log escaping, on hand-built requests with the expected statuses.
#include <gtest/gtest.h>

#include "core/error.h"
#include "server/api_key.h"
#include "server/cors.h"
#include "server/http_message.h"

namespace fp4lm::server::http_message_test {
namespace {

HttpRequest head(HeaderFields fields, int version = 11, std::string target = "/v1/models") {
  HttpRequest h;
  h.method = "POST";
  h.target = target;
  h.path = target_path(target);
  h.version = version;
  h.headers = std::move(fields);
  return h;
}

int status_of(const HttpRequest& h) {
  const auto r = check_request_head(h, HeadLimits{});
  return r ? r->status : 0;
}

TEST(HttpHead, AValidRequestPasses) {
  EXPECT_EQ(status_of(head({{"Host", "localhost:8000"}, {"Content-Length", "5"}})), 0);
  EXPECT_EQ(status_of(head({{"Host", "[::1]:8000"}, {"Transfer-Encoding", "chunked"}})), 0);
  EXPECT_EQ(status_of(head({{"Content-Length", "5"}}, 10)), 0);  // HTTP/1.0 needs no Host
  EXPECT_EQ(status_of(head({{"Host", "a"}, {"Content-Length", "5"}, {"content-length", " 5"}})), 0);  // equal duplicates
}

TEST(HttpHead, SmugglingAmbiguitiesAreRefused) {
  EXPECT_EQ(status_of(head({{"Host", "a"}, {"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}})), 400);
  EXPECT_EQ(status_of(head({{"Host", "a"}, {"Content-Length", "5"}, {"Content-Length", "6"}})), 400);
  EXPECT_EQ(status_of(head({{"Host", "a"}, {"Transfer-Encoding", "gzip, chunked"}})), 501);
  EXPECT_EQ(status_of(head({{"Host", "a"}, {"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"}})), 400);
  EXPECT_EQ(status_of(head({{"Transfer-Encoding", "chunked"}}, 10)), 400);
}

TEST(HttpHead, HostIsRequiredOnceAndValidOnHttp11) {
  EXPECT_EQ(status_of(head({})), 400);
  EXPECT_EQ(status_of(head({{"Host", "a"}, {"Host", "b"}})), 400);
  for (const char* bad : {"", "a b", "x/y", "a@b", "h:123456", "[::1", "[zz]"})
    EXPECT_EQ(status_of(head({{"Host", bad}})), 400) << bad;
}

TEST(HttpHead, FieldSyntaxAndLimits) {
  EXPECT_EQ(status_of(head({{"Host", "a"}, {"X-Bad", std::string("a\x01")}})), 400);
  EXPECT_EQ(status_of(head({{"Host", "a"}, {"Bad Name", "a"}})), 400);
  EXPECT_EQ(status_of(head({{"Host", "a"}, {"X-Long", std::string(9000, 'a')}})), 431);
  EXPECT_EQ(status_of(head({{"Host", "a"}}, 11, "/" + std::string(9000, 'a'))), 414);
  EXPECT_EQ(status_of(head({{"Host", "a"}}, 20)), 505);
  EXPECT_EQ(status_of(head({{"Host", "a"}, {"Content-Encoding", "gzip"}})), 415);
  EXPECT_EQ(status_of(head({{"Host", "a"}, {"Content-Encoding", "identity"}})), 0);
  EXPECT_EQ(status_of(head({{"Host", "a"}}, 11, "*")), 400);  // "*" is for OPTIONS only
}

TEST(HttpHead, TargetPath) {
  EXPECT_EQ(target_path("/v1/models?x=1"), "/v1/models");
  EXPECT_EQ(target_path("http://h:1/v1/models?x"), "/v1/models");
  EXPECT_EQ(target_path("http://h"), "/");
  EXPECT_EQ(target_path("*"), "*");
  EXPECT_EQ(target_path("v1"), "");
}

TEST(HttpResponse, FramingByVersion) {
  const HttpResponse r{200, "application/json", {{"X-A", "1"}}, "{}"};
  EXPECT_EQ(serialize_response(r, true),
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-A: 1\r\nContent-Length: 2\r\n"
            "Connection: keep-alive\r\n\r\n{}");
  EXPECT_EQ(serialize_response(r, false, true),
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-A: 1\r\nContent-Length: 2\r\n"
            "Connection: close\r\n\r\n");
  EXPECT_NE(serialize_stream_head(r, true).find("Transfer-Encoding: chunked\r\n"), std::string::npos);
  const std::string close_delimited = serialize_stream_head(r, false);
  EXPECT_EQ(close_delimited.find("Transfer-Encoding"), std::string::npos);
  EXPECT_EQ(close_delimited.find("Content-Length"), std::string::npos);
  EXPECT_EQ(chunk("hello, world!!!!!"), "11\r\nhello, world!!!!!\r\n");
  EXPECT_EQ(chunk(""), "");
}

TEST(LogEscape, ControlCharactersQuotesAndLength) {
  EXPECT_EQ(log_escape("a\x1b[31m\"b\\\n\x7f"), "a\\x1b[31m\\x22b\\x5c\\x0a\\x7f");
  EXPECT_EQ(log_escape(std::string(10, 'a'), 4), "aaaa...");
}

TEST(ApiKey, ComparedRawAndWhole) {
  const std::string key = "rt%41key";
  const std::string good = "Bearer rt%41key", decoded = "Bearer rtAkey", double_encoded = "Bearer rt%2541key";
  EXPECT_TRUE(authorized(&good, key));
  EXPECT_FALSE(authorized(&decoded, key));
  EXPECT_FALSE(authorized(&double_encoded, key));
  EXPECT_FALSE(authorized(nullptr, key));
  const std::string prefix = "Bearer rt%41ke", longer = "Bearer rt%41keyy", empty;
  EXPECT_FALSE(authorized(&prefix, key));
  EXPECT_FALSE(authorized(&longer, key));
  EXPECT_FALSE(authorized(&empty, key));
  EXPECT_TRUE(authorized(nullptr, ""));  // no key configured
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("", "abc"));
  EXPECT_FALSE(constant_time_equal("abcabc", "abc"));
}

TEST(ApiKey, SourcesAndUsageErrors) {
  EXPECT_EQ(resolve_api_key(std::nullopt, "", nullptr), std::nullopt);
  EXPECT_EQ(resolve_api_key(std::string("k"), "", "env"), "k");  // the flag wins over the environment
  EXPECT_EQ(resolve_api_key(std::nullopt, "", "env"), "env");
  EXPECT_THROW(resolve_api_key(std::string(""), "", nullptr), fp4lm::UsageError);
  EXPECT_THROW(resolve_api_key(std::nullopt, "", ""), fp4lm::UsageError);
  EXPECT_THROW(resolve_api_key(std::string("a b"), "", nullptr), fp4lm::UsageError);
  EXPECT_THROW(resolve_api_key(std::string("k"), "/some/file", nullptr), fp4lm::UsageError);
  EXPECT_THROW(resolve_api_key(std::nullopt, "/nonexistent/key/file", nullptr), fp4lm::UsageError);
}

HttpRequest preflight(const std::string& origin, const std::string& method, const std::string& headers) {
  HttpRequest h = head({{"Host", "a"}, {"Origin", origin}, {"Access-Control-Request-Method", method},
                        {"Access-Control-Request-Headers", headers}});
  h.method = "OPTIONS";
  return h;
}

std::string field(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "<none>";
}

TEST(Cors, DefaultsAllowEveryOriginWithoutCredentials) {
  const CorsPolicy p{CorsOptions{}};
  const HttpRequest pf = preflight("http://x", "POST", "authorization, content-type");
  ASSERT_TRUE(CorsPolicy::is_preflight(pf));
  const HttpResponse r = p.preflight(pf);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(field(r, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(field(r, "Access-Control-Allow-Headers"), "authorization, content-type");
  EXPECT_EQ(field(r, "Access-Control-Allow-Credentials"), "<none>");
}

TEST(Cors, ListsRestrictOriginsMethodsAndHeaders) {
  CorsOptions o;
  o.allowed_origins = parse_cors_list("[\"http://a\"]", "--allowed-origins");
  o.allowed_methods = parse_cors_list("GET, POST", "--allowed-methods");
  o.allowed_headers = parse_cors_list("Content-Type", "--allowed-headers");
  o.allow_credentials = true;
  const CorsPolicy p(o);
  const HttpResponse ok = p.preflight(preflight("http://a", "POST", "content-type"));
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(field(ok, "Access-Control-Allow-Origin"), "http://a");
  EXPECT_EQ(field(ok, "Access-Control-Allow-Credentials"), "true");
  EXPECT_EQ(p.preflight(preflight("http://b", "POST", "content-type")).status, 400);
  EXPECT_EQ(p.preflight(preflight("http://a", "PUT", "content-type")).status, 400);
  EXPECT_EQ(p.preflight(preflight("http://a", "POST", "x-other")).status, 400);
  EXPECT_THROW(parse_cors_list("[1]", "--allowed-origins"), fp4lm::UsageError);
  EXPECT_THROW(parse_cors_list("", "--allowed-origins"), fp4lm::UsageError);
}

}  // namespace
}  // namespace fp4lm::server::http_message_test
