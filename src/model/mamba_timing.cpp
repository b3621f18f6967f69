#include "model/mamba_timing.h"

namespace fp4lm::model::mamba {

MixerTimer& timer() {
  static MixerTimer t;
  return t;
}

}  // namespace fp4lm::model::mamba
