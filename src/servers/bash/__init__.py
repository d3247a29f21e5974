"""The built-in Bash Runtime Server (console script krt-bash-runtime)."""
