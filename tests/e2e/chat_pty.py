# `hearth chat` on a terminal (a pseudo-terminal): libedit's line editing, Ctrl-C while
# an answer is written (stops it), Ctrl-C at the prompt (a new line, not the end), /exit.
# usage: python3 tests/e2e/chat_pty.py HEARTH MODEL_DIR
# Prints "ok NAME" / "FAIL NAME" per check and "RESULT passed=N failed=N".
import os, pty, select, sys, time

hearth, model = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    os.execv(hearth, [hearth, "chat", "--model", model, "--ignore-eos", "--max-tokens", "100000",
                      "--kv-cache-mib", "8", "--threads", "2"])
out = b""


def read_for(seconds):
    global out
    end = time.time() + seconds
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                out += os.read(fd, 65536)
            except OSError:
                return


def read_until(count, what, seconds=60):
    """Reads until `what` occurs `count` times in the output (or the time is up)."""
    end = time.time() + seconds
    while out.count(what) < count and time.time() < end:
        read_for(0.1)


def answer_growing():
    """Waits until an answer is being written: the output grows past the echo."""
    n = len(out)
    end = time.time() + 60
    while len(out) < n + 40 and time.time() < end:
        read_for(0.1)


read_until(1, b"> ")                                 # the engine is up, the prompt shown
os.write(fd, b"hi\r"); answer_growing()
os.write(fd, b"\x03"); read_until(1, b"[stopped]")   # stops the answer
read_until(2, b"> ")
os.write(fd, b"\x03"); read_for(0.5)                 # at the prompt: a new line
os.write(fd, b"abc\x1b[D\x1b[DX\r"); answer_growing()  # two cursor-lefts: "aXbc"
os.write(fd, b"\x03"); read_until(2, b"[stopped]")
read_until(4, b"> ")
os.write(fd, b"/exit\r"); read_for(2)
status = None
for _ in range(100):  # at most 10 s more, then it is killed
    done, st = os.waitpid(pid, os.WNOHANG)
    if done:
        status = st
        break
    read_for(0.1)
if status is None:
    os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
s = out.decode("utf-8", "replace")
checks = [
    ("chat on a terminal: exits 0 on /exit", os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0),
    ("chat on a terminal: Ctrl-C stopped both answers", s.count("[stopped]") == 2),
    ("chat on a terminal: both turns ran", s.count("prompt tokens") == 2),
    ("chat on a terminal: line editing (aXbc)", "aXbc" in s),
]
failed = 0
for name, good in checks:
    print(("ok   " if good else "FAIL ") + name)
    failed += not good
if failed:
    print(s[-2000:])
print(f"RESULT passed={len(checks) - failed} failed={failed}")
