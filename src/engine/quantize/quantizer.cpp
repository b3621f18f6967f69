#include "engine/quantize/quantizer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <variant>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "io/staged_output_dir.h"
#include "model/arch/arch.h"
#include "model/load/model_loader.h"
#include "quant/compressed_tensors_scale.h"
#include "quant/export_format.h"
#include "quant/nvfp4.h"
#include "quant/nvfp4_awq.h"
#include "quant/nvfp4_gptq.h"
#include "quant/nvfp4_scale_search.h"

namespace fp4lm::engine {

namespace fs = std::filesystem;
using nlohmann::json;
using quant::QuantAlgo;

namespace {

// Files copied verbatim from IN to OUT (tokenizer, chat template, generation defaults, the image
// processor's settings, which a VL checkpoint's image inputs need).
constexpr const char* kCopiedFiles[] = {
    "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "tokenizer.model",        "vocab.json",     "merges.txt",            "added_tokens.json",
    "chat_template.jinja",    "chat_template.json", "preprocessor_config.json", "processor_config.json"};

constexpr int64_t kRowChunk = 64;  // rows converted to float32 at a time per thread

// Drops the fully covered pages of [p, p+n) of a read-only file mapping from this process's
// resident set; they are re-read from the file if touched again. Keeps RSS bounded while
// streaming through a large checkpoint.
void release_pages(const void* p, size_t n) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uintptr_t a = reinterpret_cast<uintptr_t>(p), b = a + n;
  a = (a + page - 1) / page * page;
  b = b / page * page;
  if (b > a) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

const TensorView& weight_view(const io::Checkpoint& ck, const std::string& module) {
  return ck.get(module + ".weight");
}

// How one group's members are rounded: the method and what calibration gives it (the input
// channels' mean x^2 for the search, GPTQ's factor of H).
struct MemberMethod {
  WeightMethod method = WeightMethod::rtn;
  const float* importance = nullptr;          // [k] or null
  const quant::GptqFactor* factor = nullptr;  // gptq only
  const float* col_scale = nullptr;           // AWQ: W[:, c] *= col_scale[c] before rounding, or null
};

// Quantizes one [n, k] weight with the group's amax, rows in parallel chunks. Rows are
// independent once the global scale (and for GPTQ the factor) is fixed, so this equals the
// method's whole-matrix function byte for byte.
quant::Nvfp4Weight quantize_member(const io::Checkpoint& ck, const std::string& module, int64_t n, int64_t k,
                                   float group_amax, const MemberMethod& mm) {
  const TensorView& t = weight_view(ck, module);
  const size_t es = dtype_size(t.dtype);
  const auto* src = static_cast<const uint8_t*>(t.data);
  quant::Nvfp4Weight out;
  out.n = n;
  out.k = k;
  out.codes.resize(static_cast<size_t>(n * k / 2));
  out.scales.resize(static_cast<size_t>(n * k / quant::kNvfp4BlockSize));
  std::vector<std::string> errors(static_cast<size_t>(ThreadPool::global().size()) + 1);
  std::vector<float> s2(errors.size(), 0.0f);
  // GPTQ's rows cost k^2 each: smaller chunks keep the threads evenly loaded.
  const int64_t chunk = mm.method == WeightMethod::gptq ? 8 : kRowChunk;
  ThreadPool::global().parallel_for(n, [&](int64_t r0, int64_t r1, int tid) {
    std::vector<float> buf;
    try {
      for (int64_t r = r0; r < r1; r += chunk) {
        const int64_t rows = std::min(chunk, r1 - r);
        buf.resize(static_cast<size_t>(rows * k));
        to_f32_n(src + static_cast<size_t>(r * k) * es, t.dtype, buf.data(), buf.size());
        if (mm.col_scale)
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t c = 0; c < k; ++c) buf[static_cast<size_t>(i * k + c)] *= mm.col_scale[c];
        quant::Nvfp4Weight q;
        if (mm.method == WeightMethod::search) {
          q = quant::quantize_weight_searched(buf.data(), rows, k, group_amax, mm.importance);
        } else {
          q = quant::quantize_weight(buf.data(), rows, k, group_amax);
          if (mm.method == WeightMethod::gptq && q.weight_scale_2 > 0.0f)
            q = quant::gptq_quantize_rows(buf.data(), rows, k, *mm.factor, q.weight_scale_2,
                                          {.scale_search = true, .importance = mm.importance});
        }
        std::memcpy(out.codes.data() + r * k / 2, q.codes.data(), q.codes.size());
        std::memcpy(out.scales.data() + r * k / quant::kNvfp4BlockSize, q.scales.data(), q.scales.size());
        s2[static_cast<size_t>(tid)] = q.weight_scale_2;
      }
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(tid)] = e.what();
    }
  });
  for (const std::string& e : errors)
    if (!e.empty()) fail("{}: tensor '{}.weight': {}", ck.file_of(module + ".weight"), module, e);
  // Every chunk computed the same global scale from the same group amax (idle threads left 0).
  out.weight_scale_2 = *std::max_element(s2.begin(), s2.end());
  return out;
}

// One output tensor as declared in the shard layout.
struct OutTensor {
  std::string name;
  DType dtype;
  Shape shape;
  size_t nbytes;
};

// A unit of work: copy one tensor, or quantize one group (emitting each member's tensors).
struct Job {
  std::optional<std::string> copy;  // input tensor name
  const QuantGroup* group = nullptr;
  uint64_t input_bytes = 0;        // for progress
  bool to_f32 = false;             // copy a 16-bit tensor as float32 (ArchDef::float32_tensors)
};

class Progress {
 public:
  Progress(bool enabled, const char* what, uint64_t total)
      : on_(enabled && ::isatty(STDERR_FILENO)), what_(what), total_(std::max<uint64_t>(total, 1)),
        t0_(std::chrono::steady_clock::now()) {}
  ~Progress() {
    if (on_ && drawn_) std::fprintf(stderr, "\r\033[K");
  }
  void advance(uint64_t done) {
    if (!on_) return;
    done_ += done;
    const double frac = std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    if (el - last_ < 0.1 && frac < 1.0) return;
    last_ = el;
    const int width = 30, fill = static_cast<int>(frac * width);
    const double eta = frac > 0 ? el * (1.0 - frac) / frac : 0.0;
    std::fprintf(stderr, "\r%s [%s%s] %3d%%  elapsed %ds  ETA %ds\033[K", what_, std::string(fill, '#').c_str(),
                 std::string(width - fill, '.').c_str(), static_cast<int>(frac * 100), static_cast<int>(el),
                 static_cast<int>(eta + 0.5));
    drawn_ = true;
  }

 private:
  bool on_;
  const char* what_;
  uint64_t total_, done_ = 0;
  std::chrono::steady_clock::time_point t0_;
  double last_ = -1;
  bool drawn_ = false;
};

void write_json_file(const fs::path& p, const json& j) {
  std::ofstream out(p);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) fail("{}: cannot write", p.string());
}

fs::path absolute_normal(const std::string& p) { return fs::absolute(fs::path(p)).lexically_normal(); }

}  // namespace

const char* weight_method_name(WeightMethod m) {
  switch (m) {
    case WeightMethod::rtn: return "rtn";
    case WeightMethod::search: return "search";
    case WeightMethod::gptq: return "gptq";
  }
  return "?";
}

float group_weight_amax(const io::Checkpoint& ck, const QuantGroup& g) {
  float result = 0.0f;
  for (size_t i = 0; i < g.modules.size(); ++i) {
    const TensorView& t = weight_view(ck, g.modules[i]);
    const int64_t n = g.rows[i], k = g.in_features;
    const size_t es = dtype_size(t.dtype);
    const auto* src = static_cast<const uint8_t*>(t.data);
    std::vector<float> part(static_cast<size_t>(ThreadPool::global().size()) + 1, 0.0f);
    ThreadPool::global().parallel_for(n, [&](int64_t r0, int64_t r1, int tid) {
      std::vector<float> buf;
      float m = 0.0f;
      for (int64_t r = r0; r < r1; r += kRowChunk) {
        const int64_t rows = std::min(kRowChunk, r1 - r);
        buf.resize(static_cast<size_t>(rows * k));
        to_f32_n(src + static_cast<size_t>(r * k) * es, t.dtype, buf.data(), buf.size());
        m = std::max(m, quant::amax(buf.data(), buf.size()));
      }
      part[static_cast<size_t>(tid)] = m;
    });
    for (float m : part) result = std::max(result, m);
  }
  return result;
}

namespace {

// AWQ's outcome for one group (quant/nvfp4_awq.h): pre_quant_scale as stored (the weight dtype)
// and the column scale the weights are multiplied by, its exact reciprocal, so that
// (x ⊙ pre_quant_scale) · (W · diag(scale))^T = x · W^T before rounding.
struct AwqGroup {
  std::vector<uint8_t> pqs_bytes;  // [k] in `dtype`
  DType dtype = DType::BF16;
  std::vector<float> scale;        // [k] = 1 / float(stored pre_quant_scale)
  float weight_amax = 0;           // the group's amax of W · diag(scale)
  float input_amax = 0;            // max_c max|x_c| · pre_quant_scale_c (W4A4's input_scale)
};

// Whether a group gets AWQ: a calibrated Linear input (not lm_head: ModelOpt removes its scale
// too) whose statistics calibration recorded.
bool awq_applies(const QuantGroup& g, const InputStats* st, bool awq) {
  return awq && st && g.input == GroupInput::linear && g.layer != "lm_head" && st->rows > 0 && !st->abs_sum.empty() &&
         !st->h.empty();
}

AwqGroup awq_group(const io::Checkpoint& ck, const QuantGroup& g, const InputStats& st) {
  const int64_t k = g.in_features;
  int64_t n = 0;
  for (int64_t r : g.rows) n += r;
  std::vector<float> w(static_cast<size_t>(n * k));
  int64_t at = 0;
  for (size_t i = 0; i < g.modules.size(); ++i) {
    const TensorView& t = weight_view(ck, g.modules[i]);
    to_f32_n(t.data, t.dtype, w.data() + at * k, static_cast<size_t>(g.rows[i] * k));
    at += g.rows[i];
  }
  std::vector<float> act(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c)
    act[static_cast<size_t>(c)] = static_cast<float>(st.abs_sum[static_cast<size_t>(c)] / static_cast<double>(st.rows));
  const quant::AwqSearch sr = quant::awq_search(w.data(), n, k, act.data(), st.h.data());
  AwqGroup a;
  a.dtype = weight_view(ck, g.modules[0]).dtype;
  std::vector<float> pqs(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c) pqs[static_cast<size_t>(c)] = 1.0f / sr.scale[static_cast<size_t>(c)];
  a.pqs_bytes.resize(static_cast<size_t>(k) * dtype_size(a.dtype));
  from_f32_n(pqs.data(), a.dtype, a.pqs_bytes.data(), pqs.size());
  to_f32_n(a.pqs_bytes.data(), a.dtype, pqs.data(), pqs.size());  // the stored values
  a.scale.resize(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c) {
    const float p = pqs[static_cast<size_t>(c)];
    if (!(p > 0.0f) || !std::isfinite(p))
      fail("{}: AWQ's pre_quant_scale for input channel {} is {} in {}", g.layer, c, p, dtype_name(a.dtype));
    a.scale[static_cast<size_t>(c)] = 1.0f / p;
    a.input_amax = std::max(a.input_amax, st.abs_max[static_cast<size_t>(c)] * p);
  }
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      a.weight_amax = std::max(a.weight_amax, std::fabs(w[static_cast<size_t>(r * k + c)] * a.scale[static_cast<size_t>(c)]));
  const double best = sr.error[static_cast<size_t>(std::lround(sr.alpha * quant::kAwqAlphaSteps))];
  log().info("{}: AWQ alpha {:.1f}, calibration output error {:.4g} -> {:.4g} ({:.1f}% of round-to-nearest's)", g.layer,
             sr.alpha, sr.error_unscaled, best, sr.error_unscaled > 0 ? 100.0 * best / sr.error_unscaled : 100.0);
  return a;
}

}  // namespace

namespace {

// Phase 1: the options and the output path make sense (nothing is read or written yet).
void check_request(const QuantizeOptions& o, const fs::path& in, const fs::path& out) {
  const QuantAlgo algo = o.exp.algo;
  if (algo != QuantAlgo::NVFP4 && algo != QuantAlgo::W4A16_NVFP4)
    usage_fail("--algo must be NVFP4 or W4A16_NVFP4, got {}", quant::algo_name(algo));
  if (o.weight_method == WeightMethod::gptq && o.calibration.empty())
    usage_fail("--weight-method gptq needs calibration data for each layer's input statistics: pass --calib-ids "
               "FILE.jsonl or --calib-text FILE");
  if (o.awq && o.calibration.empty())
    usage_fail("--awq needs calibration data for each layer's input statistics: pass --calib-ids FILE.jsonl or "
               "--calib-text FILE");
  if (o.awq && o.format == quant::Family::compressed_tensors)
    usage_fail("--awq writes ModelOpt's pre_quant_scale tensors, which --format compressed-tensors has no name for");
  if (algo == QuantAlgo::NVFP4 && o.calibration.empty())
    usage_fail("NVFP4 (W4A4) needs calibration data to set each layer's input_scale: pass --calib-ids FILE.jsonl "
               "or --calib-text FILE (W4A16_NVFP4 needs none)");
  if (o.out_dir.empty()) usage_fail("--out: no output directory given");
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (fs::exists(in, ec) && fs::equivalent(in, out, ec))
      fail("{}: the output directory is the input checkpoint; choose another --out", o.out_dir);
    const fs::path rel = in.lexically_relative(out);
    if (!rel.empty() && *rel.begin() != "..")
      fail("{}: the input checkpoint {} is inside the output directory; choose another --out", o.out_dir, o.model_dir);
    if (!o.force) fail("{}: already exists (pass --force to replace it)", o.out_dir);
    if (!fs::is_directory(out, ec)) fail("{}: exists and is not a directory; not replacing it", o.out_dir);
  }
  if (out.has_parent_path() && !fs::is_directory(out.parent_path(), ec))
    fail("{}: the parent directory {} does not exist", o.out_dir, out.parent_path().string());
}

// A VL checkpoint's text model (model.language_model.*) is planned as "model.*"; what is written
// keeps the stored names, including the modules an architecture stores under names of its own
// (ModelConfig::tensor_renames: Nemotron-H's model.embed_tokens is backbone.embeddings).
struct NameMap {
  std::string prefix;
  std::vector<std::pair<std::string, std::string>> renames;  // {engine module, stored module}
  std::string to_disk(const std::string& m) const {
    for (const auto& [engine, disk] : renames)
      if (m == engine) return disk;
    return prefix != "model." && m.starts_with("model.") && !m.starts_with("model.visual") ? prefix + m.substr(6) : m;
  }
  std::string to_plan(const std::string& n) const {  // a stored tensor's name as the plan names it
    for (const auto& [engine, disk] : renames)
      if (n.starts_with(disk + ".")) return engine + n.substr(disk.size());
    return prefix != "model." && n.starts_with(prefix) ? "model." + n.substr(prefix.size()) : n;
  }
};

// exclude_modules as written. ModelOpt's form: the plan's unquantized modules and, in a VL
// checkpoint, the modules of its other towers (every weight matrix outside the text model and
// lm_head: vision encoders, their embedders), summarized into prefix wildcards as ModelOpt does
// (quant::summarize_exclusions: a MoE router becomes "model.layers.<i>.router*", a vision tower
// "model.vision_tower*"). compressed-tensors: the plan's list as it is.
std::vector<std::string> exclusions_on_disk(const io::Checkpoint& ck, const ExportPlan& plan, const NameMap& names,
                                            quant::Family format) {
  std::vector<std::string> unquantized, quantized;
  for (const std::string& m : plan.exclude_modules) unquantized.push_back(names.to_disk(m));
  if (format == quant::Family::compressed_tensors) return unquantized;
  if (names.prefix != "model.") {
    for (const std::string& t : ck.tensor_names()) {
      const TensorView& v = ck.get(t);
      if (t.starts_with(names.prefix) || t.starts_with("lm_head.") || !t.ends_with(".weight") || v.shape.size() < 2)
        continue;
      unquantized.push_back(t.substr(0, t.size() - 7));
    }
  }
  for (const QuantGroup& g : plan.groups)
    for (const std::string& m : g.modules) quantized.push_back(names.to_disk(m));
  return quant::summarize_exclusions(unquantized, quantized);
}

// Phase 3: the output tensors, in write order — input tensors sorted by name; a quantized group
// emitted whole where its first member appears — and the work that produces them.
struct OutputLayout {
  std::vector<Job> jobs;
  std::vector<OutTensor> outs;
  std::vector<std::vector<size_t>> job_outs;  // output indices per job
  uint64_t total = 0, input_total = 0;
};

// The names and scalar shape of one family's NVFP4 tensors.
struct Nvfp4Names {
  const char *codes, *global_scale, *input_scale;
  Shape scalar;
  bool reciprocal;  // compressed-tensors stores 1/scale
};
Nvfp4Names nvfp4_names(quant::Family f) {
  if (f == quant::Family::compressed_tensors)
    return {".weight_packed", ".weight_global_scale", ".input_global_scale", {1}, true};
  return {".weight", ".weight_scale_2", ".input_scale", {}, false};
}

OutputLayout plan_outputs(const io::Checkpoint& ck, const ExportPlan& plan, const NameMap& names, QuantAlgo algo,
                          const Nvfp4Names& nn, const std::function<bool(const QuantGroup&)>& has_pqs) {
  OutputLayout L;
  std::set<std::string> f32;  // stored names
  for (const std::string& t : plan.config.arch->float32_tensors(plan.config)) f32.insert(names.to_disk(t));
  std::vector<bool> emitted(plan.groups.size(), false);
  auto emit_group = [&](const QuantGroup* g) {
    const size_t gi = static_cast<size_t>(g - plan.groups.data());
    if (emitted[gi]) return;
    emitted[gi] = true;
    Job job{std::nullopt, g, 0};
    std::vector<size_t> idx;
    for (size_t i = 0; i < g->modules.size(); ++i) {
      const std::string& m = g->modules[i];
      const int64_t n = g->rows[i], k = g->in_features;
      job.input_bytes += weight_view(ck, m).nbytes;
      auto add = [&](const std::string& nm, DType d, Shape s, size_t bytes) {
        idx.push_back(L.outs.size());
        L.outs.push_back({nm, d, std::move(s), bytes});
      };
      const std::string d = names.to_disk(m);
      add(d + nn.codes, DType::U8, {n, k / 2}, static_cast<size_t>(n * k / 2));
      add(d + ".weight_scale", DType::F8_E4M3, {n, k / 16}, static_cast<size_t>(n * k / 16));
      add(d + nn.global_scale, DType::F32, nn.scalar, 4);
      if (algo == QuantAlgo::NVFP4) add(d + nn.input_scale, DType::F32, nn.scalar, 4);
      if (has_pqs(*g)) {
        const DType wd = weight_view(ck, m).dtype;
        add(d + ".pre_quant_scale", wd, {k}, static_cast<size_t>(k) * dtype_size(wd));
      }
    }
    L.jobs.push_back(job);
    L.job_outs.push_back(std::move(idx));
  };
  for (const std::string& name : ck.tensor_names()) {
    const TensorView& t = ck.get(name);
    const bool is_weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    const std::string planned = names.to_plan(name);
    if (const QuantGroup* g = is_weight ? plan.group_of_module(planned.substr(0, planned.size() - 7)) : nullptr) {
      emit_group(g);
      continue;
    }
    // A fused 3-D experts tensor whose experts are quantized becomes their per-expert tensors.
    std::vector<const QuantGroup*> experts;
    for (const std::string& box : plan.fused_experts) {
      const bool w13 = planned == box + ".gate_up_proj", w2 = planned == box + ".down_proj";
      if (!w13 && !w2) continue;
      for (const QuantGroup& g : plan.groups)
        if (g.layer == box && g.input == (w13 ? GroupInput::experts_w13 : GroupInput::experts_w2)) experts.push_back(&g);
    }
    for (const QuantGroup* g : experts) emit_group(g);
    if (!experts.empty()) continue;
    if (f32.count(name) && (t.dtype == DType::BF16 || t.dtype == DType::F16)) {
      L.jobs.push_back({name, nullptr, t.nbytes, true});
      L.job_outs.push_back({L.outs.size()});
      L.outs.push_back({name, DType::F32, t.shape, static_cast<size_t>(shape_numel(t.shape)) * sizeof(float)});
      continue;
    }
    L.jobs.push_back({name, nullptr, t.nbytes});
    L.job_outs.push_back({L.outs.size()});
    L.outs.push_back({name, t.dtype, t.shape, t.nbytes});
  }
  for (size_t gi = 0; gi < emitted.size(); ++gi)
    if (!emitted[gi]) fail("internal: quantized group of {} was not emitted", plan.groups[gi].modules[0]);
  for (const OutTensor& t : L.outs) L.total += t.nbytes;
  for (const Job& j : L.jobs) L.input_total += j.input_bytes;
  return L;
}

// Phase 4: the files beside the tensors (configs, tokenizer, shard index), into `dir`.
void write_side_files(const fs::path& dir, const fs::path& in, const io::Checkpoint& ck, const QuantizeOptions& o,
                      const std::vector<std::string>& exclude_on_disk, const OutputLayout& L,
                      const quant::ShardLayout& shards) {
  std::error_code ec;
  json config = ck.config();
  bool pqs = false;
  for (const OutTensor& t : L.outs) pqs = pqs || t.name.ends_with(".pre_quant_scale");
  if (o.format == quant::Family::compressed_tensors) {
    config["quantization_config"] = quant::compressed_tensors_config_json(o.exp.algo, exclude_on_disk);
    write_json_file(dir / "config.json", config);
  } else {
    config["quantization_config"] = quant::quantization_config_json(o.exp.algo, exclude_on_disk, o.producer_version, pqs);
    write_json_file(dir / "config.json", config);
    write_json_file(dir / "hf_quant_config.json",
                    quant::hf_quant_config_json(o.exp.algo, exclude_on_disk, o.producer_version, pqs));
  }
  for (const char* f : kCopiedFiles) {
    const fs::path src = in / f;
    if (fs::is_regular_file(src, ec)) {
      fs::copy_file(src, dir / f, ec);
      if (ec) fail("{}: cannot copy to {}: {}", src.string(), (dir / f).string(), ec.message());
    }
  }
  std::vector<std::string> names;
  for (const OutTensor& t : L.outs) names.push_back(t.name);
  if (shards.files.size() > 1)
    write_json_file(dir / "model.safetensors.index.json", quant::shard_index_json(names, shards, L.total));
}

// Writes the output tensors in order, opening each shard file as its first tensor comes.
class ShardStream {
 public:
  ShardStream(const fs::path& dir, const OutputLayout& L, const quant::ShardLayout& shards, const QuantizeOptions& o)
      : dir_(dir), L_(L), shards_(shards), o_(o) {}

  void emit(size_t out_index, const void* data, size_t nbytes) {
    const size_t s = shards_.shard_of[out_index];
    if (s != current_) {
      if (writer_) writer_->finish();
      open(s);
    }
    writer_->write_tensor(L_.outs[out_index].name, data, nbytes);
    ++written_;
    if (o_.after_tensor) o_.after_tensor(L_.outs[out_index].name);
  }
  void finish() {
    if (writer_) writer_->finish();
    if (written_ != L_.outs.size()) fail("internal: wrote {} of {} tensors", written_, L_.outs.size());
  }

 private:
  void open(size_t s) {
    io::SafetensorsStreamWriter::Layout layout;
    for (size_t i = 0; i < L_.outs.size(); ++i)
      if (shards_.shard_of[i] == s) layout.emplace_back(L_.outs[i].name, L_.outs[i].dtype, L_.outs[i].shape);
    writer_ = std::make_unique<io::SafetensorsStreamWriter>((dir_ / shards_.files[s]).string(), std::move(layout),
                                                            std::map<std::string, std::string>{{"format", "pt"}});
    current_ = s;
  }

  const fs::path dir_;
  const OutputLayout& L_;
  const quant::ShardLayout& shards_;
  const QuantizeOptions& o_;
  std::unique_ptr<io::SafetensorsStreamWriter> writer_;
  size_t current_ = SIZE_MAX, written_ = 0;
};

// How groups are rounded (the request's choices).
struct GroupContext {
  QuantAlgo algo;
  WeightMethod method;
  bool act_order, awq;
  const Nvfp4Names* nn;
};

// One group quantized: its members' codes and scales, the shared input_scale (W4A4), AWQ's scale.
struct GroupResult {
  std::vector<quant::Nvfp4Weight> members;
  float gamax = 0;
  std::optional<float> input_scale;
  std::optional<AwqGroup> aw;
};

// stats: the group's Linear input statistics from calibration, or null (none recorded).
GroupResult quantize_group(const io::Checkpoint& ck, const QuantGroup& g, const ActivationAmax& amax,
                           const InputStats* stats, const GroupContext& cx) {
  if (stats && stats->rows == 0) stats = nullptr;
  GroupResult res;
  // AWQ: the weights become W · diag(s) and the input x · diag(1/s), so the statistics the weight
  // methods weigh by are those of the scaled input (H -> D^-1 H D^-1, x^2 -> x^2 / s^2).
  InputStats scaled;
  if (awq_applies(g, stats, cx.awq)) {
    res.aw = awq_group(ck, g, *stats);
    const int64_t kk = stats->k;
    const std::vector<float>& sc = res.aw->scale;
    scaled.k = kk;
    scaled.rows = stats->rows;
    scaled.sq.resize(stats->sq.size());
    for (int64_t c = 0; c < kk; ++c)
      scaled.sq[static_cast<size_t>(c)] =
          stats->sq[static_cast<size_t>(c)] / (static_cast<double>(sc[static_cast<size_t>(c)]) * sc[static_cast<size_t>(c)]);
    if (cx.method == WeightMethod::gptq) {
      scaled.h.resize(stats->h.size());
      for (int64_t i = 0; i < kk; ++i)
        for (int64_t j = 0; j < kk; ++j)
          scaled.h[static_cast<size_t>(i * kk + j)] =
              stats->h[static_cast<size_t>(i * kk + j)] /
              (static_cast<double>(sc[static_cast<size_t>(i)]) * sc[static_cast<size_t>(j)]);
    }
    stats = &scaled;
  }
  const float gamax = res.aw ? res.aw->weight_amax : group_weight_amax(ck, g);
  res.gamax = gamax;
  if (gamax == 0.0f)
    log().warn("{}: every weight of the group is zero; weight_scale_2 = 0 (loaders reject a zero scale)",
               g.modules[0]);
  if (cx.algo == QuantAlgo::NVFP4) {
    const float in_amax = res.aw ? res.aw->input_amax : amax.of(g);
    if (res.aw && !(in_amax > 0.0f)) amax.of(g);  // names the layer calibration saw only zeros for
    res.input_scale =
        cx.nn->reciprocal ? quant::compressed_tensors_global_scale(in_amax) : in_amax / quant::kNvfp4GlobalDivisor;
  }
  MemberMethod mm;
  mm.method = cx.method;
  if (res.aw) mm.col_scale = res.aw->scale.data();
  std::vector<float> importance;
  std::optional<quant::GptqFactor> factor;
  const InputStats* st = g.input == GroupInput::linear ? stats : nullptr;
  if (cx.method == WeightMethod::gptq && !(st && !st->h.empty())) mm.method = WeightMethod::search;
  if (mm.method == WeightMethod::search && st) {
    importance.resize(st->sq.size());
    for (size_t c = 0; c < importance.size(); ++c)
      importance[c] = static_cast<float>(st->sq[c] / static_cast<double>(st->rows));
    mm.importance = importance.data();
  }
  // Act-order's up-front scale search weighs each channel by its mean x^2 (H's diagonal):
  // measured W4A16 1.107x -> 1.073x on SmolLM2 (docs/ACCURACY.md).
  if (mm.method == WeightMethod::gptq && cx.act_order) {
    importance.resize(static_cast<size_t>(g.in_features));
    for (size_t c = 0; c < importance.size(); ++c)
      importance[c] = static_cast<float>(st->h[c * importance.size() + c] / static_cast<double>(st->rows));
    mm.importance = importance.data();
  }
  if (mm.method == WeightMethod::gptq && gamax > 0.0f) {
    factor = quant::gptq_factor(st->h.data(), g.in_features, 0.01, cx.act_order);
    mm.factor = &*factor;
  }
  for (size_t i = 0; i < g.modules.size(); ++i) {
    res.members.push_back(quantize_member(ck, g.modules[i], g.rows[i], g.in_features, gamax, mm));
    const TensorView& t = weight_view(ck, g.modules[i]);
    release_pages(t.data, t.nbytes);
  }
  return res;
}

// Phase 5: copies every job's tensors into the shards, quantizing the groups `done` (quantized
// during calibration, layer by layer) does not hold; returns how many modules were quantized.
size_t stream_tensors(const io::Checkpoint& ck, const OutputLayout& L, const ActivationAmax& amax,
                      std::map<const QuantGroup*, GroupResult>& done, const GroupContext& cx, ShardStream& out,
                      Progress& bar) {
  size_t quantized_modules = 0;
  for (size_t j = 0; j < L.jobs.size(); ++j) {
    const Job& job = L.jobs[j];
    if (job.copy && job.to_f32) {
      const TensorView& t = ck.get(*job.copy);
      std::vector<float> v(static_cast<size_t>(shape_numel(t.shape)));
      to_f32_n(t.data, t.dtype, v.data(), v.size());
      out.emit(L.job_outs[j][0], v.data(), v.size() * sizeof(float));
      bar.advance(job.input_bytes);
      continue;
    }
    if (job.copy) {
      const TensorView& t = ck.get(*job.copy);
      out.emit(L.job_outs[j][0], t.data, t.nbytes);
      release_pages(t.data, t.nbytes);
      bar.advance(job.input_bytes);
      continue;
    }
    const QuantGroup& g = *job.group;
    GroupResult res;
    if (auto it = done.find(&g); it != done.end()) {
      res = std::move(it->second);
      done.erase(it);
    } else {
      const InputStats* st = nullptr;
      if (auto it2 = amax.inputs.find(g.layer); it2 != amax.inputs.end()) st = &it2->second;
      res = quantize_group(ck, g, amax, st, cx);
    }
    size_t k = 0;
    for (size_t i = 0; i < g.modules.size(); ++i) {
      const quant::Nvfp4Weight& q = res.members[i];
      out.emit(L.job_outs[j][k++], q.codes.data(), q.codes.size());
      out.emit(L.job_outs[j][k++], q.scales.data(), q.scales.size());
      const float global = cx.nn->reciprocal ? quant::compressed_tensors_global_scale(res.gamax) : q.weight_scale_2;
      out.emit(L.job_outs[j][k++], &global, sizeof(float));
      if (res.input_scale) out.emit(L.job_outs[j][k++], &*res.input_scale, sizeof(float));
      if (res.aw) out.emit(L.job_outs[j][k++], res.aw->pqs_bytes.data(), res.aw->pqs_bytes.size());
      ++quantized_modules;
    }
    bar.advance(job.input_bytes);
  }
  out.finish();
  return quantized_modules;
}

}  // namespace

QuantizeSummary quantize_checkpoint(const QuantizeOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const QuantAlgo algo = o.exp.algo;
  const fs::path in = absolute_normal(o.model_dir), out = absolute_normal(o.out_dir);
  check_request(o, in, out);

  // Phase 2: the plan, and for W4A4 the calibrated activation ranges.
  auto ck = io::Checkpoint::open(o.model_dir);
  const model::ModelConfig mc = model::parse_model_config(ck->config(), ck->dir() + "/config.json");
  NameMap names{model::text_tensor_prefix(mc, *ck), {}};
  for (const auto& [engine, disk] : mc.tensor_renames) {
    // Planned by engine name (DeepSeek-V4's head.weight is the plan's lm_head), written by the stored one.
    ck->alias_prefix(disk, engine);
    if (engine.ends_with(".weight") && disk.ends_with(".weight"))
      names.renames.emplace_back(engine.substr(0, engine.size() - 7), disk.substr(0, disk.size() - 7));
  }
  if (names.prefix != "model.") ck->alias_prefix(names.prefix, "model.");
  expose_fused_experts(*ck);
  const ExportPlan plan = make_export_plan(*ck, o.exp);
  std::vector<std::string> exclude_on_disk = exclusions_on_disk(*ck, plan, names, o.format);
  for (const std::string& note : plan.notes) log().info("{}", note);
  const Nvfp4Names nn = nvfp4_names(o.format);
  const GroupContext cx{algo, o.weight_method, o.act_order, o.awq, &nn};
  ActivationAmax amax;
  std::map<const QuantGroup*, GroupResult> done;  // groups quantized during calibration
  if (algo == QuantAlgo::NVFP4 || !o.calibration.empty()) {
    CalibrationOptions co;
    co.progress = o.progress;
    co.second_moments = o.weight_method == WeightMethod::search;
    co.hessians = o.weight_method == WeightMethod::gptq || o.awq;
    co.awq = o.awq;
    if (co.hessians && o.calibrate_by_layer) {
      // One layer's H at a time: each layer's groups are quantized as soon as every sequence has
      // passed it, and only their (4.5-bit) results are kept until they are written.
      amax = calibrate_by_layer(ck, plan, o.calibration, co,
                                [&](const ActivationAmax& a, std::map<std::string, InputStats>& inputs) {
                                  for (const QuantGroup& g : plan.groups) {
                                    auto it = inputs.find(g.layer);
                                    if (g.input != GroupInput::linear || it == inputs.end()) continue;
                                    done.emplace(&g, quantize_group(*ck, g, a, &it->second, cx));
                                    it->second = InputStats{};
                                  }
                                });
    } else {
      amax = calibrate(ck, plan, o.calibration, co);
    }
    log().info("Calibrated {} layers on {} sequences ({} tokens)", plan.calibrated_layers().size(), amax.sequences,
               amax.tokens);
  }

  const OutputLayout L = plan_outputs(*ck, plan, names, algo, nn, [&](const QuantGroup& g) {
    if (auto it = done.find(&g); it != done.end()) return it->second.aw.has_value();
    auto st = amax.inputs.find(g.layer);
    return awq_applies(g, st == amax.inputs.end() ? nullptr : &st->second, o.awq);
  });
  std::vector<uint64_t> sizes;
  for (const OutTensor& t : L.outs) sizes.push_back(t.nbytes);
  const quant::ShardLayout shards = quant::assign_shards(sizes, o.max_shard_bytes);

  // Everything goes into a temporary directory beside OUT, renamed at the end.
  io::StagedOutputDir tmp(out, o.out_dir);
  write_side_files(tmp.path(), in, *ck, o, exclude_on_disk, L, shards);

  Progress bar(o.progress, "quantizing", L.input_total);
  ShardStream stream(tmp.path(), L, shards, o);
  const size_t quantized_modules = stream_tensors(*ck, L, amax, done, cx, stream, bar);
  if (L.outs.empty()) fail("{}: the checkpoint has no tensors", o.model_dir);
  tmp.publish();  // phase 6, the only step that touches OUT

  QuantizeSummary s;
  s.exclude_modules = exclude_on_disk;
  s.quantized_modules = quantized_modules;
  s.tensors = L.outs.size();
  s.shard_files = shards.files;
  s.tensor_bytes = L.total;
  s.calibration_tokens = amax.tokens;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace fp4lm::engine
