"""Data curation: find the likely label errors in labelled text (``sentiment audit``).

Each module has one job; the command lives in ``cli/audit.py``. What to label next (``sentiment suggest``) is
``sentiment_cli/suggest/``.
"""
