#pragma once
// A chat completion's output text split the way vLLM's --reasoning-parser and
// --tool-call-parser split it: reasoning (<think>...</think>) into `reasoning_content`, the text
// before any tool calls into `content`, and the calls into `tool_calls`. Fed incrementally
// (streaming) or all at once (feed + finish), with the same result: text that may still turn
// into a marker is held back until it is decided.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/tool_call_parser.h"

#include <memory>

namespace fp4lm::server {

// vLLM's reasoning parsers of the <think> family.
//   qwen3        reasoning only when the output opens with <think> (Qwen3's templates with
//                enable_thinking=false put an empty think block in the prompt instead)
//   deepseek_r1  the output starts inside the reasoning (the template opened <think>); an
//                output without </think> is all reasoning
// and gpt-oss's harmony channels (server/harmony_parser.h):
//   openai_gptoss  analysis -> reasoning, final -> content, commentary to=functions.NAME -> tool
//                  calls (with --tool-call-parser openai)
enum class ReasoningKind { none, qwen3, deepseek_r1, openai_gptoss };
// UsageError naming the known parsers for an unknown name.
ReasoningKind reasoning_kind(const std::string& name);
std::vector<std::string> reasoning_parser_names();

struct ToolCallDelta {
  size_t index = 0;
  std::string id, name;  // set on a call's first delta only
  std::string arguments;
};

struct ChatDelta {
  std::string reasoning, content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class HarmonyParser;

class ChatOutputParser {
 public:
  // `tools`: the request's tools (qwen3_coder types parameters by them); `tool_parser` null: no
  // tool-call parsing. Both pointees outlive the parser.
  ChatOutputParser(ReasoningKind reasoning, const ToolCallParser* tool_parser, const nlohmann::json* tools);
  ChatDelta feed(std::string_view text);
  // No more text: whatever was held back is decided.
  ChatDelta finish();
  size_t tool_calls() const;

 private:
  enum class Phase { start, reasoning, content, tools, plain };
  void step(bool final, ChatDelta& d);
  void content_step(bool final, ChatDelta& d);

  ReasoningKind reasoning_;
  const ToolCallParser* tool_parser_;
  const nlohmann::json* tools_;
  Phase phase_;
  std::string pending_;   // text not yet assigned to a phase
  std::string content_;   // all content-phase text (tool sections are found in it)
  size_t content_emitted_ = 0;
  std::string section_;   // the tool-call section so far
  size_t calls_emitted_ = 0;
  std::shared_ptr<HarmonyParser> harmony_;  // gpt-oss output (openai_gptoss / openai)
};

}  // namespace fp4lm::server
