"""`python -m hostd_claude_code`: run the Claude Code driver on stdin/stdout frames."""

from hostd_claude_code.driver import main

if __name__ == "__main__":
    main()
