"""A pyzmq DEALER carries a real handshake (computed by the noise-probe binary) to the master
and reports whether the master's verdict arrived before the connection closed.

usage: verdict_probe.py <host:port> <master key hex> <noise-probe path> <id> <seed> <tries>
Prints one line per try: what the verdict said, or `lost: ...`.
"""
import subprocess
import sys
import time

import zmq


def attempt(addr, master_key, probe, minion_id, seed):
    helper = subprocess.Popen([probe, master_key, minion_id, str(seed)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect("tcp://" + addr)
    try:
        sock.send(bytes.fromhex(helper.stdout.readline().strip()))
        if not sock.poll(5000):
            return "lost: no message 2"
        helper.stdin.write(sock.recv().hex() + "\n")
        helper.stdin.flush()
        sock.send(bytes.fromhex(helper.stdout.readline().strip()))
        # An application does not always read at once: the verdict must still be there.
        time.sleep(0.2)
        if not sock.poll(5000):
            return "lost: no verdict"
        parts = sock.recv_multipart()
        helper.stdin.write(",".join(part.hex() for part in parts) + "\n")
        helper.stdin.flush()
        return helper.stdout.readline().strip() or "lost: no answer from the probe"
    finally:
        sock.close()
        helper.kill()
        helper.wait()


def main():
    addr, master_key, probe, minion_id, seed, tries = sys.argv[1:7]
    for n in range(int(tries)):
        name = minion_id.replace("{n}", str(n))
        print(attempt(addr, master_key, probe, name, int(seed) + n if "{n}" in minion_id else int(seed)), flush=True)


if __name__ == "__main__":
    main()
