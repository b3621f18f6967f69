// `fp4lm tokenize` and `fp4lm detokenize`: the model directory's tokenizer on the command line.
// Only tokenizer.json (+ tokenizer_config.json) is read, so --model may hold just those files.
#include <charconv>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::cli {
namespace {

// "1, 2,3" -> {1, 2, 3}; an empty string is an empty list.
std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  auto skip_spaces = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  };
  skip_spaces();
  if (i == s.size()) return ids;
  while (true) {
    skip_spaces();
    int32_t v = 0;
    auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), v);
    if (ec != std::errc() || v < 0)
      usage_fail("--ids: expected comma-separated non-negative token ids, found '{}' at position {}", s, i + 1);
    i = static_cast<size_t>(p - s.data());
    ids.push_back(v);
    skip_spaces();
    if (i == s.size()) break;
    if (s[i] != ',') usage_fail("--ids: expected ',' at position {} of '{}'", i + 1, s);
    ++i;
  }
  return ids;
}

CommandRegistration tokenize_reg(
    "tokenize", "Encode text to token ids with the model's tokenizer.json", [](CLI::App& sub) {
      struct Opts {
        std::string model, text;
        bool json = false, add_special = false;
        ModelFlags hub;
      };
      auto o = std::make_shared<Opts>();
      add_model_flags(sub, o->model, o->hub, "Model directory (only the tokenizer files are read)");
      sub.add_option("--text", o->text, "Text to encode")->required();
      sub.add_flag("--json", o->json, "Print {\"ids\": [...]} instead of comma-separated ids");
      sub.add_flag("--add-special-tokens", o->add_special, "Run the post-processor (e.g. insert BOS)");
      return [o]() -> int {
        o->hub.resolve(o->model, io::hub::Need::tokenizer_only);
        auto tok = tokenizer::Tokenizer::from_dir(o->model);
        auto ids = tok->encode(o->text, o->add_special);
        if (o->json) {
          std::printf("%s\n", nlohmann::json{{"ids", ids}}.dump().c_str());
        } else {
          std::string line;
          for (size_t k = 0; k < ids.size(); ++k) {
            if (k) line.push_back(',');
            line += std::to_string(ids[k]);
          }
          std::printf("%s\n", line.c_str());
        }
        return 0;
      };
    });

CommandRegistration detokenize_reg(
    "detokenize", "Decode token ids to text with the model's tokenizer.json", [](CLI::App& sub) {
      struct Opts {
        std::string model, ids;
        bool json = false, skip_special = false;
        ModelFlags hub;
      };
      auto o = std::make_shared<Opts>();
      add_model_flags(sub, o->model, o->hub, "Model directory (only the tokenizer files are read)");
      sub.add_option("--ids", o->ids, "Comma-separated token ids, e.g. 9707,11,1879")->required();
      sub.add_flag("--skip-special-tokens", o->skip_special, "Leave special tokens out of the text");
      sub.add_flag("--json", o->json, "Print {\"text\": \"...\"} (exact, escaped) instead of the text");
      return [o]() -> int {
        auto ids = parse_ids(o->ids);  // usage errors before touching the files
        o->hub.resolve(o->model, io::hub::Need::tokenizer_only);
        auto tok = tokenizer::Tokenizer::from_dir(o->model);
        for (int32_t id : ids)
          if (!tok->id_to_token(id))
            usage_fail("--ids: token id {} is not in the vocabulary of {} (size {})", id, o->model,
                       tok->vocab_size());
        std::string text = tok->decode(ids, o->skip_special);
        if (o->json)
          std::printf("%s\n", nlohmann::json{{"text", text}}.dump().c_str());
        else
          std::printf("%s\n", text.c_str());
        return 0;
      };
    });

}  // namespace
}  // namespace fp4lm::cli
