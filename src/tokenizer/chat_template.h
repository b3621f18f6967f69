#pragma once
// Chat templates: the Jinja template a checkpoint ships in tokenizer_config.json, rendered the way
// Hugging Face's apply_chat_template renders it (same variables, same whitespace handling, same
// tojson), so the prompt fp4lm builds is byte-identical to the one the model was trained on.
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace fp4lm::tokenizer {

namespace jinja {
struct Program;
}

struct ChatOptions {
  bool add_generation_prompt = false;
  std::optional<bool> enable_thinking;  // undefined in the template unless set
  nlohmann::json tools = nullptr;       // null -> `tools` is none
  nlohmann::json extra = nlohmann::json::object();  // more template variables (override the rest)
};

class ChatTemplate {
 public:
  // Reads tokenizer_config.json (chat_template as a string, or a list of {name, template} ->
  // "default"; bos_token/eos_token as strings or {"content": ...} objects). A separate
  // chat_template.jinja (or chat_template.json) in the directory wins over the config's.
  static ChatTemplate from_dir(const std::string& dir);
  // Parses the template once; syntax errors throw fp4lm::Error with line and column.
  ChatTemplate(std::string source, std::string bos_token, std::string eos_token);

  // messages: a JSON array of {role, content, ...}. Errors (including the template's own
  // raise_exception) throw fp4lm::Error.
  std::string render(const nlohmann::json& messages, const ChatOptions& opts) const;
  // The same, keeping the key order of the JSON objects as written (nlohmann::json sorts keys;
  // Python keeps insertion order, which `tojson` of tools and arguments shows). Used by the CLI.
  std::string render_ordered(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                             const ChatOptions& opts) const;

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  template <typename Json>
  std::string render_impl(const Json& messages, const Json& tools, const ChatOptions& opts) const;

  std::string source_, bos_token_, eos_token_;
  std::string origin_;  // where the template came from, for error messages
  std::shared_ptr<const jinja::Program> program_;  // immutable, shared by copies
};

}  // namespace fp4lm::tokenizer
