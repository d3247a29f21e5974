"""The chaos suite (issue 10): kruntimes on localkube under load while faults are injected.

See ``scenario.py`` for what one scenario does and ``promises.py`` for what it asserts.
"""
