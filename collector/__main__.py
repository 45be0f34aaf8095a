"""`python -m collector`: see `collector.cli`."""

import sys

from collector.cli import main

sys.exit(main())
