"""Benchmark: the project's configs, the notebook's loop and an n-gram peer in one run (``python -m bench``)."""
