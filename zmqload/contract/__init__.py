"""The contracts between zmqload's stages, each defined once: the wire header and status
codes (`wire`), the record schemas (`records`), the message fates (`fates`), worker
identities (`ids`), the latency histogram's layout and percentile rule (`histogram`) and
the control messages between the controller and its workers (`control`). Pure data: nothing here imports the engine, Spark or any other stage."""
