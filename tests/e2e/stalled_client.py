"""A streaming client that stops reading: sends its request over a socket with a small
receive buffer, then holds the connection open without reading for SECONDS.

usage: python3 tests/e2e/stalled_client.py PORT SECONDS BODY_JSON"""
import socket
import sys
import time

port, seconds, body = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3].encode()
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.settimeout(10)
s.connect(("127.0.0.1", port))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
time.sleep(seconds)
s.close()
