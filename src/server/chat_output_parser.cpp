#include "server/chat_output_parser.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "server/harmony_parser.h"

namespace fp4lm::server {

namespace {
constexpr std::string_view kThinkStart = "<think>", kThinkEnd = "</think>";
}  // namespace

std::vector<std::string> reasoning_parser_names() { return {"deepseek_r1", "openai_gptoss", "qwen3"}; }

ReasoningKind reasoning_kind(const std::string& name) {
  if (name.empty()) return ReasoningKind::none;
  if (name == "qwen3") return ReasoningKind::qwen3;
  if (name == "deepseek_r1") return ReasoningKind::deepseek_r1;
  if (name == "openai_gptoss") return ReasoningKind::openai_gptoss;
  throw UsageError(fmt::format("unknown reasoning parser '{}' (known: {})", name, fmt::join(reasoning_parser_names(), ", ")));
}

ChatOutputParser::ChatOutputParser(ReasoningKind reasoning, const ToolCallParser* tool_parser,
                                   const nlohmann::json* tools)
    : reasoning_(reasoning), tool_parser_(tool_parser), tools_(tools),
      phase_(reasoning == ReasoningKind::none ? Phase::content : Phase::start) {
  // Harmony output is parsed as a whole by its own parser: channels, not <think>.
  if (reasoning == ReasoningKind::openai_gptoss || (tool_parser && tool_parser->name() == "openai"))
    harmony_ = std::make_shared<HarmonyParser>(tool_parser != nullptr);
}

size_t ChatOutputParser::tool_calls() const { return harmony_ ? harmony_->tool_calls() : calls_emitted_; }

ChatDelta ChatOutputParser::feed(std::string_view text) {
  ChatDelta d;
  if (harmony_) {
    harmony_->feed(text, false, d);
    return d;
  }
  pending_ += text;
  step(false, d);
  return d;
}

ChatDelta ChatOutputParser::finish() {
  ChatDelta d;
  if (harmony_) {
    harmony_->feed("", true, d);
    return d;
  }
  step(true, d);
  return d;
}

void ChatOutputParser::step(bool final, ChatDelta& d) {
  if (phase_ == Phase::start) {
    // Undecided while the text so far may still be "<think>".
    if (!final && pending_.size() < kThinkStart.size() && kThinkStart.substr(0, pending_.size()) == pending_) return;
    if (pending_.starts_with(kThinkStart)) {
      pending_.erase(0, kThinkStart.size());
      phase_ = Phase::reasoning;
    } else {
      phase_ = reasoning_ == ReasoningKind::deepseek_r1 ? Phase::reasoning : Phase::content;
    }
  }
  if (phase_ == Phase::reasoning) {
    const size_t end = pending_.find(kThinkEnd);
    if (end == std::string::npos) {
      const size_t keep = final ? 0 : partial_marker_suffix(pending_, kThinkEnd);
      d.reasoning += pending_.substr(0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      return;
    }
    d.reasoning += pending_.substr(0, end);
    pending_.erase(0, end + kThinkEnd.size());
    phase_ = Phase::content;
  }
  content_step(final, d);
}

void ChatOutputParser::content_step(bool final, ChatDelta& d) {
  if (phase_ == Phase::plain || (phase_ == Phase::content && !tool_parser_)) {
    d.content += pending_;
    pending_.clear();
    return;
  }
  if (phase_ == Phase::content) {
    content_ += pending_;
    pending_.clear();
    const SectionStart s = tool_parser_->find_section(content_);
    const size_t end = s.found || !final ? s.content_end : content_.size();
    d.content += content_.substr(content_emitted_, end - content_emitted_);
    content_emitted_ = end;
    if (!s.found) return;
    section_ = content_.substr(s.content_end);
    phase_ = Phase::tools;
  } else {
    section_ += pending_;
    pending_.clear();
  }
  const auto calls = tool_parser_->complete_calls(section_, final, *tools_);
  if (!calls) {  // malformed: the section is plain text after all
    d.content += section_;
    section_.clear();
    phase_ = Phase::plain;
    return;
  }
  for (; calls_emitted_ < calls->size(); ++calls_emitted_) {
    const ParsedToolCall& c = (*calls)[calls_emitted_];
    d.tool_calls.push_back({calls_emitted_, tool_parser_->make_id(), c.name, c.arguments});
  }
  // A section that ends without a single call was text that only looked like one.
  if (final && calls_emitted_ == 0) {
    d.content += section_;
    section_.clear();
    phase_ = Phase::plain;
  }
}

}  // namespace fp4lm::server
