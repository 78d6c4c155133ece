"""Carrying out one run: the controller (`controller`), the one worker lifecycle shared by
producers, consumers and the proxy (`lifecycle`, `producer`, `consumer`, `proxy`), how
workers start (`launch`, `entry`), what the controller knows (`state`) and how the
workers' finals become the run's figures (`collect`)."""

from .run import run
from .state import ProgressListener, ProgressSnapshot

__all__ = ["run", "ProgressListener", "ProgressSnapshot"]
