# A short, deterministic Python workload for python.sh. It prints one line per check; python.sh
# compares the lines with known values, so any corrupted byte shows up as a wrong digest.
import collections
import hashlib
import json
import os
import subprocess
import threading
import zlib


def digest(data):
    return hashlib.sha256(data).hexdigest()[:16]


# Many small objects (dicts, lists, strings): the control heap.
table = {f"key{i}": [i, str(i) * (i % 7), {"sq": i * i}] for i in range(50000)}
text = json.dumps(table, sort_keys=True)
assert json.loads(text) == table
print("table", len(table), digest(text.encode()))

# A buffer grown step by step (realloc) to 512 KiB, and a compression round trip of big buffers:
# large blocks, which NICMALLOC_DP_MIN_SIZE sends to the dataplane.
blob = bytearray()
for i in range(2048):
    blob += hashlib.sha256(str(i).encode()).digest() * 8
assert zlib.decompress(zlib.compress(text.encode(), 6)) == text.encode()
print("blob", len(blob), digest(bytes(blob)))

# Two threads allocate 4-4.5 KiB buffers into one bounded deque: each thread frees blocks the other
# one allocated (cross-thread free).
shared = collections.deque(maxlen=256)
results = [None, None]


def worker(n):
    h = hashlib.sha256()
    for i in range(20000):
        s = f"{n}-{i}" * (1 + i % 50)
        h.update(s.encode())
        shared.append(bytes([n]) * (4096 + i % 512))
    results[n] = h.hexdigest()[:16]


threads = [threading.Thread(target=worker, args=(n,)) for n in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
shared.clear()
print("threads", *results)

# Child processes: they inherit LD_PRELOAD, so they run under the library too, but not
# NICMALLOC_STATS, so that the one report on stderr is Python's.
env = {k: v for k, v in os.environ.items() if k != "NICMALLOC_STATS"}
print("true", subprocess.run(["/bin/true"], env=env).returncode)
echo = subprocess.run(["/bin/echo", "hello"], env=env, capture_output=True, text=True)
print("echo", echo.stdout.strip())

# fork() after threads have run: the child must still be able to allocate (allocator locks and
# per-thread state must survive fork).
pid = os.fork()
if pid == 0:
    chunks = [bytes(10000) for _ in range(100)]
    os._exit(0 if sum(map(len, chunks)) == 1000000 else 1)
_, status = os.waitpid(pid, 0)
print("fork", os.waitstatus_to_exitcode(status))
