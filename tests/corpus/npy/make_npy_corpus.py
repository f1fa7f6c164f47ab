#!/usr/bin/env python3
"""Writes the malformed .npy corpus next to this script.

Every file is meant for `tilefuse-run` against an artifact whose single
argument is f32[4, 3] (e.g. `y = neg(x)`). The files are built byte by
byte (not with np.save), so the output is identical for every numpy and
Python version; running the script twice gives the same bytes.

    python3 tests/corpus/npy/make_npy_corpus.py

The expected behaviour of tilefuse-run for each file is recorded in
manifest.json, which this script does not touch (edit it by hand when a
file is added).
"""
import os
import pickle
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# The argument the model takes: f32[4, 3], small exact values.
VALUES = [0.25 * i - 1.5 for i in range(12)]


def f32(values, endian="<"):
    return struct.pack(endian + "%df" % len(values), *values)


def header(descr, shape_text, fortran="False", major=1):
    """A .npy header whose dict has `descr` and `shape_text` verbatim; the
    data starts at a multiple of 64 bytes, as numpy writes it."""
    text = ("{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (descr, fortran,
                                                                         shape_text)).encode()
    prefix = 10 if major == 1 else 12
    text += b" " * ((64 - (prefix + len(text) + 1) % 64) % 64) + b"\n"
    length = struct.pack("<H", len(text)) if major == 1 else struct.pack("<I", len(text))
    return b"\x93NUMPY" + bytes([major, 0]) + length + text


GOOD = header("<f4", "4, 3") + f32(VALUES)

FILES = {
    # Accepted: the baseline and the same array in format 2.0.
    "good_v1.npy": GOOD,
    "good_v2.npy": header("<f4", "4, 3", major=2) + f32(VALUES),
    # Damaged files.
    "empty.npy": b"",
    "bad_magic.npy": b"\x93NUMPZ" + GOOD[6:],
    "truncated_header.npy": GOOD[:40],
    "truncated_data.npy": GOOD[:-20],
    "trailing_bytes.npy": GOOD + b"\0\0\0\0",
    "unknown_version.npy": GOOD[:6] + b"\x07\x00" + GOOD[8:],
    # Shapes a header may not have.
    "negative_dim.npy": header("<f4", "-4, 3") + f32(VALUES),
    "dim_above_int64_max.npy": header("<f4", "9223372036854775808, 3") + f32(VALUES),
    "byte_count_overflow.npy": header("<f4", "4611686018427387904, 4") + f32(VALUES),
    "non_integer_dim.npy": header("<f4", "4.0, 3") + f32(VALUES),
    "no_shape.npy": header("<f4", "4, 3").replace(b"'shape'", b"'shapf'") + f32(VALUES),
    # Well-formed arrays the model does not take.
    "dtype_f8.npy": header("<f8", "4, 3") + struct.pack("<12d", *VALUES),
    "dtype_i4.npy": header("<i4", "4, 3") + struct.pack("<12i", *range(12)),
    "wrong_shape.npy": header("<f4", "3, 4") + f32(VALUES),
    "flat_shape.npy": header("<f4", "12,") + f32(VALUES),
    "fortran_order.npy": header("<f4", "4, 3", fortran="True") + f32(VALUES),
    "big_endian.npy": header(">f4", "4, 3") + f32(VALUES, ">"),
    "object_dtype.npy": header("|O", "4, 3") + pickle.dumps(VALUES, protocol=2),
}


def main():
    for name, data in sorted(FILES.items()):
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
    print("wrote %d files to %s" % (len(FILES), HERE))


if __name__ == "__main__":
    main()
