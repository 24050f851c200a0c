"""Codec benchmark: tenbin (multipart and single-buffer) and wire v2 against pickle 5 and np.save.

For batches [float32 data of SIZE bytes, int32 labels (16,)] and SIZE from 1 KB to 100 MB, each
codec encodes and decodes in a loop; the best time of each is kept (the machine is shared and noisy).
Prints one table of encode µs, decode µs, encode+decode GB/s and the ratio of tenbin multipart's
GB/s to each codec's, then decode µs by size, which shows decoding is O(1) for tenbin (views).

    ./run bench benchmarks/codec.py            # about 30 s
    ./run bench benchmarks/codec.py --budget 0.1 --sizes 1K,1M
"""

from __future__ import annotations

import argparse
import io
import pickle
import time
from typing import Any, Callable

import numpy as np

from tensorcom import tenbin, wire

Codec = tuple[Callable[[list], Any], Callable[[Any], list]]


def _pickle_oob_encode(arrays: list) -> tuple[bytes, list]:
    buffers: list = []
    return pickle.dumps(arrays, protocol=5, buffer_callback=buffers.append), buffers


def _npy_encode(arrays: list) -> bytes:
    stream = io.BytesIO()
    for a in arrays:
        np.save(stream, a, allow_pickle=False)
    return stream.getvalue()


def _npy_decode(data: bytes) -> list:
    stream = io.BytesIO(data)
    return [np.load(stream, allow_pickle=False) for _ in range(2)]


CODECS: dict[str, Codec] = {
    "tenbin multipart": (tenbin.encode_list, tenbin.decode_list),
    "tenbin single-buffer": (tenbin.encode_buffer, tenbin.decode_buffer),
    "wire v2 multipart": (wire.encode_batch, lambda frames: wire.decode_message(frames).batch),
    "pickle5 out-of-band": (_pickle_oob_encode, lambda p: pickle.loads(p[0], buffers=p[1])),
    "pickle5 plain": (lambda a: pickle.dumps(a, protocol=5), pickle.loads),
    "np.save/np.load": (_npy_encode, _npy_decode),
}
BASELINE = "tenbin multipart"


def parse_size(text: str) -> int:
    """'1K' / '10M' / '4096' -> bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def measure(codec: Codec, arrays: list, budget: float) -> tuple[float, float]:
    """Best encode and decode seconds over at least 3 rounds and about `budget` seconds."""
    encode, decode = codec
    best_encode = best_decode = float("inf")
    rounds, start = 0, time.perf_counter()
    while rounds < 3 or (time.perf_counter() - start < budget and rounds < 20000):
        t0 = time.perf_counter()
        payload = encode(arrays)
        t1 = time.perf_counter()
        result = decode(payload)
        t2 = time.perf_counter()
        best_encode, best_decode = min(best_encode, t1 - t0), min(best_decode, t2 - t1)
        if rounds == 0 and not all(np.array_equal(x, y) for x, y in zip(result, arrays)):
            raise AssertionError("codec did not round-trip")
        del payload, result  # freed outside the timed regions
        rounds += 1
    return best_encode, best_decode


def label(size: int) -> str:
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


def run(sizes: list[int], budget: float) -> None:
    """Measure every codec at every size and print both tables (Markdown)."""
    rng = np.random.default_rng(0)
    decode_us: dict[int, dict[str, float]] = {}
    print("| size | codec | encode µs | decode µs | enc+dec GB/s | tenbin multipart ÷ codec |")
    print("|---|---|---:|---:|---:|---:|")
    for size in sizes:
        arrays = [rng.random(size // 4, dtype=np.float32), np.arange(16, dtype=np.int32)]
        nbytes = arrays[0].nbytes + arrays[1].nbytes
        results = {name: measure(codec, arrays, budget) for name, codec in CODECS.items()}
        base = sum(results[BASELINE])
        for name, (enc, dec) in results.items():
            print(f"| {label(size)} | {name} | {enc * 1e6:.1f} | {dec * 1e6:.1f} | "
                  f"{nbytes / (enc + dec) / 1e9:.2f} | {(enc + dec) / base:.2f}× |", flush=True)
        decode_us[size] = {name: dec * 1e6 for name, (_, dec) in results.items()}
    print()
    print("Decode µs by size (O(1) means the column does not grow with size):")
    print()
    print("| codec | " + " | ".join(label(size) for size in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for name in CODECS:
        print(f"| {name} | " + " | ".join(f"{decode_us[size][name]:.1f}" for size in sizes) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1K,10K,100K,1M,10M,100M", help="comma-separated sizes")
    parser.add_argument("--budget", type=float, default=0.4, help="seconds per codec and size")
    args = parser.parse_args()
    sizes = [parse_size(text) for text in args.sizes.split(",")]
    if any(size < 64 for size in sizes) or args.budget <= 0:
        raise SystemExit(f"sizes must be >= 64 bytes and budget > 0, got {args.sizes!r}, {args.budget}")
    run(sizes, args.budget)


if __name__ == "__main__":
    main()
