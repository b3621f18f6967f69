#!/usr/bin/env python3
"""Copies a single-file checkpoint adding per-layer self_attn.k_proj.k_scale / v_proj.v_scale
(scalar float32), to measure --kv-cache-dtype fp8 with given scales (docs/ACCURACY.md).
Usage: add_kv_scales.py SRC_DIR DST_DIR K_SCALE V_SCALE   (standard library only)"""
import json, struct, sys, shutil, os
src, dst, ks, vs = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
os.makedirs(dst, exist_ok=True)
for f in os.listdir(src):
    if f != 'model.safetensors': shutil.copy(os.path.join(src, f), dst)
raw = open(os.path.join(src, 'model.safetensors'), 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
hdr = json.loads(raw[8:8+n]); data = bytearray(raw[8+n:])
L = json.load(open(os.path.join(src, 'config.json')))['num_hidden_layers']
for l in range(L):
    for name, v in ((f'model.layers.{l}.self_attn.k_proj.k_scale', ks), (f'model.layers.{l}.self_attn.v_proj.v_scale', vs)):
        off = len(data); data += struct.pack('<f', v)
        hdr[name] = {'dtype': 'F32', 'shape': [], 'data_offsets': [off, off + 4]}
h = json.dumps(hdr).encode(); h += b' ' * (-len(h) % 8)
open(os.path.join(dst, 'model.safetensors'), 'wb').write(struct.pack('<Q', len(h)) + h + data)
