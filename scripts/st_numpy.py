#!/usr/bin/env python3
"""Safetensors files read and written with numpy alone, not with qkv's
reader: the outside check of qkv's format (tests/test_safetensors.c), and
the way to load qkv's weights in Python (README).

  st_numpy.py read FILE        print each tensor: name, dtype, shape, values
  st_numpy.py write FILE       write w [2,3] float32 and b [3] float64
  st_numpy.py write-half FILE  write h [N] float16 and bf [M] bfloat16, and
                               print each one's values as float32 gives them
                               (float.hex, exact): "h 0x1.0p+0 ..."
  st_numpy.py write-half-all FILE
                               write every finite float16 as h and every
                               finite bfloat16 as bf, each beside its
                               float32 values as numpy converts them
                               (h_f32, bf_f32)

numpy has no bfloat16: a BF16 value is the high 16 bits of a float32, so
the script writes those halves of float32 bit patterns (a uint16 view) and
reads them back by shifting them up.
"""
import json
import struct
import sys
import zlib

import numpy as np

DTYPES = {"F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), "F32": np.dtype("<f4"),
          "F64": np.dtype("<f8")}


def bf16_to_float32(halves):
    """BF16 values (uint16 bit patterns) as the float32 values they are."""
    return (halves.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(a):
    """The BF16 bit patterns (uint16) of float32 values, by dropping the low
    16 bits of each (truncation: a value whose low bits are 0 is kept)."""
    return (np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def load(path):
    """The file's metadata and a dict of numpy arrays, checked as qkv
    writes them: the data tiled by the offsets, and the CRC-32 if present."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    arrays = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        a = np.frombuffer(data[begin:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
        arrays[name] = bf16_to_float32(a) if e["dtype"] == "BF16" else a
    if "qkv_crc32" in meta and int(meta["qkv_crc32"], 16) != zlib.crc32(data):
        raise ValueError(f"{path}: checksum mismatch")
    return meta, arrays


def save(path, arrays, meta):
    """Writes arrays (name -> numpy array, or ("BF16", uint16 bit patterns))
    in the format, with no padding and the tensors in the reverse of the
    dict's order."""
    header, blobs, at = {"__metadata__": meta}, [], 0
    for name in reversed(list(arrays)):
        if isinstance(arrays[name], tuple):
            dtype, a = arrays[name][0], np.ascontiguousarray(arrays[name][1])
        else:
            a = np.ascontiguousarray(arrays[name])
            dtype = {np.dtype("float16"): "F16", np.dtype("float32"): "F32",
                     np.dtype("float64"): "F64"}[a.dtype]
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    text = json.dumps(header, ensure_ascii=False).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_half(path):
    """Writes h, float16 values, and bf, bfloat16 ones, including each
    format's extremes, subnormals and -0.0; prints their float32 values."""
    h = np.array([1.0, -2.5, 0.1, 1 / 3, -0.0, 0.0, 2.0**-24, 3 * 2.0**-24, 2.0**-14 - 2.0**-24,
                  2.0**-14, 1e-5, 65504.0, -65504.0, 1000.5], dtype=np.float16)
    bits = np.array([0x3F800000, 0xC0200000, 0x3DCCCCCD, 0x80000000, 0x00010000, 0x00000001,
                     0x007F0000, 0x00800000, 0x7F7F0000, 0xFF7F0000, 0x40490FDB],
                    dtype=np.uint32)
    halves = float32_to_bf16(bits.view(np.float32))
    save(path, {"h": h, "bf": ("BF16", halves)}, {"writer": "numpy"})
    print("h", " ".join(float(v).hex() for v in h.astype(np.float32)))
    print("bf", " ".join(float(v).hex() for v in bf16_to_float32(halves)))


def write_half_all(path):
    """Writes every finite value of float16 and of bfloat16 (in the order of
    their bit patterns) and the float32 values numpy makes of them."""
    patterns = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    h = patterns.view(np.float16)
    h = h[np.isfinite(h)]
    bf = patterns[np.isfinite(bf16_to_float32(patterns))]
    save(path, {"h": h, "h_f32": h.astype(np.float32), "bf": ("BF16", bf),
                "bf_f32": bf16_to_float32(bf)}, {})


def main(argv):
    commands = ("read", "write", "write-half", "write-half-all")
    if len(argv) != 3 or argv[1] not in commands:
        sys.exit(__doc__)
    if argv[1] == "write-half":
        write_half(argv[2])
        return
    if argv[1] == "write-half-all":
        write_half_all(argv[2])
        return
    if argv[1] == "read":
        meta, arrays = load(argv[2])
        for key in sorted(meta):
            print(f"meta {key} = {meta[key]}")
        for name, a in arrays.items():
            values = " ".join(repr(float(v)) for v in a.ravel())
            print(f"{name} {a.dtype} {list(a.shape)} {values}")
    else:
        w = np.arange(1, 7, dtype=np.float32).reshape(2, 3) / 4
        b = np.array([0.1, -2.5, 1e-3], dtype=np.float64)
        save(argv[2], {"w": w, "b": b}, {"writer": "numpy 他"})


if __name__ == "__main__":
    main(sys.argv)
