"""A libzmq peer (through pyzmq) for halite's ZMTP interoperability tests.

Modes:
  dealer ADDR [--heartbeat-ms N] [--idle-ms N]
      Connects a DEALER to ADDR, sends three multipart messages, expects each echoed back with
      b"echo" prepended, optionally idles (heartbeats flowing) and repeats. Exits 0 on success.
  router [--heartbeat-ms N]
      Binds a ROUTER on 127.0.0.1 (random port), prints the port, then echoes every message back
      to its sender with b"echo" prepended until it has echoed COUNT messages (default 6).
"""

import argparse
import sys
import time

import zmq

MESSAGES = [
    [b"hello"],
    [b"multi", b"", b"part", b"x" * 300],
    [bytes(range(256)) * 40],
]


def configure(sock, heartbeat_ms):
    sock.setsockopt(zmq.LINGER, 1000)
    if heartbeat_ms:
        sock.setsockopt(zmq.HEARTBEAT_IVL, heartbeat_ms)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, heartbeat_ms * 3)
        sock.setsockopt(zmq.HEARTBEAT_TTL, heartbeat_ms * 10)


def exchange(sock):
    for msg in MESSAGES:
        sock.send_multipart(msg)
        if not sock.poll(5000):
            sys.exit(f"no echo for {msg[0][:10]!r}")
        reply = sock.recv_multipart()
        if reply != [b"echo"] + msg:
            sys.exit(f"bad echo: {[p[:10] for p in reply]!r}")


def dealer(args):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    configure(sock, args.heartbeat_ms)
    monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    sock.connect(args.addr)
    exchange(sock)
    if args.idle_ms:
        time.sleep(args.idle_ms / 1000)
        if monitor.poll(0):
            sys.exit("disconnected while idle: heartbeats were not answered")
        exchange(sock)
    print("ok", flush=True)


def router(args):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    configure(sock, args.heartbeat_ms)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    print(port, flush=True)
    for _ in range(args.count):
        if not sock.poll(20000):
            sys.exit("router: no message within 20 s")
        identity, *parts = sock.recv_multipart()
        sock.send_multipart([identity, b"echo"] + parts)
    print("ok", flush=True)
    time.sleep(0.5)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["dealer", "router"])
    parser.add_argument("addr", nargs="?")
    parser.add_argument("--heartbeat-ms", type=int, default=0)
    parser.add_argument("--idle-ms", type=int, default=0)
    parser.add_argument("--count", type=int, default=6)
    args = parser.parse_args()
    {"dealer": dealer, "router": router}[args.mode](args)


if __name__ == "__main__":
    main()
