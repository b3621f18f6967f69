#include "tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/json_file.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"

namespace fp4lm::tokenizer {
namespace {

std::string read_text(const std::filesystem::path& p) { return io::read_text_file(p.string()); }

// bos_token / eos_token: a string, null, or an AddedToken object {"content": ..., ...}.
std::string special_token(const nlohmann::json& config, const char* key, const std::string& file) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  fail("{}: '{}' must be a string or an object with a string 'content', found {}", file, key,
       it->type_name());
}

std::string template_from_config(const nlohmann::json& value, const std::string& file) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    std::string names;
    for (const auto& entry : value) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
          !entry["template"].is_string())
        fail("{}: 'chat_template' list entries must be objects with 'name' and 'template'", file);
      if (entry["name"] == "default") return entry["template"].get<std::string>();
      names += (names.empty() ? "" : ", ") + entry["name"].dump();
    }
    fail("{}: 'chat_template' has no template named \"default\" (found: {})", file, names);
  }
  fail("{}: 'chat_template' must be a string or a list of {{name, template}}, found {}", file,
       value.type_name());
}

}  // namespace

ChatTemplate ChatTemplate::from_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  std::string file = config_path.string();
  if (!fs::exists(config_path)) fail("{}: not found (needed for the chat template)", file);
  nlohmann::json config = io::parse_json(read_text(config_path), file);
  if (!config.is_object()) fail("{}: expected a JSON object, found {}", file, config.type_name());

  // Newer checkpoints keep the template beside the config.
  std::string source, origin = file;
  fs::path jinja_path = fs::path(dir) / "chat_template.jinja";
  fs::path json_path = fs::path(dir) / "chat_template.json";
  if (fs::exists(jinja_path)) {
    source = read_text(jinja_path);
    origin = jinja_path.string();
  } else if (fs::exists(json_path)) {
    origin = json_path.string();
    nlohmann::json j = io::parse_json(read_text(json_path), origin);
    if (!j.is_object() || !j.contains("chat_template")) fail("{}: no 'chat_template' key", origin);
    source = template_from_config(j["chat_template"], origin);
  } else if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    source = template_from_config(config["chat_template"], file);
  } else {
    fail("{}: no 'chat_template' (and no chat_template.jinja beside it)", file);
  }

  std::string bos = special_token(config, "bos_token", file);
  std::string eos = special_token(config, "eos_token", file);
  try {
    ChatTemplate t(std::move(source), std::move(bos), std::move(eos));
    t.origin_ = origin;
    return t;
  } catch (const jinja::TemplateError& e) {
    fail("chat template in {}: {}", origin, e.what());
  }
}

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token)
    : source_(std::move(source)), bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)) {
  auto program = std::make_shared<jinja::Program>(jinja::parse(source_));
  jinja::validate(*program);
  program_ = std::move(program);
}

template <typename Json>
std::string ChatTemplate::render_impl(const Json& messages, const Json& tools, const ChatOptions& opts) const {
  if (!messages.is_array()) fail("chat messages must be a JSON array, found {}", messages.type_name());
  std::string where = origin_.empty() ? "chat template" : "chat template in " + origin_;
  std::vector<std::pair<std::string, jinja::Value>> ctx;
  try {
    ctx.emplace_back("messages", jinja::Value::from_json(messages));
    ctx.emplace_back("tools", jinja::Value::from_json(tools));
    ctx.emplace_back("documents", jinja::Value(jinja::None{}));
    ctx.emplace_back("add_generation_prompt", jinja::Value(opts.add_generation_prompt));
    ctx.emplace_back("bos_token", jinja::Value(bos_token_));
    ctx.emplace_back("eos_token", jinja::Value(eos_token_));
    if (opts.enable_thinking) ctx.emplace_back("enable_thinking", jinja::Value(*opts.enable_thinking));
    if (!opts.extra.is_null()) {
      if (!opts.extra.is_object()) fail("chat template extra variables must be a JSON object");
      for (auto it = opts.extra.begin(); it != opts.extra.end(); ++it) {
        jinja::Value v = jinja::Value::from_json(it.value());
        bool replaced = false;
        for (auto& kv : ctx)
          if (kv.first == it.key()) {
            kv.second = v;
            replaced = true;
          }
        if (!replaced) ctx.emplace_back(it.key(), std::move(v));
      }
    }
  } catch (const jinja::ValueError& e) {
    fail("{}: bad input: {}", where, e.what());
  }
  try {
    return jinja::render(*program_, ctx);
  } catch (const jinja::TemplateError& e) {
    fail("{}: {}", where, e.what());
  }
}

std::string ChatTemplate::render(const nlohmann::json& messages, const ChatOptions& opts) const {
  return render_impl(messages, opts.tools, opts);
}

std::string ChatTemplate::render_ordered(const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools,
                                         const ChatOptions& opts) const {
  return render_impl(messages, tools, opts);
}

}  // namespace fp4lm::tokenizer
