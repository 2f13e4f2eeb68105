"""`python -m hostd_protocol schema [PATH]`: write the wire JSON Schema (stdout by default)."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in {"schema"}:
        print("usage: python -m hostd_protocol schema [OUTPUT.json]", file=sys.stderr)
        return 2
    from hostd_protocol.schema_export import wire_schema_json

    text = wire_schema_json()
    if len(args) > 1 and args[1] != "-":
        Path(args[1]).write_text(text, encoding="utf-8")
        print(f"wrote {args[1]}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
