"""Independent oracle for zmqload's verdicts on ZeroMQ folklore.

Plain pyzmq experiments that share no code with zmqload.  One module per
source document (seed_000 .. seed_003) plus user_reports for the user-issue
claims (U-1 .. U-3).  Every public experiment function takes its parameters
explicitly and returns a plain dict of measured facts; every module has a
``python -m tests.oracle.<module> --json [--quick]`` main.

The libzmq measured here is the one bundled with pyzmq (see
``_common.versions()``), not the system libzmq that zmqload's engine links.
"""
