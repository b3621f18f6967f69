#pragma once
// What the CPU we run on can do, detected once at run time (cpuid + xgetbv on x86), as a typed
// set for kernel dispatch (kernels/isa.h decides from it which kernel variants may run).
// An ARM port adds its features (neon, sve, ...) to CpuFeature and their detection (getauxval)
// to cpu_features.cpp.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace fp4lm {

// In the order describe() lists them.
enum class CpuFeature : uint8_t {
  sse42,
  avx,
  avx2,
  fma,
  f16c,
  avx_vnni,
  avx512f,
  avx512bw,
  avx512vl,
  avx512vbmi,  // vpermb, vpermi2b
  avx512vnni,  // vpdpbusd
  avx512bf16,  // vdpbf16ps
  amx_tile,    // ldtilecfg, tileloadd, ... (and the OS saves the tile state: XCR0 bits 17-18)
  amx_bf16,    // tdpbf16ps
  amx_int8,    // tdpbssd and its signed/unsigned siblings
  count_,
};

// "avx2", "sse4.2", "avx-vnni", ...
std::string_view cpu_feature_name(CpuFeature f);

class CpuFeatureSet {
 public:
  constexpr CpuFeatureSet() = default;
  constexpr CpuFeatureSet(std::initializer_list<CpuFeature> features) {
    for (CpuFeature f : features) insert(f);
  }
  constexpr void insert(CpuFeature f) { bits_ |= bit(f); }
  constexpr bool has(CpuFeature f) const { return (bits_ & bit(f)) != 0; }
  constexpr bool contains(CpuFeatureSet other) const { return (bits_ & other.bits_) == other.bits_; }
  constexpr bool empty() const { return bits_ == 0; }
  // The features of this set that `other` lacks.
  constexpr CpuFeatureSet minus(CpuFeatureSet other) const {
    CpuFeatureSet s;
    s.bits_ = bits_ & ~other.bits_;
    return s;
  }
  // This set and `more`.
  constexpr CpuFeatureSet with(std::initializer_list<CpuFeature> more) const {
    CpuFeatureSet s = *this;
    for (CpuFeature f : more) s.insert(f);
    return s;
  }
  constexpr bool operator==(const CpuFeatureSet&) const = default;
  // Space-separated names in CpuFeature order, "none" when empty.
  std::string names() const;

 private:
  static constexpr uint32_t bit(CpuFeature f) { return uint32_t{1} << static_cast<unsigned>(f); }
  uint32_t bits_ = 0;
};

struct CpuFeatures {
  CpuFeatureSet features;
  int physical_cores = 1;  // best effort; at least 1
  int logical_cores = 1;

  bool has(CpuFeature f) const { return features.has(f); }
  std::string describe() const { return features.names(); }  // "avx2 fma f16c", for logs and `fp4lm backends`
};

const CpuFeatures& cpu_features();

}  // namespace fp4lm
