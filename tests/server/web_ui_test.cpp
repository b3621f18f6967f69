// The chat page's routes on a real loopback server: / and its files with their content types and
// headers, public under --api-key while every API route (/props included) wants the key, 404 once
// the page is turned off (--no-webui), /props' defaults from generation_config.json, and every
// file index.html names compiled in (src/server/web/embed.cmake).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/paths.h"
#include "engine/engine.h"
#include "server/http_server.h"
#include "server/web_assets.h"

namespace fp4lm::server::web_ui_test {
namespace {

using nlohmann::json;

// Just enough model for an Engine to exist: the page's routes run no generation.
class IdleModel : public engine::StepModel {
 public:
  int64_t vocab_size() const override { return 8; }
  int64_t max_model_len() const override { return 64; }
  std::vector<int64_t> eos_ids() const override { return {0}; }
  size_t bytes_for(int64_t capacity) const override { return static_cast<size_t>(capacity); }
  int64_t allocate(int64_t) override { return next_++; }
  void release(int64_t) override {}
  void forward(std::span<const engine::StepChunk> chunks) override {
    for (const auto& c : chunks)
      if (c.logits) std::fill(c.logits, c.logits + 8, 0.0f);
  }
  void save_positions(int64_t, int64_t, int64_t, std::vector<uint8_t>&, std::vector<uint8_t>*) override {}
  void load_positions(int64_t, std::span<const std::vector<uint8_t>* const>, int64_t,
                      const std::vector<uint8_t>*) override {}

 private:
  int64_t next_ = 0;
};

struct Reply {
  int status = 0;
  std::string head, body;
  std::string field(const std::string& name) const {
    const std::regex re("\r\n" + name + ": ([^\r]*)", std::regex::icase);
    std::smatch m;
    return std::regex_search(head, m, re) ? m[1].str() : "";
  }
};

// One request on a fresh connection (Connection: close), the whole reply.
Reply request(int port, const std::string& method, const std::string& path, const std::string& extra = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra +
                          "Content-Length: 0\r\n\r\n";
  EXPECT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string all;
  char buf[16384];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) all.append(buf, static_cast<size_t>(n));
  close(fd);
  Reply r;
  const size_t end = all.find("\r\n\r\n");
  if (end == std::string::npos || all.size() < 12) return r;
  r.status = std::stoi(all.substr(9, 3));
  r.head = all.substr(0, end);
  r.body = all.substr(end + 4);
  return r;
}

// An HttpServer on a free port with the idle model served as "tiny".
struct Served {
  IdleModel model;
  engine::Engine engine{model, nullptr, engine::SchedulerConfig{}};
  ServingModel sm;
  ServingMetrics metrics{"tiny", 64};
  HttpServer http;
  int port = 0;

  explicit Served(ServerOptions o, bool ready = true) : http(with_free_port(std::move(o))) {
    sm.name = "tiny";
    sm.path = "/models/tiny";
    sm.max_model_len = 64;
    sm.vocab_size = 8;
    sm.defaults.temperature = 0.6;
    sm.defaults.top_k = 20;
    port = http.bind();
    http.start();
    if (ready) http.set_ready(engine, sm, metrics);
  }
  ~Served() { http.shutdown(); }
  static ServerOptions with_free_port(ServerOptions o) {
    o.port = 0;
    o.shutdown_grace_s = 0;
    return o;
  }
};

ServerOptions with_key(const std::string& key) {
  ServerOptions o;
  o.api_key = key;
  return o;
}

TEST(WebUi, RootAndFilesHaveTheirContentTypesAndStayOnTheirOrigin) {
  Served s{ServerOptions{}};
  const Reply page = request(s.port, "GET", "/");
  ASSERT_EQ(page.status, 200) << page.head;
  EXPECT_EQ(page.field("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("<meta name=\"viewport\" content=\"width=device-width\">"), std::string::npos);
  EXPECT_NE(page.field("Content-Security-Policy").find("connect-src 'self'"), std::string::npos);
  EXPECT_EQ(page.field("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(request(s.port, "GET", "/index.html").body, page.body);
  const std::map<std::string, std::string> types = {{"/app.js", "text/javascript; charset=utf-8"},
                                                    {"/markdown.js", "text/javascript; charset=utf-8"},
                                                    {"/engine_view.js", "text/javascript; charset=utf-8"},
                                                    {"/style.css", "text/css; charset=utf-8"},
                                                    {"/favicon.svg", "image/svg+xml"}};
  for (const auto& [path, type] : types) {
    const Reply r = request(s.port, "GET", path);
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.field("Content-Type"), type) << path;
    const EmbeddedFile* f = find_web_asset(path);
    ASSERT_NE(f, nullptr) << path;
    EXPECT_EQ(r.body, std::string(reinterpret_cast<const char*>(f->data), f->size)) << path;
  }
  const Reply head = request(s.port, "HEAD", "/");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.field("Content-Length"), std::to_string(page.body.size()));
  EXPECT_TRUE(head.body.empty());
  EXPECT_EQ(request(s.port, "GET", "/nothing.js").status, 404);
  EXPECT_EQ(request(s.port, "GET", "/../CMakeLists.txt").status, 404);
  EXPECT_EQ(request(s.port, "POST", "/").status, 404);
}

TEST(WebUi, ThePageIsPublicUnderAnApiKeyAndEveryApiCallWantsTheKey) {
  Served s{with_key("sekret")};
  for (const char* path : {"/", "/app.js", "/style.css", "/favicon.svg"})
    EXPECT_EQ(request(s.port, "GET", path).status, 200) << path;
  for (const char* path : {"/props", "/v1/models", "/metrics"}) {
    const Reply r = request(s.port, "GET", path);
    EXPECT_EQ(r.status, 401) << path;
    EXPECT_NE(r.body.find("API key"), std::string::npos) << r.body;
    EXPECT_EQ(request(s.port, "GET", path, "Authorization: Bearer wrong\r\n").status, 401) << path;
    EXPECT_EQ(request(s.port, "GET", path, "Authorization: Bearer sekret\r\n").status, 200) << path;
  }
  EXPECT_EQ(request(s.port, "POST", "/v1/chat/completions").status, 401);
}

TEST(WebUi, ThePageAnswersWhileTheModelLoads) {
  Served s{ServerOptions{}, /*ready=*/false};
  EXPECT_EQ(request(s.port, "GET", "/").status, 200);
  EXPECT_EQ(request(s.port, "GET", "/app.js").status, 200);
  EXPECT_EQ(request(s.port, "GET", "/props").status, 503);  // the page retries until ready
}

TEST(WebUi, NoWebUiAnswers404) {
  ServerOptions o;
  o.web_ui = false;
  Served s{o};
  for (const char* path : {"/", "/index.html", "/app.js", "/style.css"}) {
    const Reply r = request(s.port, "GET", path);
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(r.field("Content-Type"), "application/json");
  }
  const json props = json::parse(request(s.port, "GET", "/props").body);
  EXPECT_EQ(props["webui"], false);
}

TEST(WebUi, PropsCarriesTheDefaultsAndModalities) {
  Served s{ServerOptions{}};
  const Reply r = request(s.port, "GET", "/props");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.field("Content-Type"), "application/json");
  const json p = json::parse(r.body);
  EXPECT_EQ(p["model"], "tiny");
  EXPECT_EQ(p["max_model_len"], 64);
  EXPECT_EQ(p["default_generation_settings"]["n_ctx"], 64);
  const json& params = p["default_generation_settings"]["params"];
  EXPECT_DOUBLE_EQ(params["temperature"].get<double>(), 0.6);  // from generation_config.json
  EXPECT_EQ(params["top_k"], 20);
  EXPECT_DOUBLE_EQ(params["top_p"].get<double>(), 1.0);  // vLLM's default where the file is silent
  EXPECT_TRUE(params["max_tokens"].is_null());
  EXPECT_DOUBLE_EQ(p["generation_config"]["temperature"].get<double>(), 0.6);
  EXPECT_TRUE(p["generation_config"]["top_p"].is_null());
  EXPECT_EQ(p["modalities"]["vision"], false);
  EXPECT_EQ(p["api_key_required"], false);
  EXPECT_EQ(p["webui"], true);
}

// Every file index.html loads is compiled in, every compiled file is in src/server/web, and the
// page stays small enough to read in one sitting.
TEST(WebUi, EveryFileThePageNamesIsEmbeddedAndItStaysSmall) {
  const EmbeddedFile* index = find_web_asset("/");
  ASSERT_NE(index, nullptr);
  const std::string html(reinterpret_cast<const char*>(index->data), index->size);
  const std::regex ref(R"re((?:src|href)="([^"]+)")re");
  size_t named = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), ref); it != std::sregex_iterator(); ++it, ++named) {
    const std::string target = (*it)[1].str();
    EXPECT_EQ(target.find(':'), std::string::npos) << "a foreign or scheme URL in index.html: " << target;
    EXPECT_NE(find_web_asset("/" + target), nullptr) << target;
  }
  EXPECT_GE(named, 5u);
  for (const EmbeddedFile& f : embedded_web_files()) {
    std::ifstream in(std::string(FP4LM_SOURCE_DIR) + "/src/server/web/" + f.name, std::ios::binary);
    const std::string disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(disk, std::string(reinterpret_cast<const char*>(f.data), f.size)) << f.name;
  }
  EXPECT_LT(web_assets_bytes(), size_t{100} << 10);
}

}  // namespace
}  // namespace fp4lm::server::web_ui_test
