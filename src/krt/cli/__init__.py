"""The krt command line (click)."""
