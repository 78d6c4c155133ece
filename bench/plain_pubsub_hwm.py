"""Plain pyzmq pub-sub (no zmqload code): does a small HWM drop when the subscriber keeps up?

    python bench/plain_pubsub_hwm.py RATE SECONDS HWM      e.g. 20000 4 100

A PUB paced by busy-waiting, 256 B messages carrying their seq, SNDHWM = RCVHWM = HWM; a SUB in
another process that only counts (it keeps up easily) and notes the missing seqs. docs/CAPACITY.md
quotes it: HWM 100 drops under a few ms of scheduling stall, HWM 1000 does not.
"""

import sys, time, struct, zmq, multiprocessing as mp

RATE = int(sys.argv[1])
DUR = float(sys.argv[2])
HWM = int(sys.argv[3])
SIZE = 256


def sub(port, q):
    c = zmq.Context()
    s = c.socket(zmq.SUB)
    s.setsockopt(zmq.RCVHWM, HWM)
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(f"tcp://127.0.0.1:{port}")
    s.setsockopt(zmq.RCVTIMEO, 1000)
    q.put("ready")
    got = 0
    last = -1
    missing = 0
    gaps = []
    while True:
        try:
            m = s.recv()
        except zmq.Again:
            break
        seq = struct.unpack_from("<q", m)[0]
        if seq < 0:
            continue
        if seq > last + 1:
            missing += seq - last - 1
            gaps.append((last, seq, time.monotonic()))
        last = max(last, seq)
        got += 1
    q.put((got, last + 1, missing, gaps[:10]))


if __name__ == "__main__":
    c = zmq.Context()
    p = c.socket(zmq.PUB)
    p.setsockopt(zmq.SNDHWM, HWM)
    port = p.bind_to_random_port("tcp://127.0.0.1")
    q = mp.Queue()
    w = mp.Process(target=sub, args=(port, q))
    w.start()
    q.get()
    pad = b"x" * (SIZE - 8)
    for _ in range(200):
        p.send(struct.pack("<q", -1) + pad)
        time.sleep(0.005)
    n = int(RATE * DUR)
    t0 = time.perf_counter()
    per = 1.0 / RATE
    for i in range(n):
        due = t0 + i * per
        while time.perf_counter() < due:
            pass
        p.send(struct.pack("<q", i) + pad)
    el = time.perf_counter() - t0
    got, top, missing, gaps = q.get()
    w.join()
    print(f"rate {RATE} sent {n} in {el:.2f}s received {got} missing {n - got} gaps {gaps}")
