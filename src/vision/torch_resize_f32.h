#pragma once
// torch.nn.functional.interpolate(mode="bicubic", antialias=True, align_corners=False) on a float32
// image, as ATen's CPU kernel computes it (UpSampleKernel.cpp, the separable antialiased path):
// Keys' cubic with a = -0.5, its support widened by the scale when shrinking, weights normalized
// to sum 1, the horizontal pass first and then the vertical one, a pass skipped when its size is
// unchanged, everything in float32 with no rounding or clamping (the bicubic overshoot is kept).
// torchvision's resize of a float tensor (transformers' TorchvisionBackend processors) is exactly
// this call. The weights are torch's bit for bit (checked on one-hot images); the sums are not
// always: up to a few percent of values come out one float32 ulp from torch 2.9.1's (its
// compiler's multiply-add fusion is not fully reproduced; tests/vision/nemotron_preprocess_test.cpp).
#include <vector>

namespace fp4lm::vision {

// chw: channels x height x width floats -> channels x out_height x out_width.
std::vector<float> resize_bicubic_antialias_torch(const std::vector<float>& chw, int channels, int height, int width,
                                                  int out_height, int out_width);

}  // namespace fp4lm::vision
