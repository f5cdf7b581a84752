"""``python -m latte``: the latte command line (devices, backends, select, policy, run)."""

import sys

from .cli import main

sys.exit(main())
