"""Idle keep-alive connections must not lock fresh clients out of `hearth serve`.

ADDRS loopback addresses (127.0.0.10..) each open PER_ADDR connections, make one request
on each and keep it open, idle: together they hold every connection slot.  FRESH clients
from 127.0.0.1 then send whole requests: all must be answered 200 (the server closes idle
keep-alive connections, oldest first, to make room, as nginx does), and no request that
is still in progress is cut (ADDRS 0 skips this).  Last, with KEEPALIVE_S > 0, one idle connection must be
closed by the server after about KEEPALIVE_S seconds (--keepalive-timeout-s).

usage: python3 tests/e2e/keepalive_slots.py PORT ADDRS PER_ADDR FRESH KEEPALIVE_S
Bounded: every socket has a timeout.  Prints checks and "RESULT passed=N failed=N"."""
import socket
import sys
import time

port, n_addr, per_addr, n_fresh, keepalive_s = (int(x) for x in sys.argv[1:6])
passed = failed = 0
REQ = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


def check(name, cond):
    global passed, failed
    if cond:
        passed += 1
        print("ok   " + name)
    else:
        failed += 1
        print("FAIL " + name)


def reply(s, deadline):
    """Reads one reply (headers and Content-Length body); returns its status or None."""
    got = b""
    while time.time() < deadline:
        k = got.find(b"\r\n\r\n")
        if k >= 0:
            n = 0
            for line in got[:k].split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    n = int(line.split(b":")[1])
            if len(got) >= k + 4 + n:
                try:
                    return int(got[9:12])
                except ValueError:
                    return None
        s.settimeout(max(0.05, deadline - time.time()))
        try:
            b = s.recv(65536)
        except OSError:
            return None
        if not b:
            return None
        got += b
    return None


def connect(src):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def fill_and_admit():
    # 1. every slot held by an idle keep-alive connection
    idle, refused = [], 0
    t0 = time.time()
    for a in range(n_addr):
        for _ in range(per_addr):
            try:
                s = connect("127.0.0.%d" % (10 + a))
                s.sendall(REQ)
                if reply(s, time.time() + 10) == 200:
                    idle.append(s)
                else:
                    refused += 1
                    s.close()
            except OSError:
                refused += 1
    check("%d idle keep-alive connections hold the slots (%d not served, %.1f s)"
          % (len(idle), refused, time.time() - t0), len(idle) == n_addr * per_addr)

    # 2. fresh clients are served (and keep their connections, so each needs a slot)
    served, fresh = 0, []
    for i in range(n_fresh):
        try:
            s = connect("127.0.0.1")
            fresh.append(s)
            s.sendall(REQ)
            if reply(s, time.time() + 10) == 200:
                served += 1
        except OSError:
            pass
    check("%d of %d fresh clients served with every slot held by idle keep-alive connections"
          % (served, n_fresh), served == n_fresh)

    # 3. the server closed idle ones to make room (at least one per fresh client), the rest
    #    still serve a second request
    closed = 0
    for s in idle:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    check("idle keep-alive connections were closed to make room (%d)" % closed, closed >= n_fresh)
    ok2 = 0
    for s in idle[-5:]:
        try:
            s.setblocking(True)
            s.settimeout(5)
            s.sendall(REQ)
            ok2 += reply(s, time.time() + 10) == 200
        except OSError:
            pass
    check("the newest idle connections still serve a second request (%d of 5)" % ok2, ok2 == 5)
    for s in idle + fresh:
        s.close()


if n_addr > 0:
    fill_and_admit()

# 4. --keepalive-timeout-s closes an idle connection well before --idle-timeout-s
if keepalive_s > 0:
    s = connect("127.0.0.1")
    s.sendall(REQ)
    st = reply(s, time.time() + 10)
    t0 = time.time()
    s.settimeout(keepalive_s + 10)
    try:
        end = s.recv(1)
    except OSError:
        end = b""
    dt = time.time() - t0
    check("an idle keep-alive connection is closed after --keepalive-timeout-s %d (%.1f s)" % (keepalive_s, dt),
          st == 200 and end == b"" and keepalive_s - 0.5 <= dt <= keepalive_s + 3)
    s.close()
print("RESULT passed=%d failed=%d" % (passed, failed))
sys.exit(0 if failed == 0 else 1)
