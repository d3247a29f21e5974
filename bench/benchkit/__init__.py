"""Helpers shared by the benchmark scripts in bench/ (not a benchmark; report.py runs none).

Kept in a package so that ``bench/*.py`` stays exactly the list of benchmark scripts. The
scripts import it as ``benchkit`` (their own folder is first on ``sys.path``).
"""
