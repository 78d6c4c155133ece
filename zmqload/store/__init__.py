"""Where records live, local or at a filesystem URI: a run's Parquet parts read back
(`parquet_parts`) and run directories copied to and from a URI (`remote_runs`). The I/O
under the types and rules of zmqload.contract, which does none."""
