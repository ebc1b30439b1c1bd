"""``python -m run_journal.cli URL COMMAND ...``: the command line without the console script."""

import sys

from run_journal.cli import main

sys.exit(main())
