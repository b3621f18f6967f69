#pragma once
// Post-processors: add special tokens around an encoded sequence when encode() is asked to
// (add_special_tokens). Supported tokenizer.json types: TemplateProcessing (single sequence),
// ByteLevel (no change to ids), RobertaProcessing, BertProcessing, Sequence.
#include <cstdint>
#include <memory>
#include <vector>

namespace fp4lm::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<int32_t>& ids) const = 0;
  // Whether process() can add tokens (false for ByteLevel).
  virtual bool adds_tokens() const = 0;
};

// The "single" template: special-token ids before and after the sequence ($A).
class TemplateProcessor : public PostProcessor {
 public:
  TemplateProcessor(std::vector<int32_t> before, std::vector<int32_t> after)
      : before_(std::move(before)), after_(std::move(after)) {}
  void process(std::vector<int32_t>& ids) const override;
  bool adds_tokens() const override { return !before_.empty() || !after_.empty(); }
  const std::vector<int32_t>& before() const { return before_; }
  const std::vector<int32_t>& after() const { return after_; }

 private:
  std::vector<int32_t> before_, after_;
};

class NoopPostProcessor : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
  bool adds_tokens() const override { return false; }
};

class SequencePostProcessor : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> parts)
      : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& p : parts_) p->process(ids);
  }
  bool adds_tokens() const override {
    for (const auto& p : parts_)
      if (p->adds_tokens()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

}  // namespace fp4lm::tokenizer
