"""Where records live, local or at a filesystem URI: the record files read and written
(`record_files`: run.json, capacity-search.json, a sweep's file), the packed seq maps in memory or
in files (`bitmaps`), a run's Parquet parts read back (`parquet_parts`) and run directories copied
to and from a URI (`remote_runs`). The I/O under the types and rules of zmqload.contract, which
does none (tests/test_layers.py)."""
