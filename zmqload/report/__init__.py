"""HTML capacity report from the Spark aggregates of zmqload runs (`zmqload report`)."""
