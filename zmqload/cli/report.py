"""`zmqload report`: glue to the Spark report command (zmqload.report.command). Always
listed; without the `report` extra it says which to install."""
from ..report.command import add_arguments, run

NAME = "report"
HELP = "Spark analysis and HTML capacity report of run directories (pip install 'zmqload[report]')"

__all__ = ["NAME", "HELP", "add_arguments", "run"]
