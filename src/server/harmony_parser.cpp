#include "server/harmony_parser.h"

#include <algorithm>
#include <array>

#include "server/tool_call_parser.h"

namespace fp4lm::server {

namespace {

constexpr std::string_view kMessage = "<|message|>", kChannel = "<|channel|>";
// What ends a message body: <|end|>, <|call|>, <|return|>, or the next message's <|start|>.
constexpr std::array<std::string_view, 4> kBodyEnds = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
constexpr size_t kMaxHeader = 512;

// The word after `key` in a header (up to a space or a special token), or "".
std::string_view header_field(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return {};
  std::string_view rest = header.substr(at + key.size());
  const size_t end = std::min(rest.find(' '), rest.find('<'));
  return rest.substr(0, end);
}

}  // namespace

void HarmonyParser::emit(std::string_view s, ChatDelta& d) {
  if (s.empty()) return;
  switch (target_) {
    case Target::reasoning: d.reasoning += s; break;
    case Target::content: d.content += s; break;
    case Target::tool:
      // One delta per call within one feed: arguments join the call's opening when it is there.
      if (!d.tool_calls.empty() && d.tool_calls.back().index == calls_ - 1) d.tool_calls.back().arguments += s;
      else d.tool_calls.push_back({calls_ - 1, "", "", std::string(s)});
      break;
  }
}

void HarmonyParser::feed(std::string_view text, bool final, ChatDelta& d) {
  pending_ += text;
  while (!pending_.empty()) {
    if (plain_) {
      d.content += pending_;
      pending_.clear();
      return;
    }
    if (!in_body_) {
      const size_t m = pending_.find(kMessage);
      if (m == std::string::npos) {
        // Not a header after all (a model that does not speak harmony): the rest is content.
        if (final || pending_.size() > kMaxHeader) plain_ = true;
        else return;
        continue;
      }
      const std::string_view header = std::string_view(pending_).substr(0, m);
      const std::string_view channel = header_field(header, kChannel), recipient = header_field(header, "to=");
      if (tool_calls_ && recipient.starts_with("functions.")) {
        target_ = Target::tool;
        d.tool_calls.push_back({calls_++, make_tool_call_id(), std::string(recipient.substr(10)), ""});
      } else {
        target_ = channel == "analysis" ? Target::reasoning : Target::content;
      }
      pending_.erase(0, m + kMessage.size());
      in_body_ = true;
      continue;
    }
    size_t end = std::string::npos, len = 0;
    for (std::string_view e : kBodyEnds)
      if (const size_t at = pending_.find(e); at < end) end = at, len = e.size();
    if (end == std::string::npos) {
      size_t keep = 0;
      if (!final)
        for (std::string_view e : kBodyEnds) keep = std::max(keep, partial_marker_suffix(pending_, e));
      emit(std::string_view(pending_).substr(0, pending_.size() - keep), d);
      pending_.erase(0, pending_.size() - keep);
      return;
    }
    emit(std::string_view(pending_).substr(0, end), d);
    pending_.erase(0, end + len);
    in_body_ = false;
  }
}

}  // namespace fp4lm::server
