#!/usr/bin/env python3
"""Safetensors files read and written with numpy alone, not with qkv's
reader: the outside check of qkv's format (tests/test_safetensors.c), and
the way to load qkv's weights in Python (README).

  st_numpy.py read FILE    print each tensor: name, dtype, shape, values
  st_numpy.py write FILE   write w [2,3] float32 and b [3] float64
"""
import json
import struct
import sys
import zlib

import numpy as np

DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8")}


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
        arrays[name] = np.frombuffer(data[begin:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
    if "qkv_crc32" in meta and int(meta["qkv_crc32"], 16) != zlib.crc32(data):
        raise ValueError(f"{path}: checksum mismatch")
    return meta, arrays


def save(path, arrays, meta):
    """Writes arrays (name -> numpy array) in the format, with no padding
    and the tensors in the reverse of the dict's order."""
    header, blobs, at = {"__metadata__": meta}, [], 0
    for name in reversed(list(arrays)):
        a = np.ascontiguousarray(arrays[name])
        dtype = {np.dtype("float32"): "F32", np.dtype("float64"): "F64"}[a.dtype]
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    text = json.dumps(header, ensure_ascii=False).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main(argv):
    if len(argv) != 3 or argv[1] not in ("read", "write"):
        sys.exit(__doc__)
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
