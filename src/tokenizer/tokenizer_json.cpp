// Reads tokenizer.json (and tokenizer_config.json) into TokenizerParts.
//
// Speed: the Qwen3 file is 11 MB, almost all of it model.vocab (151k entries) and model.merges
// (151k pairs). Building a nlohmann DOM for those (a std::map node per entry) dominates load
// time, so the file is parsed with a SAX handler that streams vocab and merges straight into
// their final containers and builds an ordinary DOM for everything else.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer_parts.h"
#include "tokenizer/utf8.h"

namespace fp4lm::tokenizer {

namespace {

using json = nlohmann::json;
using Merges = std::vector<std::pair<std::string, std::string>>;

const char* type_name(const json& j) { return j.type_name(); }

// ---- SAX: DOM for everything except model.vocab / model.merges ----------------------------

class TokenizerSax {
 public:
  TokenizerSax(json& root, const std::string& where) : dom_(root, true), where_(where) {}

  Vocab vocab;
  Merges merges;
  bool have_vocab = false, have_merges = false;

  bool null() { return value_event("null", [&] { return dom_.null(); }); }
  bool boolean(bool v) { return value_event("boolean", [&] { return dom_.boolean(v); }); }
  bool number_integer(json::number_integer_t v) {
    if (mode_ == Mode::Vocab) return vocab_value(v);
    return value_event("number", [&] { return dom_.number_integer(v); });
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (mode_ == Mode::Vocab)
      return vocab_value(v > static_cast<json::number_unsigned_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v));
    return value_event("number", [&] { return dom_.number_unsigned(v); });
  }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return value_event("number", [&] { return dom_.number_float(v, s); });
  }
  bool string(json::string_t& s) {
    if (mode_ == Mode::Merges) {
      if (merge_depth_ == 0) return legacy_merge(s);
      if (pair_.size() >= 2) fail("{}: model.merges[{}]: expected a pair of 2 strings, found more", where_, merges.size());
      pair_.push_back(std::move(s));
      return true;
    }
    return value_event("string", [&] { return dom_.string(s); });
  }
  bool binary(json::binary_t& b) { return dom_.binary(b); }
  bool start_object(std::size_t n) {
    if (pending_ == Mode::Vocab && stack_.size() == 2) {
      pending_ = Mode::Normal;
      mode_ = Mode::Vocab;
      have_vocab = true;
      return true;
    }
    if (mode_ != Mode::Normal)
      fail("{}: model.{}: unexpected object inside", where_, mode_ == Mode::Vocab ? "vocab" : "merges");
    pending_ = Mode::Normal;
    io::check_json_depth(stack_.size() + 1, where_);
    stack_.push_back({true, {}});
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    if (mode_ == Mode::Vocab) {
      key_ = std::move(k);
      return true;
    }
    if (stack_.size() == 2 && stack_[0].key == "model") {
      if (k == "vocab") pending_ = Mode::Vocab;
      else if (k == "merges") pending_ = Mode::Merges;
    }
    stack_.back().key = k;
    return dom_.key(k);
  }
  bool end_object() {
    if (mode_ == Mode::Vocab) {  // the DOM keeps a null placeholder for model.vocab
      mode_ = Mode::Normal;
      return dom_.null();
    }
    stack_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (pending_ == Mode::Merges && stack_.size() == 2) {
      pending_ = Mode::Normal;
      mode_ = Mode::Merges;
      have_merges = true;
      return true;
    }
    if (mode_ == Mode::Merges) {
      if (merge_depth_ != 0) fail("{}: model.merges[{}]: nested array", where_, merges.size());
      merge_depth_ = 1;
      pair_.clear();
      return true;
    }
    if (mode_ == Mode::Vocab) fail("{}: model.vocab['{}']: expected an integer id, found array", where_, key_);
    pending_ = Mode::Normal;
    io::check_json_depth(stack_.size() + 1, where_);
    stack_.push_back({false, {}});
    return dom_.start_array(n);
  }
  bool end_array() {
    if (mode_ == Mode::Merges) {
      if (merge_depth_ == 1) {
        merge_depth_ = 0;
        if (pair_.size() != 2)
          fail("{}: model.merges[{}]: expected a pair of 2 strings, found {}", where_, merges.size(), pair_.size());
        merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
        return true;
      }
      mode_ = Mode::Normal;
      return dom_.null();
    }
    stack_.pop_back();
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string& tok, const nlohmann::detail::exception& ex) {
    return dom_.parse_error(pos, tok, ex);
  }

 private:
  enum class Mode { Normal, Vocab, Merges };
  struct Frame {
    bool object;
    std::string key;
  };

  template <typename F>
  bool value_event(const char* what, F&& forward) {
    if (mode_ == Mode::Vocab)
      fail("{}: model.vocab['{}']: expected an integer id, found {}", where_, key_, what);
    if (mode_ == Mode::Merges)
      fail("{}: model.merges[{}]: expected a string or a pair of strings, found {}", where_, merges.size(), what);
    pending_ = Mode::Normal;
    return forward();
  }
  bool vocab_value(int64_t v) {
    if (v < 0 || v > INT32_MAX)
      fail("{}: model.vocab['{}']: id {} out of range", where_, key_, v);
    vocab.add(key_, static_cast<int32_t>(v));
    return true;
  }
  bool legacy_merge(const std::string& s) {
    size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
      fail("{}: model.merges[{}]: '{}' is not two tokens separated by one space", where_, merges.size(), s);
    merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::string where_;
  std::vector<Frame> stack_;
  Mode mode_ = Mode::Normal, pending_ = Mode::Normal;
  std::string key_;
  int merge_depth_ = 0;
  std::vector<std::string> pair_;
};

// ---- typed access with the JSON path in every message ------------------------------------

struct Ctx {
  const std::string& file;
  std::string path;
  Ctx at(const std::string& key) const { return {file, path.empty() ? key : path + "." + key}; }
  Ctx at(size_t i) const { return {file, path + "[" + std::to_string(i) + "]"}; }
  [[noreturn]] void error(const std::string& msg) const { fail("{}: {}: {}", file, path, msg); }
};

const json& need(const json& obj, const char* key, const Ctx& c) {
  if (!obj.is_object()) c.error(fmt::format("expected an object, found {}", type_name(obj)));
  auto it = obj.find(key);
  if (it == obj.end()) c.error(fmt::format("missing field '{}'", key));
  return *it;
}

std::string get_string(const json& obj, const char* key, const Ctx& c) {
  const json& v = need(obj, key, c);
  if (!v.is_string()) c.at(key).error(fmt::format("expected a string, found {}", type_name(v)));
  return v.get<std::string>();
}

std::optional<std::string> opt_string(const json& obj, const char* key, const Ctx& c) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) c.at(key).error(fmt::format("expected a string, found {}", type_name(*it)));
  return it->get<std::string>();
}

bool get_bool(const json& obj, const char* key, bool dflt, const Ctx& c) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) c.at(key).error(fmt::format("expected true or false, found {}", type_name(*it)));
  return it->get<bool>();
}

int64_t get_int(const json& obj, const char* key, const Ctx& c) {
  const json& v = need(obj, key, c);
  if (!v.is_number_integer()) c.at(key).error(fmt::format("expected an integer, found {}", type_name(v)));
  return v.get<int64_t>();
}

const json& need_array(const json& obj, const char* key, const Ctx& c) {
  const json& v = need(obj, key, c);
  if (!v.is_array()) c.at(key).error(fmt::format("expected an array, found {}", type_name(v)));
  return v;
}

std::string component_type(const json& j, const Ctx& c) {
  if (!j.is_object()) c.error(fmt::format("expected an object, found {}", type_name(j)));
  return get_string(j, "type", c);
}

[[noreturn]] void unsupported(const char* kind, const std::string& type, const Ctx& c,
                              const char* supported) {
  fail("{}: unsupported {} type '{}' (at {}); supported: {}", c.file, kind, type, c.path, supported);
}

// {"String": "..."} or {"Regex": "..."}
std::unique_ptr<Regex> parse_pattern(const json& obj, const Ctx& c) {
  const json& p = need(obj, "pattern", c);
  Ctx pc = c.at("pattern");
  if (!p.is_object()) pc.error(fmt::format("expected {{\"String\": ...}} or {{\"Regex\": ...}}, found {}", type_name(p)));
  std::string where = c.file + ": " + pc.path;
  if (p.contains("String")) return std::make_unique<Regex>(get_string(p, "String", pc), true, where);
  if (p.contains("Regex")) return std::make_unique<Regex>(get_string(p, "Regex", pc), false, where);
  pc.error("expected {\"String\": ...} or {\"Regex\": ...}");
}

// ---- components -----------------------------------------------------------------------------

std::unique_ptr<Normalizer> parse_normalizer(const json& j, const Ctx& c) {
  if (j.is_null()) return nullptr;
  std::string type = component_type(j, c);
  using Form = UnicodeNormalizer::Form;
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(Form::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(Form::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(Form::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(Form::NFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Replace")
    return std::make_unique<ReplaceNormalizer>(parse_pattern(j, c), get_string(j, "content", c));
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(get_string(j, "prepend", c));
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(get_bool(j, "strip_left", true, c), get_bool(j, "strip_right", true, c));
  if (type == "Sequence") {
    const json& arr = need_array(j, "normalizers", c);
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < arr.size(); ++i)
      if (auto n = parse_normalizer(arr[i], c.at("normalizers").at(i))) parts.push_back(std::move(n));
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  unsupported("normalizer", type, c, "NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, Sequence");
}

SplitBehavior parse_behavior(const json& j, const Ctx& c) {
  std::string b = get_string(j, "behavior", c);
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  c.at("behavior").error(fmt::format("unknown split behavior '{}' (expected Removed, Isolated, "
                                     "MergedWithPrevious, MergedWithNext or Contiguous)", b));
}

MetaspacePreTokenizer::Prepend parse_prepend_scheme(const json& j, const Ctx& c) {
  using P = MetaspacePreTokenizer::Prepend;
  if (auto s = opt_string(j, "prepend_scheme", c)) {
    if (*s == "always") return P::Always;
    if (*s == "never") return P::Never;
    if (*s == "first") return P::First;
    c.at("prepend_scheme").error(fmt::format("unknown prepend_scheme '{}' (expected always, never or first)", *s));
  }
  return get_bool(j, "add_prefix_space", true, c) ? P::Always : P::Never;  // older files
}

std::string parse_replacement(const json& j, const Ctx& c) {
  std::string r = get_string(j, "replacement", c);
  size_t i = 0;
  if (r.empty() || (utf8::next(r, i), i != r.size()))
    c.at("replacement").error(fmt::format("expected exactly one character, found '{}'", r));
  return r;
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& j, const Ctx& c) {
  if (j.is_null()) return nullptr;
  std::string type = component_type(j, c);
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(get_bool(j, "add_prefix_space", true, c),
                                                   get_bool(j, "use_regex", true, c));
  if (type == "Split")
    return std::make_unique<SplitPreTokenizer>(parse_pattern(j, c), parse_behavior(j, c),
                                               get_bool(j, "invert", false, c));
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(get_bool(j, "individual_digits", false, c));
  if (type == "Metaspace")
    return std::make_unique<MetaspacePreTokenizer>(parse_replacement(j, c), parse_prepend_scheme(j, c),
                                                   get_bool(j, "split", true, c));
  if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>(true);
  if (type == "WhitespaceSplit") return std::make_unique<WhitespacePreTokenizer>(false);
  if (type == "Sequence") {
    const json& arr = need_array(j, "pretokenizers", c);
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < arr.size(); ++i)
      if (auto p = parse_pre_tokenizer(arr[i], c.at("pretokenizers").at(i))) parts.push_back(std::move(p));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  unsupported("pre_tokenizer", type, c, "ByteLevel, Split, Digits, Metaspace, Whitespace, WhitespaceSplit, Sequence");
}

std::unique_ptr<Decoder> parse_decoder(const json& j, const Ctx& c) {
  if (j.is_null()) return nullptr;
  std::string type = component_type(j, c);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace")
    return std::make_unique<MetaspaceDecoder>(parse_replacement(j, c),
                                              parse_prepend_scheme(j, c) != MetaspacePreTokenizer::Prepend::Never);
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(parse_pattern(j, c), get_string(j, "content", c));
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    int64_t start = get_int(j, "start", c), stop = get_int(j, "stop", c);
    if (start < 0 || stop < 0) c.error("start and stop must be non-negative");
    return std::make_unique<StripDecoder>(get_string(j, "content", c), static_cast<size_t>(start),
                                          static_cast<size_t>(stop));
  }
  if (type == "Sequence") {
    const json& arr = need_array(j, "decoders", c);
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < arr.size(); ++i)
      if (auto d = parse_decoder(arr[i], c.at("decoders").at(i))) parts.push_back(std::move(d));
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  unsupported("decoder", type, c, "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence");
}

// ["<s>", 1] as used by Roberta/Bert processors.
int32_t parse_token_pair(const json& j, const char* key, const Ctx& c) {
  const json& v = need(j, key, c);
  if (!v.is_array() || v.size() != 2 || !v[0].is_string() || !v[1].is_number_integer() ||
      v[1].get<int64_t>() < 0 || v[1].get<int64_t>() > INT32_MAX)
    c.at(key).error("expected [\"token\", id]");
  return v[1].get<int32_t>();
}

std::unique_ptr<PostProcessor> parse_post_processor(const json& j, const Ctx& c) {
  if (j.is_null()) return nullptr;
  std::string type = component_type(j, c);
  if (type == "ByteLevel") return std::make_unique<NoopPostProcessor>();
  if (type == "TemplateProcessing") {
    const json& single = need_array(j, "single", c);
    const json& specials = need(j, "special_tokens", c);
    if (!specials.is_object()) c.at("special_tokens").error("expected an object");
    std::vector<int32_t> before, after;
    bool seen_a = false;
    for (size_t i = 0; i < single.size(); ++i) {
      Ctx ic = c.at("single").at(i);
      const json& item = single[i];
      if (item.is_object() && item.contains("Sequence")) {
        std::string id = get_string(item["Sequence"], "id", ic.at("Sequence"));
        if (id != "A") ic.error(fmt::format("the single template may only use sequence A, found '{}'", id));
        if (seen_a) ic.error("sequence A appears twice");
        seen_a = true;
      } else if (item.is_object() && item.contains("SpecialToken")) {
        std::string name = get_string(item["SpecialToken"], "id", ic.at("SpecialToken"));
        auto it = specials.find(name);
        if (it == specials.end())
          ic.error(fmt::format("special token '{}' is not in special_tokens", name));
        Ctx sc = c.at("special_tokens").at(name);
        const json& ids = need_array(*it, "ids", sc);
        for (const auto& id : ids) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
            sc.at("ids").error(fmt::format("expected non-negative token ids, found {}", id.dump()));
          (seen_a ? after : before).push_back(id.get<int32_t>());
        }
      } else {
        ic.error("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_a) c.at("single").error("the template has no $A sequence");
    return std::make_unique<TemplateProcessor>(std::move(before), std::move(after));
  }
  if (type == "RobertaProcessing" || type == "BertProcessing")
    return std::make_unique<TemplateProcessor>(std::vector<int32_t>{parse_token_pair(j, "cls", c)},
                                               std::vector<int32_t>{parse_token_pair(j, "sep", c)});
  if (type == "Sequence") {
    const json& arr = need_array(j, "processors", c);
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (size_t i = 0; i < arr.size(); ++i)
      if (auto p = parse_post_processor(arr[i], c.at("processors").at(i))) parts.push_back(std::move(p));
    return std::make_unique<SequencePostProcessor>(std::move(parts));
  }
  unsupported("post_processor", type, c, "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence");
}

std::vector<AddedToken> parse_added_tokens(const json& root, const Ctx& c) {
  std::vector<AddedToken> out;
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return out;
  Ctx ac = c.at("added_tokens");
  if (!it->is_array()) ac.error(fmt::format("expected an array, found {}", type_name(*it)));
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    Ctx tc = ac.at(i);
    AddedToken a;
    int64_t id = get_int(t, "id", tc);
    if (id < 0 || id > INT32_MAX) tc.at("id").error(fmt::format("id {} out of range", id));
    a.id = static_cast<int32_t>(id);
    a.content = get_string(t, "content", tc);
    if (a.content.empty()) tc.at("content").error("empty token");
    a.special = get_bool(t, "special", false, tc);
    a.lstrip = get_bool(t, "lstrip", false, tc);
    a.rstrip = get_bool(t, "rstrip", false, tc);
    a.single_word = get_bool(t, "single_word", false, tc);
    a.normalized = get_bool(t, "normalized", !a.special, tc);
    out.push_back(std::move(a));
  }
  return out;
}

std::unique_ptr<BpeModel> parse_model(const json& root, TokenizerSax& sax, const Ctx& c) {
  Ctx mc = c.at("model");
  const json& m = need(root, "model", c);
  if (!m.is_object()) mc.error(fmt::format("expected an object, found {}", type_name(m)));
  // Files written by older versions may omit the type of a BPE model.
  std::string type = m.contains("type") ? get_string(m, "type", mc) : "BPE";
  if (type != "BPE") unsupported("model", type, mc, "BPE");
  if (!sax.have_vocab) {
    need(m, "vocab", mc);
    mc.at("vocab").error(fmt::format("expected an object of token -> id, found {}", type_name(m["vocab"])));
  }
  if (!sax.have_merges) {
    if (m.contains("merges") && !m["merges"].is_null())
      mc.at("merges").error(fmt::format("expected an array, found {}", type_name(m["merges"])));
  }
  if (auto it = m.find("dropout"); it != m.end() && !it->is_null()) {
    if (!it->is_number()) mc.at("dropout").error(fmt::format("expected a number or null, found {}", type_name(*it)));
    if (it->get<double>() > 0.0)
      mc.at("dropout").error("BPE dropout is not supported (it is a training-time option)");
  }
  BpeOptions opt;
  opt.unk_token = opt_string(m, "unk_token", mc);
  opt.continuing_subword_prefix = opt_string(m, "continuing_subword_prefix", mc).value_or("");
  opt.end_of_word_suffix = opt_string(m, "end_of_word_suffix", mc).value_or("");
  opt.fuse_unk = get_bool(m, "fuse_unk", false, mc);
  opt.byte_fallback = get_bool(m, "byte_fallback", false, mc);
  opt.ignore_merges = get_bool(m, "ignore_merges", false, mc);
  sax.vocab.finish(c.file);
  return std::make_unique<BpeModel>(std::move(sax.vocab), sax.merges, std::move(opt), c.file);
}

// bos_token / eos_token in tokenizer_config.json: a string or {"content": "..."}.
std::optional<std::string> config_token(const json& cfg, const char* key, const Ctx& c) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return get_string(*it, "content", c.at(key));
  c.at(key).error(fmt::format("expected a string or an object with 'content', found {}", type_name(*it)));
}

void apply_config(TokenizerParts& p, std::string_view config_json, const std::string& name) {
  json cfg = io::parse_json(config_json, name);
  Ctx c{name, ""};
  if (!cfg.is_object()) fail("{}: expected a JSON object at the top level, found {}", name, type_name(cfg));
  auto find_id = [&](const std::string& tok, const char* key) -> int32_t {
    if (auto it = p.added_by_content.find(tok); it != p.added_by_content.end()) return it->second;
    if (auto id = p.model->token_to_id(tok)) return *id;
    c.at(key).error(fmt::format("token '{}' is not in the vocabulary", tok));
  };
  if (auto bos = config_token(cfg, "bos_token", c)) p.bos_id = find_id(*bos, "bos_token");
  if (auto eos = config_token(cfg, "eos_token", c)) p.eos_id = find_id(*eos, "eos_token");
  p.clean_up_spaces = get_bool(cfg, "clean_up_tokenization_spaces", false, c);

  bool has_bos_flag = cfg.contains("add_bos_token") && !cfg["add_bos_token"].is_null();
  bool has_eos_flag = cfg.contains("add_eos_token") && !cfg["add_eos_token"].is_null();
  bool add_bos = get_bool(cfg, "add_bos_token", false, c);
  bool add_eos = get_bool(cfg, "add_eos_token", false, c);
  if (add_bos && !p.bos_id) c.at("add_bos_token").error("true, but no bos_token is set");
  if (add_eos && !p.eos_id) c.at("add_eos_token").error("true, but no eos_token is set");
  std::string cls = opt_string(cfg, "tokenizer_class", c).value_or("");
  // transformers' Llama/Gemma fast tokenizers rebuild their template from these two flags.
  bool flags_rule = cls.starts_with("LlamaTokenizer") || cls.starts_with("CodeLlamaTokenizer") ||
                    cls.starts_with("GemmaTokenizer");
  bool template_adds = p.post_processor && p.post_processor->adds_tokens();
  if ((flags_rule && (has_bos_flag || has_eos_flag)) || (!template_adds && (add_bos || add_eos))) {
    std::vector<int32_t> before, after;
    if (add_bos) before.push_back(*p.bos_id);
    if (add_eos) after.push_back(*p.eos_id);
    p.post_processor = std::make_unique<TemplateProcessor>(std::move(before), std::move(after));
  }
}

}  // namespace

std::unique_ptr<TokenizerParts> load_tokenizer_parts(std::string_view text, const std::string& name,
                                                     std::string_view config_json,
                                                     const std::string& config_name) {
  json root;
  TokenizerSax sax(root, name);
  try {
    json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", name, e.what());
  }
  if (!root.is_object()) fail("{}: expected a JSON object at the top level, found {}", name, type_name(root));
  Ctx c{name, ""};

  auto p = std::make_unique<TokenizerParts>();
  p->source = name;
  if (auto it = root.find("truncation"); it != root.end() && !it->is_null())
    c.at("truncation").error("truncation is not supported (set it to null)");
  if (auto it = root.find("padding"); it != root.end() && !it->is_null())
    c.at("padding").error("padding is not supported (set it to null)");
  p->normalizer = parse_normalizer(root.value("normalizer", json()), c.at("normalizer"));
  p->pre_tokenizer = parse_pre_tokenizer(root.value("pre_tokenizer", json()), c.at("pre_tokenizer"));
  p->post_processor = parse_post_processor(root.value("post_processor", json()), c.at("post_processor"));
  p->decoder = parse_decoder(root.value("decoder", json()), c.at("decoder"));
  auto added = parse_added_tokens(root, c);
  p->model = parse_model(root, sax, c);

  // The id table: model vocab, then added tokens (which win where both name an id).
  const Vocab& vocab = p->model->vocab();
  int64_t max_id = vocab.max_id();
  for (const auto& a : added) max_id = std::max<int64_t>(max_id, a.id);
  if (max_id >= (int64_t{1} << 28))
    fail("{}: token id {} is implausibly large (ids must be dense from 0)", name, max_id);
  p->id_flags.assign(static_cast<size_t>(max_id + 1), 0);
  p->added_index.assign(static_cast<size_t>(max_id + 1), -1);
  for (int32_t id = 0; id <= vocab.max_id(); ++id)
    if (vocab.has_id(id)) p->id_flags[static_cast<size_t>(id)] = TokenizerParts::kPresent;
  for (size_t k = 0; k < added.size(); ++k) {
    const auto& a = added[k];
    auto i = static_cast<size_t>(a.id);
    p->added_index[i] = static_cast<int32_t>(k);
    p->id_flags[i] = TokenizerParts::kPresent | TokenizerParts::kAdded |
                     (a.special ? TokenizerParts::kSpecial : 0);
    p->added_by_content.emplace(a.content, a.id);
  }
  p->added = std::make_unique<AddedVocabulary>(std::move(added), p->normalizer.get());
  if (!config_json.empty()) apply_config(*p, config_json, config_name);
  // Every id the post-processor inserts must name a token: run it on an empty sequence.
  if (p->post_processor) {
    std::vector<int32_t> inserted;
    p->post_processor->process(inserted);
    for (int32_t id : inserted)
      if (id < 0 || static_cast<size_t>(id) >= p->id_flags.size() ||
          !(p->id_flags[static_cast<size_t>(id)] & TokenizerParts::kPresent))
        fail("{}: post_processor: special token id {} is not in the vocabulary", name, id);
  }
  return p;
}

}  // namespace fp4lm::tokenizer
