"""`python -m hostd_openai`: run the OpenAI-compatible driver on stdin/stdout."""

from hostd_openai.driver import main

if __name__ == "__main__":
    main()
