#!/usr/bin/env python3
"""Writes the Gemma preprocessing goldens (tests/vision/gemma3_preprocess_test.cpp; docs/VISION.md).

Run offline with transformers 5.24.0, Pillow 11.3 and torchvision, e.g.
    /work/venvs/img43/bin/python tests/vision/data/make_goldens_gemma.py
Inputs: files make_goldens.py wrote, plus a wide and a tall synthetic PNG made here from a fixed
seed. For every case: gemma3__<config>__<file>.pil.f32, the pixel_values (float32, little-endian,
images x 3 x height x width) of Gemma3ImageProcessorPil given the Pillow-opened image (as
transformers.image_utils.load_image: ImageOps.exif_transpose), and for the "gemma3" config also of
Gemma3ImageProcessor (the torchvision backend, transformers' default when torchvision is
installed); manifest_gemma.json lists them with the shapes and num_crops.
"""
import json, os

import numpy as np
import PIL
from PIL import Image, ImageOps
import transformers
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.models.gemma3.image_processing_gemma3 import Gemma3ImageProcessor

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(4303)


def noisy(h, w):
    y, x = np.mgrid[0:h, 0:w]
    out = np.stack([127 + 100 * np.sin(0.21 * x + k) * np.cos(0.13 * y + 2 * k) for k in range(3)], -1)
    out += rng.normal(0, 20, out.shape)
    return np.clip(out, 0, 255).astype(np.uint8)


Image.fromarray(noisy(31, 97)).save(os.path.join(here, "wide_97x31.png"))
Image.fromarray(noisy(71, 23)).save(os.path.join(here, "tall_23x71.png"))

# Gemma 3's own preprocessor_config.json (google/gemma-3-4b-it) but for size (896 there; small
# here to keep the goldens small), then pan-and-scan configs. Nulls are what the checkpoints ship:
# Gemma3Processor fills them in (pan-and-scan off; 256, 4, 1.2).
real = {"do_convert_rgb": None, "do_normalize": True, "do_pan_and_scan": None, "do_rescale": True,
        "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "Gemma3ImageProcessor",
        "image_seq_length": 256, "image_std": [0.5, 0.5, 0.5], "pan_and_scan_max_num_crops": None,
        "pan_and_scan_min_crop_size": None, "pan_and_scan_min_ratio_to_activate": None,
        "processor_class": "Gemma3Processor", "resample": 2, "rescale_factor": 0.00392156862745098,
        "size": {"height": 896, "width": 896}}
configs = {
    "gemma3": dict(real, size={"height": 32, "width": 32}),
    "gemma3pas": dict(real, size={"height": 24, "width": 20}, do_pan_and_scan=True, pan_and_scan_min_crop_size=8,
                      pan_and_scan_max_num_crops=4, pan_and_scan_min_ratio_to_activate=1.2),
    "gemma3bicubic": {"size": {"height": 16, "width": 24}, "resample": 3, "do_pan_and_scan": True,
                      "pan_and_scan_min_crop_size": 16, "pan_and_scan_max_num_crops": 2,
                      "pan_and_scan_min_ratio_to_activate": 2.0, "image_mean": [0.485, 0.456, 0.406],
                      "image_std": [0.229, 0.224, 0.225], "image_processor_type": "Gemma3ImageProcessorPil"},
}
json.dump(real, open(os.path.join(here, "preprocessor_gemma3_real.json"), "w"), indent=2)
for cname, cfg in configs.items():
    json.dump(cfg, open(os.path.join(here, f"preprocessor_{cname}.json"), "w"), indent=2)

# What Gemma3Processor passes for a null key.
processor_defaults = {"do_convert_rgb": True, "do_pan_and_scan": False, "pan_and_scan_min_crop_size": 256,
                      "pan_and_scan_max_num_crops": 4, "pan_and_scan_min_ratio_to_activate": 1.2}


def processor(cls, cfg):
    kw = {k: (processor_defaults[k] if v is None else v) for k, v in cfg.items()
          if k not in ("processor_class", "image_processor_type", "image_seq_length")}
    return cls(**kw)


files = ["rgb_56x84.png", "rgb_150x100.png", "grey_40x30.png", "rgba_37x29.png", "rgb_33x47.jpg",
         "wide_97x31.png", "tall_23x71.png"]
cases = ([("gemma3", f) for f in files] + [("gemma3pas", f) for f in files] +
         [("gemma3bicubic", f) for f in ("wide_97x31.png", "tall_23x71.png", "rgb_150x100.png")])
manifest = {"transformers": transformers.__version__, "pillow": PIL.__version__, "preprocess": []}
for cname, name in cases:
    img = ImageOps.exif_transpose(Image.open(os.path.join(here, name)))
    case = f"gemma3__{cname}__{name}"
    entry = {"config": f"preprocessor_{cname}.json", "file": name}
    backends = [("pil", Gemma3ImageProcessorPil)] + ([("tv", Gemma3ImageProcessor)] if cname == "gemma3" else [])
    for tag, cls in backends:
        out = processor(cls, configs[cname])(images=[img], return_tensors="np")
        pv = np.asarray(out["pixel_values"], dtype=np.float32)
        pv.astype("<f4").tofile(os.path.join(here, f"{case}.{tag}.f32"))
        entry[tag] = {"pixel_values": f"{case}.{tag}.f32", "shape": list(pv.shape),
                      "num_crops": np.asarray(out["num_crops"]).tolist()}
    manifest["preprocess"].append(entry)

# Gemma 4: its own defaults (bicubic, rescale only, pooling 3) with the smallest budget (70 soft
# tokens) and patch 2 to keep the goldens small, and a config with normalization and bilinear.
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil
from transformers.models.gemma4.image_processing_gemma4 import Gemma4ImageProcessor

Image.fromarray(noisy(2, 300)).save(os.path.join(here, "strip_300x2.png"))
configs4 = {
    "gemma4": {"do_convert_rgb": True, "do_normalize": False, "do_rescale": True, "do_resize": True,
               "image_mean": [0.0, 0.0, 0.0], "image_std": [1.0, 1.0, 1.0],
               "image_processor_type": "Gemma4ImageProcessor", "max_soft_tokens": 70, "patch_size": 2,
               "pooling_kernel_size": 3, "resample": 3, "rescale_factor": 0.00392156862745098},
    "gemma4norm": {"max_soft_tokens": 140, "patch_size": 3, "pooling_kernel_size": 2, "resample": 2,
                   "do_normalize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
                   "image_processor_type": "Gemma4ImageProcessorPil"},
}
for cname, cfg in configs4.items():
    json.dump(cfg, open(os.path.join(here, f"preprocessor_{cname}.json"), "w"), indent=2)
cases4 = ([("gemma4", f) for f in files + ["strip_300x2.png"]] +
          [("gemma4norm", f) for f in ("wide_97x31.png", "rgb_150x100.png")])
tv4_files = ("rgb_56x84.png", "grey_40x30.png", "wide_97x31.png")
manifest["gemma4"] = []
for cname, name in cases4:
    img = ImageOps.exif_transpose(Image.open(os.path.join(here, name)))
    case = f"gemma4__{cname}__{name}"
    entry = {"config": f"preprocessor_{cname}.json", "file": name}
    backends = [("pil", Gemma4ImageProcessorPil)] + ([("tv", Gemma4ImageProcessor)] if cname == "gemma4" and name in tv4_files else [])
    for tag, cls in backends:
        out = processor(cls, configs4[cname])(images=[img], return_tensors="np")
        pv = np.asarray(out["pixel_values"], dtype=np.float32)[0]
        pos = np.asarray(out["image_position_ids"])[0]
        real = pos[:, 0] >= 0
        pv.astype("<f4").tofile(os.path.join(here, f"{case}.{tag}.f32"))
        entry[tag] = {"pixel_values": f"{case}.{tag}.f32", "shape": list(pv.shape),
                      "soft_tokens": int(np.asarray(out["num_soft_tokens_per_image"])[0]),
                      "real_patches": int(real.sum()), "last_position": pos[real][-1].tolist(),
                      "grid_width": int(pos[real][:, 0].max()) + 1}
    manifest["gemma4"].append(entry)

json.dump(manifest, open(os.path.join(here, "manifest_gemma.json"), "w"), indent=1)
print("wrote", len(cases), "Gemma 3 and", len(cases4), "Gemma 4 preprocessing cases")
