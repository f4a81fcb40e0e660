"""``python -m kvframe.cli``: the same as the ``kvframe`` command."""

import sys

from kvframe.cli.main import main

sys.exit(main())
