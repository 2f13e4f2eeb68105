"""`python -m hostd.bench`: see `hostd.bench.runner`."""

import sys

from hostd.bench.runner import main

sys.exit(main())
