"""`python -m runwatch`: the same as the `runwatch` command."""

import sys

from runwatch.cli import main

sys.exit(main())
