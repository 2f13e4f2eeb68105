"""`python -m hostd_acp`: run the driver; `python -m hostd_acp agents [--probe]`: list agents."""

from __future__ import annotations

import sys


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "agents":
        from hostd_acp.probe import main as agents_main

        sys.exit(agents_main(sys.argv[2:]))
    from hostd_acp.driver import main as driver_main

    driver_main()


if __name__ == "__main__":
    main()
