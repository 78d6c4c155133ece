"""`python -m zmqload.report PATH... --out DIR`, and the script spark-submit runs:

    spark-submit --master spark://host:7077 "$(python -c 'import zmqload.report, os; \
        print(os.path.dirname(zmqload.report.__file__))')/__main__.py" runs/ --out report/

An entry point, not part of the library: the one module of zmqload.report that imports the
command line (zmqload.cli.report, which owns the report's arguments and exit statuses).
"""

import os
import sys

if __package__ in (None, ""):
    # Run as a file (spark-submit): the script's own directory must not shadow the standard
    # library (this package has an html module), and zmqload must import by absolute name.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from zmqload.cli.report import main  # noqa: E402 - after the path is set

if __name__ == "__main__":
    sys.exit(main())
