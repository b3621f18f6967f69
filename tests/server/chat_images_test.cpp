// Image parts in chat requests (server/chat_images.h, engine/media_url.h) without sockets: the
// parts' shapes as vLLM accepts them, the URLs (data:, file:// under --allowed-local-media-path,
// the refusals), the prompt the tiny Qwen3.5 VL fixture gets (Qwen3VLProcessor's ids from
// scripts/make_qwen_vl_e2e_goldens.py), and every hostile case a 400 naming the image and its field.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "common/paths.h"
#include "common/png_header.h"
#include "core/error.h"
#include "engine/image_input.h"
#include "engine/media_url.h"
#include "engine/request_error.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "server/openai_request.h"

namespace fp4lm::server::chat_images_test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string base64(const std::string& s) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    const uint32_t v = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8) | uint8_t(s[i + 2]);
    for (int k6 = 18; k6 >= 0; k6 -= 6) out += k[(v >> k6) & 63];
  }
  if (i + 1 == s.size()) {
    const uint32_t v = uint8_t(s[i]) << 16;
    out += std::string{k[v >> 18], k[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == s.size()) {
    const uint32_t v = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8);
    out += std::string{k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], '='};
  }
  return out;
}

std::string image_file(const std::string& name) { return test::read_file(test::source_dir() / "tests/vision/data" / name); }
std::string data_url(const std::string& bytes, const std::string& type = "image/png") {
  return "data:" + type + ";base64," + base64(bytes);
}

// rgb_56x84.png with its header claiming 20000 x 20000 pixels (the IHDR CRC recomputed).
std::string png_bomb() {
  std::string b = image_file("rgb_56x84.png");
  test::set_png_size(b, 20000, 20000);
  return b;
}

std::vector<uint8_t> load(const std::string& url, const engine::MediaUrlOptions& o = {}) {
  return engine::load_media_url(url, o, "image 1");
}
std::string load_error(const std::string& url, const engine::MediaUrlOptions& o = {}) {
  try {
    load(url, o);
  } catch (const engine::RequestError& e) {
    return e.what();
  }
  return "";
}

TEST(MediaUrl, DataUrlsDecodeBase64) {
  const std::string png = image_file("rgb_56x84.png");
  EXPECT_EQ(load(data_url(png)), std::vector<uint8_t>(png.begin(), png.end()));
  // Every padding length, line-wrapped data, upper-case scheme and media type, unpadded data.
  for (const std::string s : {"a", "ab", "abc", "abcd", "\xff\x00\x10"}) {
    EXPECT_EQ(load(data_url(s)), std::vector<uint8_t>(s.begin(), s.end())) << s;
    std::string unpadded = base64(s);
    while (unpadded.back() == '=') unpadded.pop_back();
    EXPECT_EQ(load("DATA:IMAGE/PNG;base64," + unpadded), std::vector<uint8_t>(s.begin(), s.end())) << s;
  }
  EXPECT_EQ(load("data:image/jpeg;base64,YWJj\r\nZGVm"), (std::vector<uint8_t>{'a', 'b', 'c', 'd', 'e', 'f'}));
  EXPECT_EQ(load("data:image/png;name=x.png;base64,YQ=="), std::vector<uint8_t>{'a'});
}

TEST(MediaUrl, DomainsAreHostNamesSeparatedBySpacesOrCommas) {
  using V = std::vector<std::string>;
  EXPECT_EQ(engine::media_domains({"upload.wikimedia.org"}), V{"upload.wikimedia.org"});
  EXPECT_EQ(engine::media_domains({"A.example, b.example c.example", "127.0.0.1"}),
            (V{"a.example", "b.example", "c.example", "127.0.0.1"}));
  EXPECT_EQ(engine::media_domains({}), V{});
  for (const char* bad : {"https://x.example", "x.example/a", "x.example:8080", "user@x.example", "", " , "}) {
    try {
      engine::media_domains({bad}, "allowed_media_domains");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("allowed_media_domains: '") + bad + "' is not a host name (e.g. upload.wikimedia.org)");
    }
  }
}

TEST(MediaUrl, MessagesNameTheSettingsAsTheFrontEndSpellsThem) {
  engine::MediaUrlOptions o;
  o.local_path_option = "allowed_local_media_path";
  o.domains_option = "allowed_media_domains";
  EXPECT_EQ(load_error("file:///etc/passwd", o),
            "image 1: cannot load local files (file:// URLs) without `allowed_local_media_path`");
  EXPECT_NE(load_error("https://example.com/a.png", o).find("remote fetching is not enabled (allowed_media_domains)"),
            std::string::npos);
  o.allowed_media_domains = {"127.0.0.1"};
  EXPECT_NE(load_error("https://example.com/a.png", o).find("allowed domains (allowed_media_domains), got host"),
            std::string::npos);
  try {
    engine::canonical_media_dir("/nonexistent/fp4lm-media", "allowed_local_media_path");
    ADD_FAILURE() << "accepted a missing directory";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("allowed_local_media_path: '/nonexistent/fp4lm-media': ", 0), 0u) << e.what();
  }
}

TEST(MediaUrl, EveryRefusalNamesTheImage) {
  const auto has = [](const std::string& e, const std::string& what) {
    EXPECT_EQ(e.rfind("image 1: ", 0), 0u) << e;
    EXPECT_NE(e.find(what), std::string::npos) << e;
  };
  has(load_error("data:image/png;base64,ab$d"), "not base64: byte 0x24 at offset 2");
  has(load_error("data:image/png;base64,abcde"), "do not make whole bytes");
  has(load_error("data:image/png;base64,ab=c"), "data after '=' padding");
  has(load_error("data:text/plain;base64,aGVsbG8="), "media type 'text/plain'; expected an image");
  has(load_error("data:;base64,aGVsbG8="), "media type ''");
  has(load_error("data:image/png,%89PNG"), "only base64 data URLs are supported");
  has(load_error("data:image/png;base64"), "needs a ','");
  has(load_error("https://example.com/cat.png"), "remote fetching is not enabled");
  has(load_error("http://127.0.0.1/cat.png"), "remote fetching is not enabled");
  has(load_error("ftp://example.com/cat.png"), "must be a data:, file:// or http(s) URL, got 'ftp://");
  engine::MediaUrlOptions remote;
  remote.allowed_media_domains = {"127.0.0.1"};
  has(load_error("https://example.com/cat.png", remote), "allowed domains (--allowed-media-domains), got host 'example.com'");
  has(load_error("http://127.0.0.1.evil.example/cat.png", remote), "got host '127.0.0.1.evil.example'");
  has(load_error("http://user@/cat.png", remote), "got host ''");
  has(load_error("file:///etc/passwd"), "without `--allowed-local-media-path`");
  engine::MediaUrlOptions small;
  small.max_bytes = 4;
  has(load_error(data_url("abcdefgh"), small), "more than the 4 bytes");
}

TEST(MediaUrl, FileUrlsOnlyUnderTheAllowedDirectory) {
  test::TempDir tmp;
  fs::create_directories(tmp / "media/sub");
  test::write_file(tmp / "media/sub/a b.png", "PNGDATA");
  test::write_file(tmp / "secret.png", "SECRET");
  fs::create_symlink(tmp / "secret.png", tmp / "media/link.png");
  ASSERT_EQ(mkfifo((tmp / "media/fifo.png").c_str(), 0600), 0);
  engine::MediaUrlOptions o;
  o.allowed_local_media_path = engine::canonical_media_dir((tmp / "media").string());
  const std::string root = "file://" + fs::canonical(tmp.path()).string();
  EXPECT_EQ(load(root + "/media/sub/a%20b.png", o), (std::vector<uint8_t>{'P', 'N', 'G', 'D', 'A', 'T', 'A'}));
  EXPECT_EQ(load("file://localhost" + fs::canonical(tmp.path()).string() + "/media/sub/a%20b.png", o).size(), 7u);
  const auto outside = [&](const std::string& url) {
    const std::string e = load_error(url, o);
    EXPECT_NE(e.find("must be a subpath of `--allowed-local-media-path"), std::string::npos) << url << ": " << e;
  };
  outside(root + "/secret.png");
  outside(root + "/media/../secret.png");        // .. out of the directory
  outside(root + "/media/sub/%2e%2e/../secret.png");  // percent-encoded ..
  outside(root + "/media/link.png");             // a symlink out of it
  outside(root + "/media");                      // the directory itself
  outside("file:///etc/passwd");
  EXPECT_NE(load_error("file://evil.example/etc/passwd", o).find("only local paths"), std::string::npos);
  // A FIFO cannot hold the request; a directory inside is not a file; a missing file is named.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(load_error(root + "/media/fifo.png", o).find("is not a regular file"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_NE(load_error(root + "/media/sub", o).find("is not a regular file"), std::string::npos);
  EXPECT_NE(load_error(root + "/media/none.png", o).find("cannot read"), std::string::npos);
  // The flag's own checks.
  EXPECT_THROW(engine::canonical_media_dir((tmp / "missing").string()), UsageError);
  EXPECT_THROW(engine::canonical_media_dir((tmp / "secret.png").string()), UsageError);
}

// The tiny Qwen3.5 VL of tests/cli/fixtures/qwen3_5_vl_e2e/dense served without sockets.
class ChatImages : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (test::source_dir() / "tests/cli/fixtures/qwen3_5_vl_e2e/dense").string();
    model::EngineOptions o;
    o.dtype = "float32";
    lm_ = model::CausalLM::load(dir_, o).release();
    input_ = engine::ImageInput::for_model(*lm_, dir_).release();
    tok_ = tokenizer::Tokenizer::from_dir(dir_).release();
    chat_ = new tokenizer::ChatTemplate(tokenizer::ChatTemplate::from_dir(dir_));
  }
  static void TearDownTestSuite() {
    delete chat_;
    delete tok_;
    delete input_;
    delete lm_;
  }
  void SetUp() override {
    m_.name = "vl";
    m_.path = dir_;
    m_.tok = tok_;
    m_.chat = chat_;
    m_.max_model_len = lm_->max_model_len();
    m_.vocab_size = lm_->vocab_size();
    m_.images = input_;
    golden_ = io::read_json_file(dir_ + "/golden.json");
  }
  // A user message: one image part per url, then the golden's text.
  static json body(const std::vector<json>& images, json extra = json::object()) {
    json content = json::array();
    for (const json& u : images) content.push_back(u.is_string() ? json{{"type", "image_url"}, {"image_url", {{"url", u}}}} : u);
    content.push_back({{"type", "text"}, {"text", "What is in the picture?"}});
    json b = {{"messages", json::array({{{"role", "user"}, {"content", content}}})}};
    b.update(extra);
    return b;
  }
  ApiRequest parse(const json& b) {
    ApiRequest r = parse_chat_request(b, m_, 1);
    attach_chat_images(r, b, m_);
    return r;
  }
  // The 400's message and param.
  std::pair<std::string, std::string> error_of(const json& b) {
    try {
      parse(b);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return {e.what(), e.param};
    }
    return {"", ""};
  }

  static std::string dir_;
  static model::CausalLM* lm_;
  static engine::ImageInput* input_;
  static tokenizer::Tokenizer* tok_;
  static tokenizer::ChatTemplate* chat_;
  ServingModel m_;
  json golden_;
};
std::string ChatImages::dir_;
model::CausalLM* ChatImages::lm_ = nullptr;
engine::ImageInput* ChatImages::input_ = nullptr;
tokenizer::Tokenizer* ChatImages::tok_ = nullptr;
tokenizer::ChatTemplate* ChatImages::chat_ = nullptr;

TEST_F(ChatImages, ADataUrlGivesTheProcessorsPromptIds) {
  const ApiRequest r = parse(body({data_url(image_file("rgb_56x84.png"))}));
  EXPECT_EQ(r.params.prompt, golden_["prompt_ids"].get<std::vector<int32_t>>());
  ASSERT_NE(r.params.images, nullptr);
  EXPECT_EQ(r.params.images->count, 1);
  EXPECT_EQ(r.params.max_tokens, m_.max_model_len - static_cast<int64_t>(r.params.prompt.size()));
  // vLLM's untyped forms give the same prompt.
  for (const json& part : {json{{"image_url", data_url(image_file("rgb_56x84.png"))}},
                           json{{"image_url", {{"url", data_url(image_file("rgb_56x84.png"))}, {"detail", "auto"}}}}})
    EXPECT_EQ(parse(body({part})).params.prompt, r.params.prompt);
}

TEST_F(ChatImages, TwoImagesAndAJpegEachGetTheirPlaceholderRun) {
  const ApiRequest r = parse(body({data_url(image_file("rgb_56x84.png")), data_url(image_file("rgb_33x47.jpg"), "image/jpeg")}));
  // Runs of <|image_pad|> (261) between <|vision_start|> (259) and <|vision_end|> (260): the PNG's
  // 8 x 10 patch grid (the processor's, golden.json) and the JPEG's tokens_for its size.
  std::vector<size_t> runs;
  for (size_t i = 0; i < r.params.prompt.size(); ++i)
    if (r.params.prompt[i] == 259) {
      size_t j = i + 1;
      while (r.params.prompt[j] == 261) ++j;
      EXPECT_EQ(r.params.prompt[j], 260);
      runs.push_back(j - i - 1);
    }
  EXPECT_EQ(runs, (std::vector<size_t>{20, static_cast<size_t>(input_->tokens_for(33, 47))}));
  EXPECT_EQ(r.params.images->count, 2);
}

TEST_F(ChatImages, PartShapesAsVllmChecksThem) {
  const std::string png = data_url(image_file("rgb_56x84.png"));
  auto e = error_of(body({json{{"type", "image_url"}, {"image_url", png}}}));  // typed: an object, as OpenAI's type
  EXPECT_EQ(e.second, "messages[0].content[0].image_url");
  e = error_of(body({json{{"type", "image_url"}, {"image_url", {{"detail", "auto"}}}}}));
  EXPECT_EQ(e.second, "messages[0].content[0].image_url.url");
  e = error_of(body({json{{"type", "image_url"}, {"image_url", {{"url", png}, {"detail", "high"}}}}}));
  EXPECT_EQ(e.second, "messages[0].content[0].image_url.detail");
  e = error_of(body({json{{"type", "image_url"}, {"image_url", {{"url", png}}}, {"uuid", "x"}}}));
  EXPECT_EQ(e.second, "messages[0].content[0].uuid");
  e = error_of(body({json{{"type", "video_url"}, {"video_url", {{"url", png}}}}}));
  EXPECT_EQ(e.second, "messages[0].content[0].type");
  EXPECT_NE(e.first.find("image parts"), std::string::npos) << e.first;
  EXPECT_NE(e.first.find("video_url parts are not supported: the server decodes no video files"), std::string::npos)
      << e.first;
  // Fields that cannot be combined with images.
  EXPECT_EQ(error_of(body({png}, {{"truncate_prompt_tokens", 10}})).second, "truncate_prompt_tokens");
  EXPECT_EQ(error_of(body({png}, {{"use_beam_search", true}})).second, "use_beam_search");
  EXPECT_EQ(error_of(body({png}, {{"mm_processor_kwargs", {{"max_pixels", 100}}}})).second, "mm_processor_kwargs");
  EXPECT_EQ(parse(body({png}, {{"mm_processor_kwargs", json::object()}})).params.images->count, 1);
  // /tokenize renders messages without images.
  try {
    parse_tokenize_request(body({png}), m_);
    ADD_FAILURE() << "no error";
  } catch (const ApiError& err) {
    EXPECT_EQ(err.param, "messages[0].content[0].image_url.url");
  }
}

TEST_F(ChatImages, HostileImagesAre400sNamingTheImage) {
  const std::string png = image_file("rgb_56x84.png");
  const std::string field1 = "messages[0].content[1].image_url.url";
  const auto check = [&](const json& b, const std::string& what) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto [msg, param] = error_of(b);
    EXPECT_EQ(msg.rfind("image 2", 0), 0u) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(param, field1);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  };
  // The first image is fine; the second is the hostile one.
  const std::string good = data_url(png);
  check(body({good, data_url(png_bomb())}), "PNG image of 20000x20000 pixels is larger than the limit");
  check(body({good, data_url(png.substr(0, png.size() / 2))}), "corrupt or truncated PNG");
  check(body({good, "data:text/plain;base64,aGVsbG8="}), "media type 'text/plain'");
  check(body({good, data_url("hello, not an image")}), "not an image fp4lm decodes");
  check(body({good, "data:image/png;base64,%%%"}), "not base64");
  check(body({good, "file:///etc/passwd"}), "--allowed-local-media-path");
  check(body({good, "https://example.com/x.png"}), "remote fetching is not enabled");
  // Too large for the context: named before the tower runs, from the decoded size. The prompt
  // has 46 tokens besides two images' 20 placeholders each.
  m_.max_model_len = 80;
  check(body({good, good}), "image 2 (20 tokens for its 84x56 pixels) makes the prompt 86 tokens, more than the "
                            "model's context of 80");
  m_.max_model_len = 60;  // the prompt with one image is 64 tokens
  const auto e = error_of(body({good}));
  EXPECT_EQ(e.first.rfind("image 1 (20 tokens", 0), 0u) << e.first;
}

TEST_F(ChatImages, LimitsTemplateAndModelWithoutATower) {
  const std::string good = data_url(image_file("rgb_56x84.png"));
  m_.image_limit = 1;
  auto e = error_of(body({good, good}));
  EXPECT_EQ(e.first, "image 2: At most 1 image(s) may be provided in one prompt (--limit-mm-per-prompt), and this "
                     "request has 2");
  EXPECT_EQ(e.second, "messages[0].content[1].image_url.url");
  m_.image_limit = 999;
  // A model without a vision tower: engine::refuse_images's words, naming the model.
  m_.images = nullptr;
  e = error_of(body({good}));
  EXPECT_EQ(e.first, "model 'vl' has no vision tower fp4lm runs: it does not accept image inputs");
  m_.images = input_;
  // A template that renders only string contents drops the image: never a silent text-only prompt.
  const tokenizer::ChatTemplate text_only("{% for m in messages %}{% if m.content is string %}{{ m.content }}{% endif %}"
                                          "{% endfor %}ok",
                                          "", "");
  m_.chat = &text_only;
  e = error_of(body({good}));
  EXPECT_NE(e.first.find("rendered 0 image placeholder(s) (token id 261) for 1 image part(s)"), std::string::npos)
      << e.first;
}

// Gemma 3 through the same path (tests/model/fixtures/gemma3_vl): the template's <start_of_image>
// is the placeholder, expanded as Gemma3Processor; the image tokens carry their block.
TEST(ChatImagesGemma3, ADataUrlGivesTheProcessorsPromptIdsAndBlocks) {
  const std::string dir = (test::source_dir() / "tests/model/fixtures/gemma3_vl").string();
  model::EngineOptions o;
  o.dtype = "float32";
  const auto lm = model::CausalLM::load(dir, o);
  const auto input = engine::ImageInput::for_model(*lm, dir);
  ASSERT_NE(input, nullptr);
  const auto tok = tokenizer::Tokenizer::from_dir(dir);
  const auto chat = tokenizer::ChatTemplate::from_dir(dir);
  ServingModel m;
  m.name = "gemma3";
  m.path = dir;
  m.tok = tok.get();
  m.chat = &chat;
  m.max_model_len = lm->max_model_len();
  m.vocab_size = lm->vocab_size();
  m.images = input.get();
  const json golden = io::read_json_file(dir + "/golden.json")["e2e"][0];
  const json b = {{"messages", json::array({{{"role", "user"},
                                             {"content", json::array({{{"type", "image_url"},
                                                                       {"image_url", {{"url", data_url(image_file("rgb_56x84.png"))}}}},
                                                                      {{"type", "text"}, {"text", golden["text"]}}})}}})}};
  ApiRequest r = parse_chat_request(b, m, 1);
  attach_chat_images(r, b, m);
  EXPECT_EQ(r.params.prompt, golden["prompt_ids"].get<std::vector<int32_t>>());
  ASSERT_NE(r.params.images, nullptr);
  const auto types = golden["token_type_ids"].get<std::vector<int>>();
  ASSERT_EQ(r.params.images->bidir_end.size(), types.size());
  for (size_t i = 0; i < types.size(); ++i) EXPECT_EQ(r.params.images->bidir_end[i] >= 0, types[i] == 1) << i;
}

// Gemma 4 (tests/model/fixtures/gemma4_vl, scripts/make_gemma4_vl_goldens.py): the same request
// gives Gemma4Processor's prompt ids (<|image|> -> boi, 60 soft tokens, eoi) and its
// mm_token_type_ids as the image's block; the server needs nothing else for Gemma 4.
TEST(ChatImagesGemma4, ADataUrlGivesTheProcessorsPromptIdsAndBlock) {
  const std::string dir = (test::source_dir() / "tests/model/fixtures/gemma4_vl").string();
  model::EngineOptions o;
  o.dtype = "float32";
  const auto lm = model::CausalLM::load(dir, o);
  const auto input = engine::ImageInput::for_model(*lm, dir);
  ASSERT_NE(input, nullptr);
  const auto tok = tokenizer::Tokenizer::from_dir(dir);
  const auto chat = tokenizer::ChatTemplate::from_dir(dir);
  ServingModel m;
  m.name = "gemma4";
  m.path = dir;
  m.tok = tok.get();
  m.chat = &chat;
  m.max_model_len = lm->max_model_len();
  m.vocab_size = lm->vocab_size();
  m.images = input.get();
  const json golden = io::read_json_file(dir + "/golden.json")["e2e"][0];
  ASSERT_EQ(golden["image"], "tests/vision/data/rgb_56x84.png");
  const json b = {{"messages", json::array({{{"role", "user"},
                                             {"content", json::array({{{"type", "image_url"},
                                                                       {"image_url", {{"url", data_url(image_file("rgb_56x84.png"))}}}},
                                                                      {{"type", "text"}, {"text", golden["text"]}}})}}})}};
  ApiRequest r = parse_chat_request(b, m, 1);
  attach_chat_images(r, b, m);
  EXPECT_EQ(r.params.prompt, golden["prompt_ids"].get<std::vector<int32_t>>());
  ASSERT_NE(r.params.images, nullptr);
  const auto types = golden["mm_token_type_ids"].get<std::vector<int>>();
  ASSERT_EQ(r.params.images->bidir_end.size(), types.size());
  for (size_t i = 0; i < types.size(); ++i) EXPECT_EQ(r.params.images->bidir_end[i] >= 0, types[i] == 1) << i;
}

}  // namespace
}  // namespace fp4lm::server::chat_images_test
