"""The claims zmqload settles by measurement, each with its id and where it was made.

Sources: 000 a zeromq-dev mailing-list post (2014), 001-003 three blog posts, U-n what
users of libzmq and pyzmq keep reporting in their issue trackers, X-n zmqload's own
additions. The texts are the claims as made, right or wrong.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    id: str
    source: str
    text: str


SOURCES = {
    "000": "zeromq-dev mailing list, 'Effect of RCVHWM on pull socket at context termination?' (2014)",
    "001": "blog post, 'ZeroMQ High Water Mark (HWM) Not Dropping Messages?'",
    "002": "blog post on ZeroMQ's 'dropped messages' problem (fast PUB, slow SUB)",
    "003": "blog post on ZeroMQ sockets lingering on close",
    "U": "libzmq and pyzmq issue trackers (and their users' fixes); U-12 a zmq.rs pull request",
    "X": "zmqload",
}

CLAIMS = {
    c.id: c
    for c in (
        Claim(
            "000-1",
            "000",
            "With default LINGER, terminating the PUSH side's context waits until the PULL side has "
            "every message",
        ),
        Claim(
            "000-2",
            "000",
            "With RCVHWM=1 on the PULL, the sender's termination does not hang and the last messages "
            "are lost; RCVHWM 10 or the default fixes it",
        ),
        Claim("000-3", "000", "Terminating a context whose socket is still open blocks"),
        Claim(
            "000-4", "000", "Some setup gives reliable delivery with bounded memory at both ends"
        ),
        Claim("001-1", "001", "Default SNDHWM/RCVHWM is 1000 (per socket type)"),
        Claim("001-2", "001", "PUSH, PUB, XPUB, XSUB drop at HWM; REQ, REP, DEALER, ROUTER block"),
        Claim("001-3", "001", "At RCVHWM the receiver discards new messages"),
        Claim("001-4", "001", "A PUB at HWM with DONTWAIT raises EAGAIN, so drops can be counted"),
        Claim(
            "001-5",
            "001",
            "SNDHWM=100 on the PUB and the proxy's XPUB bounds what waits between PUB and a slow SUB "
            "and makes drops appear",
        ),
        Claim("001-6", "001", "A socket monitor event ZMQ_EVENT_SND_HWM reports the HWM being hit"),
        Claim("001-7", "001", "Large messages fill the HWM faster than small ones"),
        Claim(
            "002-1",
            "002",
            "Fast PUB (~1000 msg/s), SUB at 100 ms/msg: the missing ~900 of 1000 are dropped",
        ),
        Claim("002-2", "002", "Raising the receiver's HWM fixes a slow subscriber"),
        Claim("002-3", "002", "setsockopt(zmq.HWM, 10000) raises the HWM"),
        Claim("002-4", "002", "A sender HWM that is too low makes the sender block or error"),
        Claim("002-5", "002", "Multipart messages reduce the memory that buffered data takes"),
        Claim("003-1", "003", "The default LINGER is 0"),
        Claim("003-2", "003", "close() blocks for the linger period while it sends what is queued"),
        Claim("003-3", "003", "With LINGER 0, messages still queued at close are discarded"),
        Claim("003-4", "003", "context.term() interrupts a lingering socket / closes its sockets"),
        Claim("003-5", "003", "LINGER 1000 makes it more likely that the SUB gets all 5 messages"),
        Claim(
            "U-1",
            "U",
            "With SNDHWM=RCVHWM=0 ('no limit') a PUB/SUB still drops messages (libzmq #4394)",
        ),
        Claim(
            "U-2",
            "U",
            "With HWM 1 on PUB and SUB and a subscriber 10x slower, the subscriber still gets every "
            "message (pyzmq #148, #1100, #1241)",
        ),
        Claim(
            "U-3",
            "U",
            "A message sent after an idle gap sees far higher latency (>200 us) than back-to-back "
            "messages (libzmq #4673)",
        ),
        Claim(
            "U-4",
            "U",
            "ZMQ_CONFLATE on a PUB with several subscribers: only one subscriber (the first over tcp, the "
            "last over ipc) gets messages (libzmq #3323)",
        ),
        Claim(
            "U-5",
            "U",
            "A CONFLATE SUB that does not read keeps only the last message, so its memory stays flat "
            "(libzmq #3171 reports it grows)",
        ),
        Claim(
            "U-6",
            "U",
            "PUSH/PULL over tcp loses messages when the connection is reset (libzmq #3392): how many, "
            "which ones (the kernel buffers' content at the reset?), with a fast and a slow receiver",
        ),
        Claim(
            "U-7",
            "U",
            "A short-lived PUSH (connect, send one message with DONTWAIT, close at once, LINGER 10000) "
            "often loses its message (libzmq #3774, seen on Windows and macOS)",
        ),
        Claim(
            "U-8",
            "U",
            "ZMQ_IMMEDIATE=1 prevents message loss across reconnects (sonic-swss-common PR 1059)",
        ),
        Claim(
            "U-9",
            "U",
            "A SUB with many subscriptions (more than about 1000) loses some of them when the PUB "
            "restarts (libzmq #2258): how many does it keep, and what setting keeps them all?",
        ),
        Claim(
            "U-10",
            "U",
            "A send on a PUSH or DEALER with no peer connected succeeds (the message is queued) unless "
            "ZMQ_IMMEDIATE is set, although the docs say it blocks (libzmq #3248): how many are "
            "accepted, and do they arrive when a peer comes?",
        ),
        Claim(
            "U-11",
            "U",
            "With ZMQ_ROUTER_MANDATORY, after a DEALER with a fixed identity restarts, sends to that "
            "identity fail or are lost even though it is connected again (libzmq #2348, #4603; pyzmq "
            "#1899): under which restart modes, and what does ZMQ_ROUTER_HANDOVER change?",
        ),
        Claim(
            "U-12",
            "U",
            "A libzmq SUB reconnects after the PUB restarts but does not resend its subscriptions, so "
            "it receives nothing (zmq.rs PR 231)",
        ),
        Claim(
            "X-1",
            "X",
            "A SUB that connects after the PUB started misses the first messages (slow joiner)",
        ),
    )
}
