#pragma once
// gpt-oss's "harmony" output, split as vLLM's `--reasoning-parser openai_gptoss` and
// `--tool-call-parser openai` split it. After the generation prompt `<|start|>assistant` the model
// writes messages `[<|start|>assistant][ to=R]<|channel|>C[ to=R][ <|constrain|>json| json]<|message|>BODY`
// ended by `<|end|>`, `<|call|>` or `<|return|>` (the last two stop generation):
//   channel analysis                   -> reasoning_content
//   channel final (or commentary without a recipient, a preamble) -> content
//   recipient functions.NAME           -> a tool call NAME with BODY as its arguments (when tool
//                                         calls are parsed; else BODY is content)
// The special tokens must be in the text (the server decodes harmony output with
// skip_special_tokens false). Text that never forms a header (no <|message|> within 512 bytes,
// or at the end) is content as it stands. Fed incrementally or at once with the same result.
#include <string>
#include <string_view>

#include "server/chat_output_parser.h"

namespace fp4lm::server {

class HarmonyParser {
 public:
  explicit HarmonyParser(bool tool_calls) : tool_calls_(tool_calls) {}
  // Appends what `text` decides to d (reasoning, content, tool-call openings and argument chunks).
  void feed(std::string_view text, bool final, ChatDelta& d);
  size_t tool_calls() const { return calls_; }

 private:
  enum class Target { reasoning, content, tool };
  void emit(std::string_view s, ChatDelta& d);

  bool tool_calls_;
  bool in_body_ = false, plain_ = false;
  Target target_ = Target::content;
  std::string pending_;
  size_t calls_ = 0;
};

}  // namespace fp4lm::server
