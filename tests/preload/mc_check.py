# Checks memcached's answers byte for byte over the text protocol (memcslap never checks values).
# Usage: mc_check.py PORT. Stores one known value and 40 values from 1 KiB to 100 KiB, reads them all
# back with one multi-get and compares. Exit 0 when all match; prints what differs otherwise.
# Sizes stay at or below 100 KiB: after memcslap has filled the 64 MB cache, bigger items can be
# evicted at once even under glibc malloc (memcached has no free page for their slab class).
import hashlib
import socket
import sys

port = int(sys.argv[1])
sock = socket.create_connection(("127.0.0.1", port), timeout=20)
buf = b""


def readline():
    global buf
    while b"\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            sys.exit("memcached closed the connection")
        buf += data
    line, buf = buf.split(b"\r\n", 1)
    return line


def readexact(n):
    global buf
    while len(buf) < n:
        data = sock.recv(65536)
        if not data:
            sys.exit("memcached closed the connection")
        buf += data
    out, buf = buf[:n], buf[n:]
    return out


def store(key, value):
    sock.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))
    reply = readline()
    if reply != b"STORED":
        sys.exit(f"set {key!r} ({len(value)} bytes): {reply!r}")


def pattern(i, size):
    # Deterministic bytes that differ per key, so a value served from the wrong block is caught.
    seed = hashlib.sha256(b"nicmalloc %d" % i).digest()
    return (seed * (size // len(seed) + 1))[:size]


values = {b"nicmalloc:known": b"nicmalloc-known-value-" * 100}  # 2200 bytes
sizes = [1025, 2000, 4096, 4097, 10000, 16384, 65536, 100000]
for i in range(40):
    values[b"nicmalloc:%d" % i] = pattern(i, sizes[i % len(sizes)] + i)
for key, value in values.items():
    store(key, value)

sock.sendall(b"get " + b" ".join(values) + b"\r\n")
got = {}
while True:
    line = readline()
    if line == b"END":
        break
    kind, key, _flags, length = line.split()
    if kind != b"VALUE":
        sys.exit(f"unexpected reply {line!r}")
    got[key] = readexact(int(length))
    if readexact(2) != b"\r\n":
        sys.exit(f"value of {key!r} is not followed by CRLF")

bad = [k for k in values if got.get(k) != values[k]]
if bad:
    for k in bad:
        g = got.get(k)
        print(f"{k.decode()}: sent {len(values[k])} bytes, got "
              f"{'nothing' if g is None else f'{len(g)} bytes that differ'}")
    sys.exit(f"{len(bad)} of {len(values)} values wrong")
print(f"mc_check: {len(values)} values ({sum(map(len, values.values()))} bytes) read back intact")
