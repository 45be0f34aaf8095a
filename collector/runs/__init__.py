"""A run as the layers above read it (the API, the daemon, the CLI, scripts): looked up once, with one "no run"
answer, and its advice inputs built in one place."""
