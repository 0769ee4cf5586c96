#!/usr/bin/env python3
"""Writers that run a tarn mount out of space, and checkers of what they leave, for
tests/functional/mount/enospc_write.sh.

Each writer prints one JSON line: the bytes its calls reported written and the first call that
failed ({"call": "write" | "fsync" | "close" | "msync", "errno": "ENOSPC"}). Each checker
exits 1 with a message when the stored file breaks the rules: every byte a call reported is
there with its data, the file is no longer than what was stored, and no range reads as zeros
that was written with data. Data is made from the offset, so a checker regenerates it.
"""

import errno
import json
import mmap
import os
import random
import struct
import sys
import zlib

MIB = 1 << 20


# The pattern: one MiB of seeded random bytes, repeated, with every 4 KiB unit's first 8 bytes
# replaced by the unit's offset. Incompressible within any record (a record is at most 1 MiB),
# and data put at the wrong place, or zeros, never match it. Made once per process: the writers
# and checkers make hundreds of MiB of it, and seeding a generator per piece cost more CPU than
# the tarn daemon under test on a loaded CI machine.
BASE = random.Random(0x7A5E).randbytes(MIB)
UNIT = 4096


def pattern(offset, length):
    """Incompressible bytes that depend only on their offset."""
    first = offset - offset % UNIT
    end = offset + length
    out = bytearray()
    while first + len(out) < end:
        at = (first + len(out)) % MIB
        out += BASE[at:]
    for unit in range(0, len(out), UNIT):
        struct.pack_into("<Q", out, unit, first + unit)
    start = offset - first
    return bytes(out[start:start + length])


def failure(call, error):
    return {"call": call, "errno": errno.errorcode.get(error.errno, str(error.errno))}


def sync_and_close(fd):
    """fsync and close `fd`; the first of them that fails, or None."""
    first = None
    for call, action in (("fsync", lambda: os.fsync(fd)), ("close", lambda: os.close(fd))):
        try:
            action()
        except OSError as error:
            first = first or failure(call, error)
    return first


def write_loop(path, chunk, limit):
    """write(2) `chunk` bytes at a time until one fails or `limit` bytes; then fsync, close."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written, first, short = 0, None, 0
    while written < limit:
        try:
            n = os.write(fd, pattern(written, chunk))
        except OSError as error:
            first = failure("write", error)
            break
        if n < chunk:
            short += 1
        written += n
    first = first or sync_and_close(fd)
    print(json.dumps({"written": written, "first": first, "short": short}))


def check_prefix(path, written):
    """The file holds exactly `written` bytes of the pattern."""
    size = os.stat(path).st_size
    if size != written:
        sys.exit(f"{path}: {size} bytes stored, {written} reported written")
    with open(path, "rb") as f:
        offset = 0
        while offset < size:
            data = f.read(MIB)
            if data != pattern(offset, len(data)):
                zeros = data.count(0) == len(data)
                sys.exit(f"{path}: wrong data at {offset}{' (zeros)' if zeros else ''}")
            offset += len(data)


def check_copy(path, source):
    """A copy cut short by ENOSPC: a prefix of `source`, never zeros where data was."""
    size = os.stat(path).st_size
    with open(path, "rb") as copy, open(source, "rb") as original:
        offset = 0
        while offset < size:
            data = copy.read(MIB)
            want = original.read(len(data))
            if data != want:
                zeros = data.count(0) == len(data)
                sys.exit(f"{path}: differs from {source} at {offset}"
                         f"{' (zeros)' if zeros else ''}; {size} bytes long")
            offset += len(data)
    print(size)


RECORD = 4096


def record(writer, sequence):
    body = struct.pack("<II", writer, sequence) + pattern(sequence * 7919 + writer, RECORD - 12)
    return body + zlib.crc32(body).to_bytes(4, "little")


def append(path, writer):
    """Append 64 KiB records with O_APPEND until a write fails; print how many were written."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sequence, first = 0, None
    while True:
        try:
            n = os.write(fd, record(writer, sequence))
        except OSError as error:
            first = failure("write", error)
            break
        if n != RECORD:
            first = {"call": "write", "errno": f"short {n}"}
            break
        sequence += 1
    first = first or sync_and_close(fd)
    print(json.dumps({"writer": writer, "records": sequence, "first": first}))


def check_appends(path, counts):
    """Every record reported written is there, whole; nothing else is in the file."""
    counts = [int(count) for count in counts]
    size = os.stat(path).st_size
    if size % RECORD:
        sys.exit(f"{path}: {size} bytes is not a whole number of records")
    seen = [set() for _ in counts]
    with open(path, "rb") as f:
        for index in range(size // RECORD):
            data = f.read(RECORD)
            writer, sequence = struct.unpack("<II", data[:8])
            if writer >= len(counts) or data != record(writer, sequence):
                zeros = data.count(0) == len(data)
                sys.exit(f"{path}: record {index} is damaged{' (zeros)' if zeros else ''}")
            seen[writer].add(sequence)
    for writer, count in enumerate(counts):
        missing = set(range(count)) - seen[writer]
        if missing:
            sys.exit(f"{path}: writer {writer} lost records {sorted(missing)[:5]}...")
    print(size // RECORD)


def mmap_loop(path, length):
    """Extend a file to `length` (a hole), map it shared, dirty 1 MiB at a time and msync
    each; stop at the first failure. Prints the bytes msync reported stored."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, length)
    mapping = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    synced, first = 0, None
    while synced < length:
        mapping[synced:synced + MIB] = pattern(synced, MIB)
        try:
            mapping.flush(synced, MIB)
        except OSError as error:
            first = failure("msync", error)
            break
        synced += MIB
    try:
        mapping.close()
    except OSError as error:
        first = first or failure("munmap", error)
    first = first or sync_and_close(fd)
    print(json.dumps({"written": synced, "first": first}))


def check_mmap(path, synced):
    """What msync reported stored is there; past it each page holds the pattern or zeros (the
    hole): an msync that failed may have stored some of its range's pages, not others."""
    with open(path, "rb") as f:
        offset = 0
        while True:
            data = f.read(MIB)
            if not data:
                break
            want = pattern(offset, len(data))
            if offset < synced and data != want:
                sys.exit(f"{path}: data msync reported stored is wrong at {offset}")
            if offset >= synced and data != want:
                for page in range(0, len(data), UNIT):
                    got = data[page:page + UNIT]
                    if got != want[page:page + UNIT] and got.count(0) != len(got):
                        sys.exit(f"{path}: neither the data nor a hole at {offset + page}")
            offset += len(data)
    print(offset)


def main():
    verb, args = sys.argv[1], sys.argv[2:]
    if verb == "write-loop":
        write_loop(args[0], int(args[1]), int(args[2]))
    elif verb == "check-prefix":
        check_prefix(args[0], int(args[1]))
    elif verb == "check-copy":
        check_copy(args[0], args[1])
    elif verb == "pattern-file":
        with open(args[0], "wb") as f:
            for offset in range(0, int(args[1]), MIB):
                f.write(pattern(offset, MIB))
    elif verb == "append":
        append(args[0], int(args[1]))
    elif verb == "check-appends":
        check_appends(args[0], args[1:])
    elif verb == "mmap-loop":
        mmap_loop(args[0], int(args[1]))
    elif verb == "check-mmap":
        check_mmap(args[0], int(args[1]))
    else:
        sys.exit(f"unknown verb {verb}")


if __name__ == "__main__":
    main()
