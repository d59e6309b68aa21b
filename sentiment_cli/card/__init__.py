"""The model card: everything known about a checkpoint (``facts.py``), as display text (``text.py``) and as the
folder's ``README.md`` (``readme.py``)."""
