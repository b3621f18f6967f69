// A DiffusionGemma model in the API layer (ServingModel::canvas_length > 0): a request without
// max_tokens takes the whole canvases that fit the context (a partial canvas cannot run), and
// beam search / best_of > n, which need per-token logprobs, are 400s naming the field. The other
// refusals are the engine's (tests/engine/diffusion_queue_test.cpp, tests/server_http).
#include <gtest/gtest.h>

#include "../tokenizer/tokenizer_fixtures.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace fp4lm::server::diffusion_request_test {
namespace {

class DiffusionRequest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = tokenizer::Tokenizer::from_json(tokenizer::fixtures::gpt2().dump(), "");
    chat_ = std::make_unique<tokenizer::ChatTemplate>(
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}",
        "", "");
    m_.name = "dg";
    m_.path = "/models/dg";
    m_.tok = tok_.get();
    m_.chat = chat_.get();
    m_.max_model_len = 64;
    m_.vocab_size = 269;
    m_.canvas_length = 8;
  }
  std::string param_of(const std::string& body) {
    try {
      parse_completion_request(parse_body(body), m_, 1);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return e.param;
    }
    return "(accepted)";
  }

  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<tokenizer::ChatTemplate> chat_;
  ServingModel m_;
};

TEST_F(DiffusionRequest, WithoutMaxTokensChatTakesTheWholeCanvasesThatFit) {
  const std::string body = R"({"messages": [{"role": "user", "content": "hello"}]})";
  const ApiRequest r = parse_chat_request(parse_body(body), m_, 1);
  const int64_t prompt = static_cast<int64_t>(r.params.prompt.size());
  ASSERT_NE((64 - prompt) % 8, 0) << "pick a prompt that leaves a partial canvas";
  EXPECT_EQ(r.params.max_tokens, (64 - prompt) / 8 * 8);
  m_.canvas_length = 0;  // a token-by-token model: the whole rest of the context
  EXPECT_EQ(parse_chat_request(parse_body(body), m_, 1).params.max_tokens, 64 - prompt);
  // An explicit max_tokens is the client's (the engine checks that its canvases fit).
  m_.canvas_length = 8;
  const std::string explicit_body = R"({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 5})";
  EXPECT_EQ(parse_chat_request(parse_body(explicit_body), m_, 1).params.max_tokens, 5);
}

TEST_F(DiffusionRequest, BeamSearchAndBestOfAreRefusedByName) {
  EXPECT_EQ(param_of(R"({"prompt": "hi", "max_tokens": 8, "use_beam_search": true, "n": 2})"), "use_beam_search");
  EXPECT_EQ(param_of(R"({"prompt": "hi", "max_tokens": 8, "n": 1, "best_of": 2})"), "best_of");
  EXPECT_EQ(param_of(R"({"prompt": "hi", "max_tokens": 8, "n": 2})"), "(accepted)");  // independent samples
  m_.canvas_length = 0;
  EXPECT_EQ(param_of(R"({"prompt": "hi", "max_tokens": 8, "n": 1, "best_of": 2})"), "(accepted)");
}

}  // namespace
}  // namespace fp4lm::server::diffusion_request_test
