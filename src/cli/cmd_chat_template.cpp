// `fp4lm chat-template`: renders a conversation with the model's chat template and prints the
// prompt exactly as the model will see it (no trailing newline added).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "io/json_file.h"
#include "tokenizer/chat_template.h"

namespace fp4lm::cli {
namespace {

struct ChatTemplateArgs {
  std::string model;
  std::string messages;
  bool add_generation_prompt = false;
  std::string enable_thinking;
  ModelFlags hub;
};

int run(ChatTemplateArgs& a) {
  tokenizer::ChatOptions opts;
  opts.add_generation_prompt = a.add_generation_prompt;
  if (!a.enable_thinking.empty()) {
    if (a.enable_thinking == "true") opts.enable_thinking = true;
    else if (a.enable_thinking == "false") opts.enable_thinking = false;
    else usage_fail("--enable-thinking must be 'true' or 'false', got '{}'", a.enable_thinking);
  }
  // The file holds the messages array, or an object {"messages": [...], "tools": [...]}.
  nlohmann::ordered_json doc = io::read_ordered_json_file(a.messages);
  nlohmann::ordered_json messages, tools = nullptr;
  if (doc.is_array()) {
    messages = std::move(doc);
  } else if (doc.is_object() && doc.contains("messages")) {
    messages = doc["messages"];
    if (doc.contains("tools")) tools = doc["tools"];
  } else {
    fail("{}: expected a JSON array of messages or an object with \"messages\", found {}", a.messages,
         doc.type_name());
  }
  if (!messages.is_array()) fail("{}: \"messages\" must be an array", a.messages);
  a.hub.resolve(a.model, io::hub::Need::tokenizer_only);
  auto tmpl = tokenizer::ChatTemplate::from_dir(a.model);
  std::string prompt = tmpl.render_ordered(messages, tools, opts);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  return 0;
}

CommandRegistration reg("chat-template", "Render a conversation with the model's chat template",
                        [](CLI::App& sub) {
                          auto a = std::make_shared<ChatTemplateArgs>();
                          add_model_flags(sub, a->model, a->hub, "Model directory (needs tokenizer_config.json)");
                          sub.add_option("--messages", a->messages,
                                         "JSON file: an array of {role, content} messages, or "
                                         "{\"messages\": [...], \"tools\": [...]}")
                              ->required();
                          sub.add_flag("--add-generation-prompt", a->add_generation_prompt,
                                       "End with the assistant turn's opening");
                          sub.add_option("--enable-thinking", a->enable_thinking,
                                         "true|false (passed to the template as enable_thinking)");
                          return [a]() -> int { return run(*a); };
                        });

}  // namespace
}  // namespace fp4lm::cli
