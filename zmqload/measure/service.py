"""A service of the user's (req-rep, --role producer): its answers from the replies records
(answered, echoed or matched by order, their rate by contract/derived.py's rule), run.json's
`summary.service`. The report computes the same with Spark."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..contract.derived import throughput_span
from ..store.parquet_parts import read_parts


def service_summary(run_dir: str, sent: int, unanswered: int, first_send_ns: int) -> dict[str, Any]:
    """run.json summary.service: requests, answered (echoed + by order), unanswered, the answers' rate."""
    table = read_parts(run_dir, "replies", ["t_reply_ns", "echoed"])
    t_reply = table.column("t_reply_ns").to_numpy() if table is not None else np.zeros(0, np.int64)
    answered = len(t_reply)
    echoed = (
        int(np.count_nonzero(table.column("echoed").to_numpy(zero_copy_only=False)))
        if table is not None
        else 0
    )
    last_reply = int(t_reply.max()) if answered else 0
    counted, span_s = throughput_span(0.0, "none", first_send_ns, last_reply, 0, answered, answered)
    return {
        "requests": sent,
        "answered": answered,
        "unanswered": unanswered,
        "echoed": echoed,
        "by_order": answered - echoed,
        "t_last_reply_ns": last_reply,
        "span_s": span_s,
        "answer_rate": counted / span_s if span_s else 0.0,
    }
