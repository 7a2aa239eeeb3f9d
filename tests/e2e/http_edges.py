"""HTTP edges of `hearth serve` over raw sockets, each answered as nginx answers it: one
status line per reply, 400 for a bad Content-Length or request line, 501 for an unknown
Transfer-Encoding, 413 before the body (and before any 100 Continue) for a body above the
limit, and a client that half-closes after its request still gets the whole reply; the
same answers for each bad head sent as the second request of a keep-alive connection.

usage: python3 tests/e2e/http_edges.py PORT
Every socket has a timeout; prints checks and "RESULT passed=N failed=N"."""
import json
import socket
import sys
import time

port = int(sys.argv[1])
passed = failed = 0


def check(name, cond, why=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok   " + name)
    else:
        failed += 1
        print("FAIL " + name + (": " + why if why else ""))


def exchange(data, wait=5.0, half_close=False, send_after=None):
    """Sends data, reads until the server closes or wait passes; returns (bytes, seconds, closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    t0 = time.time()
    s.sendall(data)
    if half_close:
        s.shutdown(socket.SHUT_WR)
    out, closed = b"", False
    try:
        while time.time() - t0 < wait:
            s.settimeout(max(0.05, wait - (time.time() - t0)))
            b = s.recv(65536)
            if not b:
                closed = True
                break
            out += b
            if send_after is not None and b"\r\n\r\n" in out:
                try:
                    s.sendall(send_after)
                except OSError:
                    pass
                send_after = None
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return out, time.time() - t0, closed


def statuses(raw):
    """The status codes of the replies in raw, interim (1xx) ones included, in order."""
    out, i = [], 0
    while True:
        j = raw.find(b"HTTP/1.", i)
        if j < 0:
            return out
        if j == 0 or raw[j - 2:j] == b"\r\n":
            try:
                out.append(int(raw[j + 9:j + 12]))
            except ValueError:
                pass
        i = j + 1


def body_of(raw):
    k = raw.rfind(b"\r\n\r\n")
    return raw[k + 4:] if k >= 0 else b""


def post(body, extra=b"", version=b"1.1"):
    return (b"POST /v1/completions HTTP/" + version + b"\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + b"Connection: close\r\n" + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body)


head = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
for name, cl in (("negative", b"-1"), ("overflowing", b"99999999999999999999999"), ("not a number", b"12abc")):
    raw, _, _ = exchange(head + b"Content-Length: " + cl + b"\r\n\r\n")
    st = statuses(raw)
    check("a %s Content-Length gets one 400 (got %s)" % (name, st), st == [400])
raw, _, _ = exchange(b"GARBAGE\r\n\r\n")
check("a request line of garbage gets 400 (got %s)" % statuses(raw), statuses(raw) == [400])
raw, _, _ = exchange(b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
check("a header line without a colon gets 400 (got %s)" % statuses(raw), statuses(raw) == [400])
raw, t, _ = exchange(head + b"Transfer-Encoding: gzip\r\n\r\nabc", wait=5)
check("Transfer-Encoding: gzip gets 501 at once (got %s in %.1f s)" % (statuses(raw), t),
      statuses(raw) == [501] and t < 3)
raw, t, _ = exchange(head + b"Content-Length: 100000000\r\n\r\n", wait=5)
check("a Content-Length above the limit gets 413 before the body (got %s in %.1f s)" % (statuses(raw), t),
      statuses(raw) == [413] and t < 3)
raw, t, _ = exchange(head + b"Content-Length: 100000000\r\nExpect: 100-continue\r\n\r\n", wait=5)
check("... and with Expect: 100-continue, 413 and no 100 Continue (got %s)" % statuses(raw), statuses(raw) == [413])
small = json.dumps({"model": "tiny", "prompt": "hi", "max_tokens": 3}).encode()
raw, _, _ = exchange(head + b"Connection: close\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(small), wait=10,
                     send_after=small)
check("Expect: 100-continue with a small body: 100 then 200 (got %s)" % statuses(raw), statuses(raw) == [100, 200])
raw, _, _ = exchange(b"GET /health HTTP/1.1\r\n\r\n")
check("HTTP/1.1 without Host gets 400 (got %s)" % statuses(raw), statuses(raw) == [400])

# half-close after the request: the whole reply still comes (nginx answers it too)
body = json.dumps({"model": "tiny", "prompt": "half closed", "max_tokens": 40, "ignore_eos": True}).encode()
raw, _, _ = exchange(post(body), wait=30, half_close=True)
st = statuses(raw)
try:
    usage = json.loads(body_of(raw))["usage"]["completion_tokens"]
except (ValueError, KeyError, TypeError):
    usage = None
check("half-closed, not streamed: the reply is 200 with every token (got %s, %s tokens)" % (st, usage),
      st and st[-1] == 200 and all(x == 100 for x in st[:-1]) and usage == 40)
body = json.dumps({"model": "tiny", "prompt": "half closed", "max_tokens": 40, "ignore_eos": True,
                   "stream": True}).encode()
raw, _, _ = exchange(post(body), wait=30, half_close=True)
check("half-closed, streamed: 200 and the stream ends with [DONE] (got %s)" % statuses(raw),
      statuses(raw) == [200] and b"data: [DONE]" in raw)

# keep-alive: two requests on one connection, the second after the first reply
s = socket.create_connection(("127.0.0.1", port), timeout=10)
got = b""
for k in range(2):
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    t0 = time.time()
    while got.count(b"HTTP/1.1 200") <= k and time.time() - t0 < 10:
        b = s.recv(65536)
        if not b:
            break
        got += b
s.close()
check("keep-alive: two requests on one connection get two 200s", got.count(b"HTTP/1.1 200") == 2)

def after_good(bad, wait=5.0):
    """A good request, its whole reply, then bad on the same keep-alive connection: returns
    (the statuses of what came after the first reply, seconds, whether the server closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    first, t0 = b"", time.time()
    while b"\r\n\r\n" not in first or len(first) < first.index(b"\r\n\r\n") + 4 + int(
            (first.split(b"Content-Length: ")[1:] or [b"0\r"])[0].split(b"\r")[0] or 0):
        b = s.recv(65536)
        if not b or time.time() - t0 > wait:
            s.close()
            return None, 0.0, True
        first += b
    t0 = time.time()
    s.sendall(bad)
    out, closed = b"", False
    try:
        while time.time() - t0 < wait:
            s.settimeout(max(0.05, wait - (time.time() - t0)))
            b = s.recv(65536)
            if not b:
                closed = True
                break
            out += b
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return statuses(out), time.time() - t0, closed


# each bad head as the SECOND request of a keep-alive connection gets the answer it gets
# as a first request (the gate checks only the first; the rest are checked before
# libmicrohttpd reads them): one status line, at once, then the connection closes
second = [
    ("a negative Content-Length", head + b"Content-Length: -1\r\n\r\n", 400),
    ("an overflowing Content-Length", head + b"Content-Length: 99999999999999999999999\r\n\r\n", 400),
    ("a Content-Length that is not a number", head + b"Content-Length: 12abc\r\n\r\n", 400),
    ("a request line of garbage", b"GARBAGE\r\n\r\n", 400),
    ("Transfer-Encoding: gzip", head + b"Transfer-Encoding: gzip\r\n\r\nabc", 501),
    ("a Content-Length above the limit", head + b"Content-Length: 100000000\r\n\r\n", 413),
    ("a Content-Length above the limit with Expect: 100-continue",
     head + b"Content-Length: 100000000\r\nExpect: 100-continue\r\n\r\n", 413),
    ("HTTP/1.1 without Host", b"GET /health HTTP/1.1\r\n\r\n", 400),
]
for name, bad, want in second:
    st, t, closed = after_good(bad)
    check("keep-alive, second request: %s gets one %d at once, then a close (got %s in %.1f s%s)"
          % (name, want, st, t, ", closed" if closed else ""), st == [want] and t < 3 and closed)
# (it asks the server to close after its reply, so that the read ends there instead of
# waiting out the 10 s for a connection kept alive)
st, t, closed = after_good(post(small), wait=10)
check("keep-alive, second request: a good one is served (got %s)" % st, st == [200] and closed and t < 5)

# two requests sent at once (pipelined): libmicrohttpd has read the second before anyone
# could check it, so the first reply closes the connection (the client resends); no hang
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
got, t0, closed = b"", time.time(), False
try:
    while time.time() - t0 < 10:
        b = s.recv(65536)
        if not b:
            closed = True
            break
        got += b
except socket.timeout:
    pass
s.close()
check("pipelined: the first request is answered, then the connection closes at once (%d replies, %.1f s)"
      % (got.count(b"HTTP/1.1 200"), time.time() - t0), got.count(b"HTTP/1.1 200") >= 1 and closed and
      time.time() - t0 < 5)

raw, _, _ = exchange(post(small), wait=10)
check("still serving (got %s)" % statuses(raw), statuses(raw) == [200])
print("RESULT passed=%d failed=%d" % (passed, failed))
sys.exit(0 if failed == 0 else 1)
