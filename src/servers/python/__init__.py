"""The built-in Python Runtime Server (console script krt-python-runtime)."""
