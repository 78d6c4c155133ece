"""Measuring a finished run: the fate of every message (`reconcile`), queue depth over
time (`queue_depth`), whether the producers kept their schedule (`schedule_keeping`), the
latency histogram (`histogram`) and the figures a run returns (`result`)."""
