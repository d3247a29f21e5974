"""Property tests (hypothesis) of bad input at every boundary (issue #10, second part)."""
