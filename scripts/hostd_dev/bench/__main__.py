"""`python -m hostd_dev.bench`: see `hostd_dev.bench.runner`."""

import sys

from hostd_dev.bench.runner import main

sys.exit(main())
