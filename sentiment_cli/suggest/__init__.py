"""What to label next (``sentiment suggest``): active learning over a checkpoint's uncertainty.

``run.py`` (the use case: :func:`~.run.suggest`), ``uncertainty.py`` (margin, entropy), ``exclusions.py`` (noise,
duplicates, near-duplicates over the n-gram score's features), ``diverse.py`` (the clustered strategy) and
``picks_file.py`` (the CSV / JSON Lines to fill in). The command lives in ``cli/suggest.py``.
"""
