#pragma once
// Tool-call parsers, selected with `--tool-call-parser` as in vLLM: each knows how one model
// family writes function calls in its output text, and splits that text into the message content
// (the text before the calls) and the calls (a function name and its arguments as JSON text).
//   hermes        Qwen2.5 / Qwen3 / Hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//   qwen3_coder   Qwen3-Coder / Qwen3.5 / Qwen3-Next: <tool_call><function=NAME><parameter=P>
//                 value</parameter></function></tool_call>, values typed by the tool's schema
//   llama3_json   Llama 3.x: the output is {"name": ..., "parameters": {...}} (several joined by
//                 "; "), optionally after <|python_tag|>
//   mistral       Mistral: [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] or
//                 [TOOL_CALLS]NAME[ARGS]{...}
//   deepseek_v3   DeepSeek-V3 / R1: <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME ```json ...```
//                 <｜tool▁call▁end｜> inside <｜tool▁calls▁begin｜>...; V3.1's NAME<｜tool▁sep｜>ARGS
//   openai        gpt-oss (harmony): <|channel|>commentary to=functions.NAME ...<|message|>ARGS<|call|>;
//                 parsed with the message channels by server/harmony_parser.h, not section-wise
// A parser is stateless; streaming state lives in ChatOutputParser.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp4lm::server {

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON text, as Python's json.dumps writes it (vLLM's shape)
};

// Where the tool-call section begins in an output text seen so far.
struct SectionStart {
  size_t content_end = 0;  // text before this is content for sure
  bool found = false;      // true: the section starts at content_end; false: the text from
                           // content_end on may still become the start of one (held back)
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  virtual std::string name() const = 0;
  virtual SectionStart find_section(std::string_view text) const = 0;
  // The calls complete in `section` (the text from the section's start on). `final`: no more text
  // comes, so an unterminated last call is parsed as it is. nullopt: a call is malformed (the
  // section is then plain content, as vLLM returns unparseable calls).
  virtual std::optional<std::vector<ParsedToolCall>> complete_calls(std::string_view section, bool final,
                                                                    const nlohmann::json& tools) const = 0;
  // A new tool call id ("chatcmpl-tool-<32 hex>"; Mistral's templates want 9 alphanumerics).
  virtual std::string make_id() const;
};

// vLLM's tool call id: "chatcmpl-tool-" and 32 hex digits.
std::string make_tool_call_id();

// UsageError naming the known parsers for an unknown name.
std::unique_ptr<ToolCallParser> make_tool_call_parser(const std::string& name);
std::vector<std::string> tool_call_parser_names();

// json.dumps(value, ensure_ascii=False): ", " and ": " separators, keys in the given order.
std::string python_json_dumps(const nlohmann::ordered_json& value);

// The length of the longest suffix of `text` that is a proper prefix of `marker` (text a stream
// must hold back because it may become `marker`).
size_t partial_marker_suffix(std::string_view text, std::string_view marker);

}  // namespace fp4lm::server
