"""Slow connections must not lock fresh clients out of `hearth serve`.

SLOW connections (spread over the loopback addresses 127.0.0.2..) each send a request line
and then one header line every second, never finishing their head; with all of them open,
FRESH clients from 127.0.0.1 send whole requests and must all be answered.  The server's
head deadline (HEAD_S, --request-head-timeout) must then close every slow connection with
a 408.  Last, PER_CLIENT + 6 connections from one address: at most PER_CLIENT stay open,
the others get 503 at once.

usage: python3 tests/e2e/slow_clients.py PORT SLOW FRESH HEAD_S PER_CLIENT
Bounded: every wait has a deadline.  Prints checks and "RESULT passed=N failed=N"."""
import json
import socket
import sys
import threading
import time

port, n_slow, n_fresh, head_s, per_client = (int(x) for x in sys.argv[1:6])
passed = failed = 0


def check(name, cond):
    global passed, failed
    if cond:
        passed += 1
        print("ok   " + name)
    else:
        failed += 1
        print("FAIL " + name)


def connect(src, timeout=5.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


# 1. the slow connections: each address holds fewer than the per-client limit
per_addr = max(1, per_client - 4)
slow, refused_early = [], 0
t_start = time.time()
for i in range(n_slow):
    src = "127.0.0.%d" % (2 + i // per_addr)
    try:
        s = connect(src)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        s.setblocking(False)
        slow.append([s, None, b""])  # socket, when it closed, what it got
    except OSError:
        refused_early += 1
check("%d slow connections opened (%d failed)" % (len(slow), refused_early), len(slow) == n_slow)


def trickle(until):
    """One more header line per open slow connection every second; notes the ones that close."""
    next_line = time.time()
    while time.time() < until and any(c[1] is None for c in slow):
        now = time.time()
        for c in slow:
            if c[1] is not None:
                continue
            try:
                b = c[0].recv(4096)
                if b:
                    c[2] += b
                else:
                    c[1] = now
                    continue
            except BlockingIOError:
                pass
            except OSError:
                c[1] = now
                continue
            if now >= next_line:
                try:
                    c[0].send(b"X-Slow: %d\r\n" % int(now))
                except OSError:
                    c[1] = now
        if now >= next_line:
            next_line = now + 1.0
        time.sleep(0.05)


# 2. fresh clients while every slow connection is open
results = [None] * n_fresh


def fresh(k):
    body = json.dumps({"model": "tiny", "prompt": "fresh %d" % k, "max_tokens": 2}).encode()
    try:
        s = connect("127.0.0.1", timeout=10)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        got = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
        s.close()
        results[k] = got.split(b"\r\n", 1)[0]
    except OSError as e:
        results[k] = ("error: %s" % e).encode()


threads = [threading.Thread(target=fresh, args=(k,)) for k in range(n_fresh)]
for t in threads:
    t.start()
trickle(time.time() + 0.5)
for t in threads:
    t.join(timeout=15)
served = sum(1 for r in results if r and r.startswith(b"HTTP/1.1 200"))
open_then = sum(1 for c in slow if c[1] is None)
check("all %d fresh clients served while %d slow connections were open (%d served)" % (n_fresh, open_then, served),
      served == n_fresh)

# 3. the head deadline closes the slow ones with 408
trickle(t_start + head_s + 4)
closed = [c for c in slow if c[1] is not None]
with408 = sum(1 for c in closed if c[2].startswith(b"HTTP/1.1 408"))
late = [c[1] - t_start for c in closed if c[1] - t_start > head_s + 3]
check("the head deadline closed every slow connection (%d of %d, %d with 408, %d late)"
      % (len(closed), len(slow), with408, len(late)), len(closed) == len(slow) and with408 == len(slow) and not late)
for c in slow:
    c[0].close()

# 4. connections of one address are bounded
conns, rejected = [], 0
for i in range(per_client + 6):
    try:
        s = connect("127.0.0.250")
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        conns.append(s)
    except OSError:
        rejected += 1
time.sleep(0.5)
refused = 0
for s in conns:
    s.settimeout(0.2)
    try:
        b = s.recv(4096)
        if b.startswith(b"HTTP/1.1 503") or not b:
            refused += 1
    except socket.timeout:
        pass
    except OSError:
        refused += 1
check("one address: %d connections beyond the limit of %d refused (got %d)" % (6, per_client, refused + rejected),
      refused + rejected == 6)
for s in conns:
    s.close()
# 5. keep-alive: after one answered request, a second head trickled in a line every half
# second must be cut off by the head deadline too
s = connect("127.0.0.1", timeout=10)
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
first = b""
while b"\r\n\r\n" not in first:
    b = s.recv(4096)
    if not b:
        break
    first += b
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
s.setblocking(False)
t0, closed_at = time.time(), None
while time.time() - t0 < head_s + 4 and closed_at is None:
    try:
        b = s.recv(4096)
        if not b:
            closed_at = time.time() - t0
    except BlockingIOError:
        pass
    except OSError:
        closed_at = time.time() - t0
    if closed_at is None:
        try:
            s.send(b"X-Slow: 1\r\n")
        except OSError:
            closed_at = time.time() - t0
        time.sleep(0.5)
s.close()
check("keep-alive: a second head trickled after an answered request is cut off (%s)"
      % ("after %.1f s" % closed_at if closed_at is not None else "still open"),
      first.startswith(b"HTTP/1.1 200") and closed_at is not None and closed_at <= head_s + 2)
print("RESULT passed=%d failed=%d" % (passed, failed))
sys.exit(0 if failed == 0 else 1)
