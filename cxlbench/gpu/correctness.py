"""Result checks: outputs are poisoned before a kernel runs and compared with a
reference after, so that a kernel that did nothing (or the wrong thing) fast is
refused (WrongResult) and never becomes a figure.

Data patterns: word i of a buffer holds i ^ seed (words of 8 bytes; 4 for
4-byte accesses, compared on their low 32 bits). Comparisons run in chunks on
the array module of the memory (cupy on the device, numpy on the host) so a
check never needs another buffer the size of the data.
"""
from __future__ import annotations

from cxlbench.gpu.errors import WrongResult

POISON = 0xFF                  # every byte: an all-ones word, a NaN double
CHUNK_BYTES = 256 << 20
MASK64 = (1 << 64) - 1


def poison(xp, array) -> None:
    """Fill an output with the poison byte before the kernel writes it."""
    array.view(xp.uint8).fill(POISON)


def word_dtype(xp, word_bytes: int):
    return xp.uint32 if word_bytes == 4 else xp.uint64


def pattern(xp, first: int, count: int, seed: int, word_bytes: int = 8):
    """Words first .. first + count - 1 of the i ^ seed pattern."""
    dt = word_dtype(xp, word_bytes)
    mask = (1 << (8 * word_bytes)) - 1
    return xp.arange(first, first + count, dtype=xp.uint64).astype(dt) ^ dt(seed & mask)


def expect_pattern(xp, words, seed: int, what: str, first: int = 0, word_bytes: int = 8) -> None:
    """words[j] == (first + j) ^ seed for every j."""
    n = len(words)
    chunk = max(1, CHUNK_BYTES // word_bytes)
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        bad = int((words[lo:hi] != pattern(xp, first + lo, hi - lo, seed, word_bytes)).sum())
        if bad:
            raise WrongResult(f"{what}: {bad} of {hi - lo} words from word {lo} differ from the "
                              f"pattern written")


def expect_equal(xp, got, want, what: str) -> None:
    if len(got) != len(want):
        raise WrongResult(f"{what}: {len(got)} elements, expected {len(want)}")
    chunk = max(1, CHUNK_BYTES // max(got.itemsize, 1))
    for lo in range(0, len(got), chunk):
        hi = min(len(got), lo + chunk)
        bad = int((got[lo:hi] != want[lo:hi]).sum())
        if bad:
            raise WrongResult(f"{what}: {bad} of {hi - lo} elements from {lo} differ from the "
                              f"reference")


def expect_all(xp, array, value: int, what: str) -> None:
    """Every byte of `array` (uint8) is `value` (untouched poison)."""
    chunk = CHUNK_BYTES
    for lo in range(0, len(array), chunk):
        bad = int((array[lo:lo + chunk] != value).sum())
        if bad:
            raise WrongResult(f"{what}: {bad} bytes that must stay untouched were written")


def rows(xp, bytes_view, count: int, stride: int):
    """The bytes of `count` elements `stride` apart as a (count, stride) array."""
    return bytes_view[:count * stride].reshape(count, stride)


def strided_words(xp, bytes_view, count: int, stride: int, width: int, word_bytes: int,
                  lo: int, hi: int):
    """The words of elements lo..hi-1 (their first `width` bytes), in order."""
    r = rows(xp, bytes_view, count, stride)[lo:hi, :width]
    return xp.ascontiguousarray(r).view(word_dtype(xp, word_bytes)).reshape(-1)


def strided_sum(xp, bytes_view, count: int, stride: int, width: int, word_bytes: int) -> int:
    """Sum (mod 2^64) of the words a load of `width` bytes every `stride` bytes reads."""
    total = 0
    per = max(1, CHUNK_BYTES // max(stride, 1))
    for lo in range(0, count, per):
        hi = min(count, lo + per)
        w = strided_words(xp, bytes_view, count, stride, width, word_bytes, lo, hi)
        total = (total + int(w.astype(xp.uint64).sum(dtype=xp.uint64))) & MASK64
    return total


def expect_strided_stores(xp, bytes_view, count: int, stride: int, width: int, word_bytes: int,
                          seed: int, what: str) -> None:
    """Elements written by a store of `width` bytes every `stride` bytes hold the
    pattern; the bytes between them still hold the poison."""
    per = max(1, CHUNK_BYTES // max(stride, 1))
    k = width // word_bytes
    for lo in range(0, count, per):
        hi = min(count, lo + per)
        w = strided_words(xp, bytes_view, count, stride, width, word_bytes, lo, hi)
        bad = int((w != pattern(xp, lo * k, (hi - lo) * k, seed, word_bytes)).sum())
        if bad:
            raise WrongResult(f"{what}: {bad} of {(hi - lo) * k} words stored from element {lo} "
                              f"differ from the pattern")
        if width < stride:
            gap = rows(xp, bytes_view, count, stride)[lo:hi, width:]
            untouched = int((gap != POISON).sum())
            if untouched:
                raise WrongResult(f"{what}: {untouched} bytes between the stores were written")
    tail = bytes_view[count * stride:]
    if len(tail):
        expect_all(xp, tail, POISON, what + " (past the last element)")


def expect_sum(got: int, want: int, what: str) -> None:
    if (int(got) & MASK64) != (int(want) & MASK64):
        raise WrongResult(f"{what}: the kernel's sum {int(got) & MASK64:#x} differs from the "
                          f"reference {int(want) & MASK64:#x}")


def partial_sum(xp, partials) -> int:
    """The total of per-block partial sums (uint64, mod 2^64)."""
    return int(partials.sum(dtype=xp.uint64)) & MASK64
