#!/usr/bin/env python3
"""Cut recorded client streams (tests/fuzz/record.c) into the seed corpus of tests/fuzz.

    make_corpus.py OUT_DIR STREAM...

OUT_DIR/frame and OUT_DIR/worker get runs of whole frames after the Hello (at most 16 KiB, bulk
of at most 4 KiB kept, larger bulk frames dropped), OUT_DIR/call the message of the first
Calls of each operation. Files are named by the SHA-1 of their bytes, as libFuzzer names them.
"""
import hashlib
import os
import struct
import sys

HDR = struct.Struct("<IHHIIQ")  # magic, type, flags, msg_len, reserved, bulk_len
MAGIC, HELLO, CALL = 0x55504752, 1, 3
RUN_MAX, BULK_MAX, CALLS_PER_OP = 16 << 10, 4096, 3


def frames(data):
    off = 0
    while off + HDR.size <= len(data):
        magic, ftype, _, msg_len, _, bulk_len = HDR.unpack_from(data, off)
        end = off + HDR.size + msg_len + bulk_len
        if magic != MAGIC or end > len(data):
            return
        yield ftype, data[off:end], data[off + HDR.size:off + HDR.size + msg_len], bulk_len
        off = end


def op_of(msg):
    """The Call's op (field 2, a varint), or None."""
    i = 0
    while i < len(msg):
        key, i = varint(msg, i)
        if key is None:
            return None
        field, wire = key >> 3, key & 7
        if wire == 0:
            val, i = varint(msg, i)
            if field == 2:
                return val
        elif wire == 2:
            n, i = varint(msg, i)
            i += n or 0
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            return None
    return None


def varint(b, i):
    v, shift = 0, 0
    while i < len(b):
        v |= (b[i] & 0x7F) << shift
        i += 1
        if not b[i - 1] & 0x80:
            return v, i
        shift += 7
    return None, i


def save(directory, blob):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, hashlib.sha1(blob).hexdigest()), "wb") as f:
        f.write(blob)


def main():
    out, seen = sys.argv[1], {}
    for path in sys.argv[2:]:
        run = b""
        for ftype, frame, msg, bulk_len in frames(open(path, "rb").read()):
            if ftype == HELLO or bulk_len > BULK_MAX:
                continue
            if ftype == CALL:
                op = op_of(msg)
                if seen.setdefault(op, 0) < CALLS_PER_OP:
                    seen[op] += 1
                    save(os.path.join(out, "call"), msg)
            if run and len(run) + len(frame) > RUN_MAX:
                save(os.path.join(out, "frame"), run)
                save(os.path.join(out, "worker"), run)
                run = b""
            run += frame
        if run:
            save(os.path.join(out, "frame"), run)
            save(os.path.join(out, "worker"), run)


if __name__ == "__main__":
    main()
