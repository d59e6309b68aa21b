"""Data curation: find the likely label errors in labelled text (``sentiment audit``) and choose which
unlabelled texts to label next (``sentiment suggest``).

Each module has one job; the commands live in ``cli/audit.py`` and ``cli/suggest.py``.
"""
