"""Where records live, local or at a filesystem URI: record files (`record_files`), packed seq maps
(`bitmaps`), Parquet parts read back (`parquet_parts`), run directories copied (`remote_runs`). The
I/O under zmqload.contract, which does none."""
