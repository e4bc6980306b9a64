"""The command line: `entry` is the console script; the app, the error→exit boundary
(main.py) and one module per command group live here."""

import gc
import sys

# Young collections every 50,000 allocations instead of every 700. Importing typer, click,
# yaml, MySQLdb and this package allocates about 25,000 objects that all live to the end, and
# at the default threshold the collector walked them some 50 times before the first statement
# was sent: about 13 M instructions, 10% of what a seed run adds above `import MySQLdb, yaml,
# typer` (docs/architecture.md, Start-up). Still bounded, for explore and workers, which run
# for minutes.
YOUNG_THRESHOLD = 50_000


def entry() -> None:
    gc.set_threshold(YOUNG_THRESHOLD)
    try:
        from .stops import catch_stops, stop_loading

        catch_stops(stop_loading)
        from .main import main

        code = main()
        # The command is done and its clean-up with it; what is still alive goes with the
        # process. Frozen, it is no longer walked by the collections the interpreter makes on
        # its way out: about 14 ms of CPU at the end of every run (docs/architecture.md, start-up).
        gc.freeze()
    except KeyboardInterrupt as exc:  # before main() caught stops itself, or after it returned
        from .stops import told  # imported again if the stop cut its first import short

        code = told(exc)
    sys.exit(code)
