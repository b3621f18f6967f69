#!/usr/bin/env python3
"""Writes the vision tests' inputs and goldens (tests/vision/*_test.cpp; docs/VISION.md).

Run offline with transformers 5.24.0, Pillow and torchvision, e.g.
    /work/venvs/img43/bin/python tests/vision/data/make_goldens.py
Inputs are synthetic, from a fixed seed. For every input file: <name>.rgb, the RGB bytes Pillow +
transformers give (ImageOps.exif_transpose as transformers.image_utils.load_image, then
transformers.image_transforms.convert_to_rgb: alpha composited onto white). For the preprocessing
cases: <case>.pil.f32 / <case>.tv.f32, the pixel_values (float32, little-endian, row-major) of
Qwen2VLImageProcessorPil, and for the "small" config also of Qwen2VLImageProcessor (torchvision
backend, transformers' default when torchvision is installed); manifest.json lists it all with the shapes and image_grid_thw.
"""
import io, json, os, struct, sys, zlib

import numpy as np
import PIL
from PIL import Image, ImageOps
import transformers
from transformers.image_transforms import convert_to_rgb
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(43)


def smooth(h, w, c):
    """A smooth random image (JPEG/WebP behave as on photos) with some sharp detail."""
    y, x = np.mgrid[0:h, 0:w]
    out = np.zeros((h, w, c))
    for k in range(c):
        a, b, p = rng.uniform(0.05, 0.4, 3)
        out[..., k] = 127 + 100 * np.sin(a * x + p * 7) * np.cos(b * y + k)
    out += rng.normal(0, 12, out.shape)
    return np.clip(out, 0, 255).astype(np.uint8)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def raw_png(arr16, color_type, depth, extra=b"", adam7=False):
    """A PNG Pillow cannot write (16-bit RGB, grey + alpha, a colour key, Adam7), rows filter 0."""
    h, w = arr16.shape[:2]

    def rows_of(a):
        flat = a.reshape(a.shape[0], -1)
        return b"".join(b"\0" + (row.astype(">u2").tobytes() if depth == 16 else row.astype(np.uint8).tobytes())
                        for row in flat)

    if adam7:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
        rows = b"".join(rows_of(arr16[y0::dy, x0::dx]) for x0, y0, dx, dy in passes
                        if arr16[y0::dy, x0::dx].size)
    else:
        rows = rows_of(arr16)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 1 if adam7 else 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra + png_chunk(b"IDAT", zlib.compress(rows)) +
            png_chunk(b"IEND", b""))


def exif_bytes(orientation):
    ex = Image.Exif()
    ex[0x0112] = orientation
    return ex.tobytes()


def save(name, img=None, raw=None, **kw):
    path = os.path.join(here, name)
    if raw is not None:
        open(path, "wb").write(raw)
    else:
        img.save(path, **kw)
    return name


files = []
files.append(save("rgb_56x84.png", Image.fromarray(smooth(56, 84, 3))))
files.append(save("rgb_33x47.jpg", Image.fromarray(smooth(33, 47, 3)), quality=90))
files.append(save("progressive_36x48.jpg", Image.fromarray(smooth(36, 48, 3)), quality=85, progressive=True))
files.append(save("grey_26x19.jpg", Image.fromarray(smooth(26, 19, 1)[..., 0]), quality=90))
files.append(save("cmyk_24x18.jpg", Image.frombytes("CMYK", (18, 24), smooth(24, 18, 4).tobytes()), quality=95))
files.append(save("exif6_30x20.jpg", Image.fromarray(smooth(20, 30, 3)), quality=92, exif=exif_bytes(6)))
files.append(save("grey_40x30.png", Image.fromarray(smooth(30, 40, 1)[..., 0])))
rgba = smooth(29, 37, 4)
rgba[0, :, 3] = 0
rgba[1, :, 3] = 255
files.append(save("rgba_37x29.png", Image.fromarray(rgba)))
pal = Image.fromarray(smooth(23, 45, 3)).quantize(colors=16)
pal.info["transparency"] = 3
files.append(save("palette_45x23.png", pal, transparency=3))
files.append(save("palette_opaque_45x23.png", Image.fromarray(smooth(23, 45, 3)).quantize(colors=64)))
files.append(save("grey16_20x24.png", raw=raw_png((rng.integers(0, 400, (24, 20))).astype(np.uint16), 0, 16)))
files.append(save("rgb16_21x17.png", raw=raw_png(rng.integers(0, 65536, (17, 21, 3)).astype(np.uint16), 2, 16)))
files.append(save("la_19x22.png", raw=raw_png(smooth(22, 19, 2), 4, 8)))
files.append(save("grey_trns_16x12.png",
                  raw=raw_png((rng.integers(0, 4, (12, 16)) * 60).astype(np.uint8), 0, 8,
                              extra=png_chunk(b"tRNS", struct.pack(">H", 120)))))
files.append(save("grey_2bit_13x9.png", Image.fromarray((rng.integers(0, 4, (9, 13)) * 85).astype(np.uint8)).convert("L"),
                  bits=2))
files.append(save("adam7_rgba_23x19.png", raw=raw_png(smooth(19, 23, 4), 6, 8, adam7=True)))
files.append(save("exif3_25x15.png", Image.fromarray(smooth(15, 25, 3)), exif=exif_bytes(3)))
files.append(save("lossless_31x27.webp", Image.fromarray(smooth(27, 31, 3)), lossless=True))
files.append(save("lossy_40x28.webp", Image.fromarray(smooth(28, 40, 3)), quality=80))
files.append(save("rgba_lossless_22x18.webp", Image.fromarray(smooth(18, 22, 4)), lossless=True))
files.append(save("exif8_17x11.webp", Image.fromarray(smooth(11, 17, 3)), lossless=True, exif=exif_bytes(8)))
files.append(save("rgb_150x100.png", Image.fromarray(smooth(100, 150, 3))))


def load(name):
    """What transformers' processor is given, and the RGB it works on."""
    img = ImageOps.exif_transpose(Image.open(os.path.join(here, name)))
    return img, convert_to_rgb(img, return_numpy=True)


import torch, torchvision
manifest = {"transformers": transformers.__version__, "pillow": PIL.__version__, "torch": torch.__version__,
            "torchvision": torchvision.__version__, "decode": [], "preprocess": []}
for name in files:
    img, rgb = load(name)
    open(os.path.join(here, name + ".rgb"), "wb").write(np.ascontiguousarray(rgb, dtype=np.uint8).tobytes())
    manifest["decode"].append({"file": name, "mode": Image.open(os.path.join(here, name)).mode,
                               "width": rgb.shape[1], "height": rgb.shape[0]})

# preprocessor_config.json contents: Qwen3.5 / Qwen3.6's own keys with smaller pixel budgets, and a
# Qwen2-VL-style file (patch 14, CLIP mean/std, min_pixels / max_pixels keys).
configs = {
    "qwen35": {"size": {"longest_edge": 4096, "shortest_edge": 1024}, "patch_size": 16, "temporal_patch_size": 2,
               "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
               "processor_class": "Qwen3VLProcessor", "image_processor_type": "Qwen2VLImageProcessorFast"},
    "small": {"size": {"longest_edge": 1024, "shortest_edge": 256}, "patch_size": 4, "temporal_patch_size": 2,
              "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
              "image_processor_type": "Qwen2VLImageProcessor"},
    "qwen2vl": {"min_pixels": 784, "max_pixels": 3136, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
                "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
                "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
                "rescale_factor": 0.00392156862745098, "resample": 3,
                "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor"},
}
for cname, cfg in configs.items():
    json.dump(cfg, open(os.path.join(here, f"preprocessor_{cname}.json"), "w"), indent=2)


def processor(cls, cfg):
    kw = {k: v for k, v in cfg.items() if k not in ("processor_class", "image_processor_type")}
    return cls(**kw)


cases = [("qwen35", "rgb_56x84.png"), ("qwen35", "rgb_33x47.jpg"), ("small", "grey_40x30.png"),
         ("small", "rgba_37x29.png"), ("small", "palette_45x23.png"), ("small", "lossy_40x28.webp"),
         ("small", "exif6_30x20.jpg"), ("small", "rgb_150x100.png"), ("small", "la_19x22.png"),
         ("qwen2vl", "rgb_33x47.jpg"), ("qwen2vl", "rgb_150x100.png")]
for cname, name in cases:
    cfg = configs[cname]
    img, _ = load(name)
    case = f"{cname}__{name}"
    entry = {"config": f"preprocessor_{cname}.json", "file": name}
    backends = [("pil", Qwen2VLImageProcessorPil)] + ([("tv", Qwen2VLImageProcessor)] if cname == "small" else [])
    for tag, cls in backends:
        out = processor(cls, cfg)(images=[img], return_tensors="np")
        pv = np.asarray(out["pixel_values"], dtype=np.float32)
        grid = np.asarray(out["image_grid_thw"]).tolist()
        pv.astype("<f4").tofile(os.path.join(here, f"{case}.{tag}.f32"))
        entry[tag] = {"pixel_values": f"{case}.{tag}.f32", "rows": pv.shape[0], "cols": pv.shape[1],
                      "grid_thw": grid[0]}
    manifest["preprocess"].append(entry)

json.dump(manifest, open(os.path.join(here, "manifest.json"), "w"), indent=1)
print("wrote", len(files), "inputs and", len(cases), "preprocessing cases")
