#!/usr/bin/env python3
"""forge.py — edit a pptrain checkpoint the way an attacker would: change fields and
recompute every CRC (docs/checkpoint-format.md), so that only the loader's own checks
([Note: checkpoint trust] in src/ckpt/ckpt_state.c) stand between the edit and a run.

  forge.py manifest STEPDIR KEY=VALUE...   set manifest keys (extra.* too), new crc32 line
  forge.py meta SHARD OLD NEW              replace bytes OLD by NEW (same length, Python
                                           escapes: 'world\x02') in the shard's metadata
                                           table; fix its CRCs
  forge.py sums STEPDIR                    set every shard.R.bytes / crc32 of the manifest
                                           from the files, then its crc32 line
"""
import codecs
import os
import re
import struct
import sys
import zlib


def crc(b):
    return zlib.crc32(b) & 0xFFFFFFFF


def escape(v):
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def write_manifest(path, lines):
    body = "".join(l + "\n" for l in lines)
    with open(path, "w") as f:
        f.write(body + "crc32 = %08x\n" % crc(body.encode()))


def read_manifest(path):
    lines = open(path).read().split("\n")
    assert lines[-1] == "" and lines[-2].startswith("crc32 = "), path
    return lines[:-2]


def set_keys(lines, pairs):
    for key, value in pairs:
        line = "%s = %s" % (key, escape(value))
        hit = [i for i, l in enumerate(lines) if l.startswith(key + " = ")]
        if hit:
            lines[hit[0]] = line
        else:
            lines.append(line)
    return lines


def forge_meta(shard, old, new):
    assert len(old) == len(new), "OLD and NEW must have the same length"
    b = bytearray(open(shard, "rb").read())
    mbytes = struct.unpack_from("<Q", b, 24)[0]
    table = bytes(b[64:64 + mbytes])
    assert table.count(old) == 1, "OLD must occur once in the metadata table"
    table = table.replace(old, new)
    b[64:64 + mbytes] = table
    struct.pack_into("<I", b, 32, crc(table))          # metadata CRC
    struct.pack_into("<I", b, 60, crc(bytes(b[:60])))  # header CRC
    end = len(b) - 32
    struct.pack_into("<I", b, end + 20, crc(bytes(b[:end])))  # body CRC in the trailer
    open(shard, "wb").write(b)


def fix_sums(stepdir):
    path = os.path.join(stepdir, "manifest")
    lines = read_manifest(path)
    files = {}
    for l in lines:
        m = re.match(r"shard\.(\d+)\.file = (.*)$", l)
        if m:
            files[m.group(1)] = m.group(2)
    pairs = []
    for r, name in files.items():
        data = open(os.path.join(stepdir, name), "rb").read()
        pairs += [("shard.%s.bytes" % r, str(len(data))), ("shard.%s.crc32" % r, "%08x" % crc(data))]
    write_manifest(path, set_keys(lines, pairs))


def main(argv):
    if len(argv) >= 3 and argv[1] == "manifest":
        path = os.path.join(argv[2], "manifest")
        pairs = [a.split("=", 1) for a in argv[3:]]
        write_manifest(path, set_keys(read_manifest(path), pairs))
    elif len(argv) == 5 and argv[1] == "meta":
        unescape = lambda a: codecs.escape_decode(a.encode())[0]  # 'world\x02' -> bytes
        forge_meta(argv[2], unescape(argv[3]), unescape(argv[4]))
    elif len(argv) == 3 and argv[1] == "sums":
        fix_sums(argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
